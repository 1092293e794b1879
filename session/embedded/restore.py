"""Restore: fold a session's journal and settle what a crash left open.

Settling never replays anything silently: an effect that started and never
completed becomes an unknown effect the host resolves, unless its tool may
be re-run (``replay_safe``), or re-entered at its open question
(``resumable``), with a stored input that still fits the tool.
docs/restore.md lists what restore does for each thing a crash can leave
open.
"""

from __future__ import annotations

from typing import Any

from journal import Draft, Journal, SessionNotFoundError
from journal.content import Text
from journal.events import (
    CompactionRejected,
    Event,
    GateCancelled,
    Notice,
    ToolAbandoned,
    ToolResolved,
)
from loopruntime import LoopDefinition, LoopState, NotUnknownEffectError, Tool
from loopruntime.host import (
    Accumulator,
    ToolInputError,
    new_id,
    reply_cut_short,
    server_of,
    settle_turn_events,
)

from .checkpoints import read_restored
from .errors import UnknownSessionError

__all__ = ["read_states", "resolve_offline", "settle_restored"]


async def read_states(journal: Journal, session_id: str) -> dict[str, LoopState]:
    """Fold every loop of a session (from its last checkpoint on, when it has one)."""
    return (await read_restored(journal, session_id)).states


def settle_restored(state: LoopState, definition: LoopDefinition) -> list[Event]:
    """The events that settle a restored loop (empty when nothing was open)."""
    if state.stopped:
        return []
    events: list[Event] = []
    unknown: list[str] = []
    replayed: list[str] = []
    if state.compacting is not None:
        # The process stopped while compacting: the attempt ended without
        # changing the context (every original record is still there).
        events.append(
            CompactionRejected(
                attempt_id=state.compacting,
                reason="failed",
                detail="the process stopped before the compaction finished",
            )
        )
    if not state.turn_open:
        return _with_notices(state, events, unknown, replayed)
    events += _gates_of_removed_tools(state, definition)
    if state.open_call is not None:
        acc = Accumulator()
        acc.feed_all(tuple(state.open_output))
        events += settle_turn_events(
            state,
            outcome="crashed",
            reply_end=reply_cut_short(state, acc, "truncated"),
            gate_reason="restore_unavailable",
            code="runtime.crashed",
        )
    else:
        for execution_id, started in state.running.items():
            # Looked up whatever the mode: the call was admitted under the mode
            # of its time, which a later ChangeMode may have narrowed.
            tool = definition.find_tool(started.name)
            # A redacted input need not fit (its digest proves the real one, in the batch).
            if tool is not None and tool.redact_input is None and not _fits(tool, started.input):
                # The tool's schema changed since the call started: re-entering
                # it would fail in the batch, end the session and do so again
                # on every later restore.  Nobody can say what the cut call
                # did, so the host resolves it like any unknown effect.
                tool = None
            question = next(
                (
                    g
                    for g in state.gates.values()
                    if g.kind == "user_input" and g.execution_id == execution_id
                ),
                None,
            )
            if question is not None:
                if tool is not None and tool.resumable:
                    continue  # re-entered with the answer as its continuation
                events.append(GateCancelled(gate_id=question.gate_id, reason="restore_unavailable"))
                events.append(
                    ToolAbandoned(
                        execution_id=execution_id,
                        tool_use_id=started.tool_use_id,
                        reason="restore_unavailable",
                    )
                )
                unknown.append(execution_id)
            elif tool is not None and tool.replay_safe:
                replayed.append(execution_id)  # re-run under the same execution id
            else:
                events.append(
                    ToolAbandoned(
                        execution_id=execution_id,
                        tool_use_id=started.tool_use_id,
                        reason="crashed",
                    )
                )
                unknown.append(execution_id)
    return _with_notices(state, events, unknown, replayed)


def _gates_of_removed_tools(state: LoopState, definition: LoopDefinition) -> list[Event]:
    """A permission gate on a tool the loop no longer offers (a deploy removed
    it) is cancelled with a notice: nobody could run the call it asks about.
    The resumed batch answers that call "no tool named ..." to the model."""
    offered = {
        t.name
        for t in definition.resolved(
            state.mode, max_tokens=state.chosen_max_tokens, tools=state.chosen_tools
        ).tools
    }
    events: list[Event] = []
    for gate in state.gates.values():
        # A server's tool is known once the loop lists the server's tools
        # again; its gate is decided then (``loopruntime.relisting``).
        if (
            gate.kind == "permission"
            and gate.tool_name not in offered
            and server_of(definition, gate.tool_name) is None
        ):
            events += [
                Notice(
                    code="tool_removed",
                    text=(
                        f"tool {gate.tool_name} is no longer offered by the loop's definition; "
                        f"the approval it waited for (gate {gate.gate_id}) is cancelled and the "
                        "call will not run"
                    ),
                    refs=(gate.gate_id,),
                ),
                GateCancelled(gate_id=gate.gate_id, reason="restore_unavailable"),
            ]
    return events


def _fits(tool: Tool, raw: dict[str, Any]) -> bool:
    """Whether a stored call input still parses under the tool's schema."""
    try:
        tool.parse(raw)
    except ToolInputError:
        return False
    return True


def _with_notices(
    state: LoopState, events: list[Event], unknown: list[str], replayed: list[str]
) -> list[Event]:
    """Prefix the settlement with notices saying what restore found."""
    if not events and not replayed:
        return []
    notices: list[Event] = [
        Notice(
            code="restored_after_crash",
            text=(
                f"loop {state.loop} was restored after its process stopped"
                + (f" during turn {state.turn_index}" if state.turn_open else "")
                + "; what was in flight has been settled"
            ),
        )
    ]
    if replayed:
        notices.append(
            Notice(
                code="replaying",
                text=(
                    "these calls of replay-safe tools had started but not completed; they "
                    "run again under the same execution id: " + ", ".join(replayed)
                ),
                refs=tuple(replayed),
            )
        )
    if unknown:
        notices.append(
            Notice(
                code="unknown_effects",
                text=(
                    "these tool calls started but their outcome is unknown; they will not be "
                    "re-run: resolve each with `loopruntime resolve` or Session.resolve "
                    "before the turn can go on: " + ", ".join(unknown)
                ),
                refs=tuple(unknown),
            )
        )
    return notices + events


async def resolve_offline(
    journal: Journal,
    session_id: str,
    execution_id: str,
    result: str,
    *,
    is_error: bool = False,
    principal: str | None = None,
) -> None:
    """Settle an unknown effect without running the session (the CLI's
    ``resolve``).  It takes the session's lease, so a host still running the
    session is fenced and must restore it; the turn continues on restore."""
    # Looked up before the lease is taken: taking it fences the process that
    # runs the session, which a mistyped execution id must never do.
    try:
        found = _holder(await read_states(journal, session_id), execution_id)
    except SessionNotFoundError as exc:
        raise UnknownSessionError(f"there is no session {session_id} in {journal.url}") from exc
    if found is None:
        raise _not_unknown(session_id, execution_id)
    lease = await journal.open_session(session_id, create=False)
    # Read again under the lease: the fenced writer may have settled the call
    # between the first read and the lease.
    states = await read_states(journal, session_id)
    for loop_id, state in states.items():
        started = state.unknown.get(execution_id) or state.running.get(execution_id)
        if started is None:
            continue
        events: list[Event] = []
        if execution_id in state.running:
            # Started and never completed (the process died and no restore
            # settled it yet): the host declares its outcome now.
            events += [
                GateCancelled(gate_id=g.gate_id, reason="restore_unavailable")
                for g in state.gates.values()
                if g.execution_id == execution_id
            ]
            events.append(
                ToolAbandoned(
                    execution_id=execution_id, tool_use_id=started.tool_use_id, reason="crashed"
                )
            )
        events.append(
            ToolResolved(
                execution_id=execution_id,
                tool_use_id=started.tool_use_id,
                content=(Text(text=result),),
                is_error=is_error,
                principal=principal,
            )
        )
        drafts = [Draft(id=new_id("ev_"), loop=loop_id, event=event) for event in events]
        await journal.append(lease, drafts, expected_seq=lease.head)
        return
    raise _not_unknown(session_id, execution_id)


def _holder(states: dict[str, LoopState], execution_id: str) -> str | None:
    """The loop whose call ``execution_id`` has an unknown (or unsettled) outcome."""
    for loop_id, state in states.items():
        if execution_id in state.unknown or execution_id in state.running:
            return loop_id
    return None


def _not_unknown(session_id: str, execution_id: str) -> NotUnknownEffectError:
    return NotUnknownEffectError(
        f"execution {execution_id} has no unknown outcome in session {session_id}; "
        "`loopruntime replay SESSION` shows the unknown effects (✗ lines)"
    )
