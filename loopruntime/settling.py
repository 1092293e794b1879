"""Closing a turn that stopped early (interrupt, deadline, crash, failure).

Pure: what to commit is decided from loop state alone, so the live turn and
restore's settling of a crash write the same records.  The open reply keeps
what arrived plus a notice (or, with nothing usable, only a notice record),
every ``tool_use`` gets one answer, open gates are cancelled, and queued
input gets the consequences of the outcome.
"""

from __future__ import annotations

from typing import Literal

from journal.events import (
    Event,
    GateCancelReason,
    InputCancelled,
    ModelMessageCommitted,
    Notice,
    Outcome,
    ToolAbandoned,
    TurnEnded,
)

from . import gates
from .model import Accumulator
from .notices import INTERRUPTED_NOTICE, NOT_RUN_RESULT, TRUNCATED_NOTICE, rejected
from .state import LoopState

__all__ = ["queue_consequences", "reply_cut_short", "settle_turn_events"]

_NOTICE_TEXT = {"truncated": TRUNCATED_NOTICE, "interrupted": INTERRUPTED_NOTICE}


def reply_cut_short(
    state: LoopState, acc: Accumulator, notice: Literal["truncated", "interrupted"]
) -> Event:
    """What closes the open model call of ``state`` when its reply stopped early.

    With usable content, the assistant message keeps what arrived plus the
    notice.  With none (nothing decoded, or only an incomplete tool call,
    which is dropped), the notice alone is recorded, naming the call: words
    the model never said must not enter its context and be sent back on every
    later request.  Readers of the journal still see what happened.
    """
    assert state.open_call is not None
    text = _NOTICE_TEXT[notice]
    if not acc.has_content():
        return Notice(code=notice, text=text, refs=(state.open_call,))
    return ModelMessageCommitted(
        effect_id=state.open_call,
        turn=state.turn_index,
        step=state.step,
        message=acc.message(notice=text),
        stop_reason=acc.stop_reason,
        usage=acc.usage,
        notice=notice,
    )


def settle_turn_events(
    state: LoopState,
    *,
    outcome: Outcome,
    reply_end: Event | None,
    gate_reason: GateCancelReason,
    code: str | None = None,
    entered: set[str] | None = None,
    kind: str = "runtime",
    detail: str = "",
) -> list[Event]:
    """Events that close an open turn so the context stays valid: every open
    gate cancelled, the open reply closed (``reply_cut_short``), every unanswered
    tool call answered (abandoned if it had started, not-run otherwise), then
    ``turn.ended`` and the queue consequences.  ``entered`` names the calls
    whose tool function really ran (None: assume every started call did).
    ``kind`` and ``detail`` explain an outcome other than interrupted."""
    events: list[Event] = [*gates.abandoned(state, gate_reason)]
    if reply_end is not None:
        events.append(reply_end)
    for tool_use_id in state.awaiting:
        if tool_use_id in state.results:
            continue
        execution = state.executions.get(tool_use_id)
        ran = execution is not None and (entered is None or execution in entered)
        if (
            execution is not None
            and ran
            and (execution in state.running or execution in state.unknown)
        ):
            events.append(
                ToolAbandoned(execution_id=execution, tool_use_id=tool_use_id, reason="interrupted")
            )
        else:
            events.append(rejected(tool_use_id, NOT_RUN_RESULT, execution_id=execution or ""))
    events.append(
        TurnEnded(
            turn=state.turn_index,
            outcome=outcome,
            kind=None if outcome == "interrupted" else kind,
            code=code,
            detail=detail,
        )
    )
    events.extend(queue_consequences(state, outcome))
    return events


def queue_consequences(state: LoopState, outcome: str) -> list[Event]:
    """After failed, every queued input is cancelled; after interrupted, the
    machine-made ones are (what a person typed stays queued)."""
    if outcome == "failed":
        return [InputCancelled(input_id=q.input_id, reason="turn_failed") for q in state.queued]
    if outcome == "interrupted":
        return [
            InputCancelled(input_id=q.input_id, reason="turn_interrupted")
            for q in state.queued
            if q.trigger != "external"
        ]
    return []
