"""``loopruntime replay --otlp`` and ``--format otel-json``: a session's trace
read from its journal.

The trace is a view of the unified model, so this part sits above replay: the
session is read with replay's readers and its records handed to ``spans_of``.
Never writes.
"""

from __future__ import annotations

from collections.abc import Callable

from ..replay import ReplayInputError, open_for_replay
from ..replay.command import read_until_damaged, say_damaged


async def trace_command(
    url: str,
    session_id: str,
    *,
    otlp: str | None = None,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = print,
) -> int:
    """The session's trace printed as OTLP/JSON, or sent to the OTLP/HTTP
    endpoint ``otlp``.  0 when done; 1 when the endpoint did not take it or
    the journal is damaged (the trace of the records before the damage is
    still given); 2 when the journal or session cannot be read at all, or
    the extra ``otel`` is not installed."""
    try:
        from .otel import otlp_json, send_otlp, spans_of
    except ImportError as exc:
        err(
            f"loopruntime replay: traces need the OpenTelemetry packages ({exc.name} is not "
            "installed); install the extra: pip install 'loopruntime[otel]'"
        )
        return 2
    try:
        async with open_for_replay(url) as journal:
            records, damage = await read_until_damaged(journal, session_id)
    except ReplayInputError as exc:
        err(f"loopruntime replay: {exc}")
        return 2
    spans = spans_of(session_id, records)
    if otlp is None:
        out(otlp_json(spans))
    else:
        problem = await send_otlp(spans, otlp)
        if problem:
            err(f"loopruntime replay: the trace was not exported to {otlp}: {problem}")
            return 1
        out(f"exported {len(spans)} spans of session {session_id} to {otlp}")
    # The trace of what came before the damage is out; now say where it is.
    return 0 if damage is None else say_damaged(damage, err)
