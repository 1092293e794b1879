"""Which commits wait for durability and which are pipelined behind the next.

Rules: a commit made only of the kinds in ``PIPELINED`` gates nothing outside
the process, so its caller need not wait for the disk: the writer folds it at
once, appends it with (or before) the next commit that must be durable, and
publishes it only once it is durable.  Every other commit waits.  The reasons,
kind by kind, are in ``docs/journal.md`` ("Which records wait").
"""

from __future__ import annotations

from collections.abc import Sequence

from journal.events import (
    ContextMeasured,
    Event,
    ModelCallStarted,
    ModelMessageCommitted,
    ModelOutput,
    ToolCompleted,
    ToolProgress,
)

__all__ = ["PIPELINED", "may_pipeline"]

PIPELINED: tuple[type, ...] = (
    ModelCallStarted,
    ModelOutput,
    ModelMessageCommitted,
    ContextMeasured,
    ToolCompleted,
    ToolProgress,
)
"""Event kinds whose loss in a crash leaves a state restore already settles:
a model call that is open, or never started, is called again (its streamed
pieces and its reply are the model's, not the world's); a tool whose
completion is lost is an unknown effect, exactly as when the crash comes
while that completion is being appended today (the writer starts appending
it within ``writer.LINGER``; only the model call after it no longer waits).
A lost ``tool.progress`` loses words for people, nothing the loop reads."""


_KINDS = frozenset(PIPELINED)
"""By exact type (docs/architecture.md, "Found by exact type"): every commit
asks (a subclass of a kind, which the catalog never makes, would wait)."""


def may_pipeline(events: Sequence[Event]) -> bool:
    """Every event of the commit is of a pipelined kind, and it is not made of
    streamed pieces alone: those are flushed while the reply streams so that a
    crash keeps what was already shown (the reply is restored cut short, not
    lost), which only holds if the flush waits."""
    streamed = True
    for event in events:
        kind = type(event)
        if kind not in _KINDS:
            return False
        if kind is not ModelOutput:
            streamed = False
    return not streamed
