"""Compaction: replace old history in the model context with a summary.

Non-destructive: the journal keeps every original record; only the fold's
model context changes, at ``compaction.committed``.  The summary (``summary``
holds its grammar and the ``Compactor``) is committed only if the history it
summarised is still current (compare-and-swap on the basis seq).  Journal
failures propagate (they stop the loop); they are never turned into a
rejection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from journal.content import Message, Text, ToolResult, ToolUse
from journal.events import (
    CompactionCommitted,
    CompactionRejected,
    CompactionStarted,
    CompactionTrigger,
)

from .definition import Limits
from .errors import GuardFailedError, ModelError
from .ports import LoopPort
from .state import LoopState

# The summary's grammar and compactors are re-exported: callers of the older
# layout import them from here.
from .summary import (
    MAX_SUMMARY_CHARS,
    SECTIONS,
    Compactor,
    ModelCompactor,
    Summary,
    SummaryError,
    parse_summary,
    render_summary,
)

__all__ = [
    "MAX_SUMMARY_CHARS",
    "SECTIONS",
    "SUMMARY_HEADER",
    "Compactor",
    "ModelCompactor",
    "Summary",
    "SummaryError",
    "compact",
    "measured_fraction",
    "needs_compaction",
    "obligations_of",
    "parse_summary",
    "render_summary",
    "split_for_compaction",
]


def split_for_compaction(messages: Sequence[Message], keep_exchanges: int) -> int:
    """Index where the retained tail begins (``messages[:index]`` is replaced).

    The tail holds the newest ``keep_exchanges`` exchanges, each led by a
    message a person (or the runtime on their behalf) sent: a user message
    that is not derived and carries no tool results.  So a cut never falls
    between a ``tool_use`` and its ``tool_result``.  An assistant message that
    ends the history with calls still unanswered (a turn waiting at a gate)
    keeps its whole exchange even when ``keep_exchanges`` is 0: its results
    arrive after the compaction and must follow their calls.  Pure."""
    starts = [
        i
        for i, m in enumerate(messages)
        if m.role == "user"
        and not m.derived
        and not any(isinstance(b, ToolResult) for b in m.blocks)
    ]
    last = messages[-1] if messages else None
    if (
        keep_exchanges <= 0
        and last is not None
        and last.role == "assistant"
        and any(isinstance(b, ToolUse) for b in last.blocks)
    ):
        keep_exchanges = 1
    if keep_exchanges <= 0:
        return len(messages)
    if len(starts) < keep_exchanges:
        return 0
    return starts[-keep_exchanges]


def obligations_of(state: LoopState) -> list[str]:
    """What is open in ``state`` and must outlive a compaction, one line each:
    unknown effects, open gates, queued steering, running child loops."""
    out = [
        f"tool call {s.name} (execution {s.execution_id}) has an unknown outcome"
        for s in state.unknown.values()
    ]
    out += [f"gate {g.gate_id} ({g.kind}) is open: {g.prompt}" for g in state.gates.values()]
    out += [f"steering waits to be applied: {s.text}" for s in state.steering]
    out += [
        f"child loop {c.child_loop} ({c.definition}) is running"
        for c in state.children.values()
        if c.status == "running"
    ]
    return out


def measured_fraction(state: LoopState) -> float | None:
    """How full the context was at the last model call, as a fraction of the
    model's window (None: never measured, or the window is unknown)."""
    ctx = state.context
    if ctx is None or not ctx.window:
        return None
    used = ctx.input_tokens + ctx.cache_read_tokens + ctx.cache_creation_tokens + ctx.output_tokens
    return used / ctx.window


def needs_compaction(state: LoopState, limits: Limits) -> bool:
    """Automatic trigger: the measured context reached ``Limits.compact_at``
    of the window and there is history older than the retained tail (more
    than a lone earlier summary) to replace."""
    fraction = measured_fraction(state)
    if limits.compact_at is None or fraction is None or fraction < limits.compact_at:
        return False
    return split_for_compaction(state.messages, limits.retained_exchanges) > 1


SUMMARY_HEADER = "[summary of the earlier conversation]"
"""First line of the derived message that stands for the replaced history."""


# Past 80 lines only by its docstring (the attempt's whole contract); its body
# is three steps: start, summarise (``_summarize``), the guarded commit.
async def compact(
    loop: LoopPort,
    attempt_id: str,
    *,
    trigger: CompactionTrigger,
    cause: str | None = None,
    principal: str | None = None,
) -> None:
    """Run one compaction attempt to its ``compaction.committed`` or
    ``compaction.rejected`` end.

    The basis is ``history_seq`` when the attempt starts; the summarised
    messages are the context at that basis.  ``compaction.committed`` is a
    guarded commit: the session writer appends it only if, once everything
    committed before it is folded, ``history_seq`` still equals the basis
    (and the open obligations it lists are still the open ones); otherwise
    the attempt is ``rejected(stale)``.  The compactor is told the
    obligations open when it starts; the summary message lists those open
    when it commits.  A summary the parser
    refuses is ``rejected(invalid_summary)`` with the parser's reason; a
    compactor that raises is ``rejected(failed)``.  Journal errors propagate
    (they stop the loop): they are never reported as a rejection.  Cancelled
    (the loop shutting down) before its end, the attempt leaves only its
    ``compaction.started``: the context is unchanged.  ``trigger`` is
    ``"auto"`` for the threshold, ``"manual"`` for a request.
    ``principal``: who asked for it (recorded on ``compaction.started``)."""
    state = loop.state
    limits = loop.resolved().limits
    basis = state.history_seq
    # A copy taken at the basis: if the history moves on, the guard fails.
    messages = list(state.messages)
    cut = split_for_compaction(messages, limits.retained_exchanges)
    replaced, retained = messages[:cut], len(messages) - cut
    started = await loop.commit(
        [
            CompactionStarted(
                attempt_id=attempt_id, basis=basis, trigger=trigger, principal=principal
            )
        ],
        cause=cause,
    )
    # The attempt's outcome names its compaction.started record.
    cause = started[0].id
    if all(m.derived for m in replaced):
        # Empty, or only an earlier summary: summarising it again gains nothing.
        await _reject(
            loop,
            attempt_id,
            cause,
            "failed",
            f"nothing to replace: the context holds no more than the "
            f"{limits.retained_exchanges} exchanges it keeps (and any earlier summary)",
        )
        return
    summary = await _summarize(loop, replaced)
    if not isinstance(summary, Summary):
        await _reject(loop, attempt_id, cause, *summary)
        return
    # The obligations the summary carries are those open when it commits
    # (steering may have been queued, a gate answered, while the compactor
    # worked); the guard below makes sure they are still exactly these.
    now_open = obligations_of(state)
    body = render_summary(summary)
    if now_open:
        body += "\nOpen obligations:\n" + "\n".join(f"- {o}" for o in now_open)
    message = Message(role="user", blocks=(Text(text=f"{SUMMARY_HEADER}\n{body}"),), derived=True)
    committed = CompactionCommitted(
        attempt_id=attempt_id,
        basis=basis,
        summary=message,
        replaced=len(replaced),
        retained=retained,
        obligations=tuple(now_open),
    )

    def still_current() -> bool:
        return loop.state.history_seq == basis and obligations_of(loop.state) == now_open

    try:
        # Compare-and-swap: appended only if no history-changing record was
        # folded since the basis and the obligations are still those above
        # (checked by the writer, after everything committed before this has
        # been folded).
        await loop.commit([committed], cause=cause, guard=still_current)
    except GuardFailedError:
        if loop.state.history_seq != basis:
            detail = f"history changed at seq {loop.state.history_seq} after basis {basis}"
        else:
            detail = "the open obligations changed while the summary was being committed"
        await _reject(loop, attempt_id, cause, "stale", detail)


_Rejection = tuple[Literal["invalid_summary", "failed"], str]
"""Why an attempt is rejected, and the detail its record gives."""


async def _summarize(loop: LoopPort, replaced: list[Message]) -> Summary | _Rejection:
    """The compactor's summary of ``replaced``, parsed; or why there is none."""
    compactor = loop.definition.compactor or ModelCompactor()
    try:
        async with loop.outside():
            text = await compactor.summarize(
                replaced, obligations_of(loop.state), model=loop.resolved().model
            )
    except ModelError as exc:
        return "failed", f"compactor model failed ({exc.code}): {exc}"
    except Exception as exc:
        # A compactor bug must not take the loop down: the context is
        # unchanged and the attempt says why.
        return "failed", f"compactor raised {exc!r}"
    if not isinstance(text, str):
        return "invalid_summary", f"the compactor returned {type(text).__name__}, not text"
    try:
        return parse_summary(text)
    except SummaryError as exc:
        return "invalid_summary", str(exc)


async def _reject(
    loop: LoopPort,
    attempt_id: str,
    cause: str,
    reason: Literal["stale", "invalid_summary", "failed"],
    detail: str,
) -> None:
    await loop.commit(
        [CompactionRejected(attempt_id=attempt_id, reason=reason, detail=detail)], cause=cause
    )
