"""A restored loop meets its MCP servers again: what it commits once they
listed their tools (pure).

Restore decides before any server is connected, so it carries each server's
tools over as the journal recorded them.  When the loop starts, each server
that answered the listing is compared with that record: a tool that vanished
or changed its input schema is a change like a deploy's, recorded as
``loop.reconfigured``, and what a restart left open on it is settled by the
same rules as for a tool a deploy removed or reshaped (docs/restore.md,
"Deploys"): a call that cannot be re-entered becomes an unknown effect, a
permission gate on a vanished tool is cancelled with a notice.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from journal.events import Event, GateCancelled, LoopReconfigured, Notice, ToolAbandoned

from .configuration import changes, relisted_config
from .definition import LoopDefinition
from .state import LoopState
from .tools import Tool

__all__ = ["relisting_events"]


def relisting_events(
    state: LoopState,
    definition: LoopDefinition,
    listed: Sequence[Tool],
    answered: Collection[str],
) -> list[Event]:
    """What a loop that already exists commits once its servers listed their
    tools (``listed``; ``answered``: the names of the servers that did):
    nothing when every answering server lists what the journal recorded."""
    if state.stopped or state.configured is None:
        return []
    config = relisted_config(state.configured, definition, listed, answered)
    found = changes(state.configured, config)
    if not found:
        return []
    events: list[Event] = [LoopReconfigured(config=config, changes=found)]
    if not state.turn_open or state.open_call is not None:
        return events
    gone = {c.name for c in found if c.what == "tool_removed"}
    reshaped = {c.name for c in found if c.what == "tool_schema"}
    unknown: list[str] = []
    settled: list[Event] = []
    for execution_id, started in state.running.items():
        # Left running by the restore: replay-safe, or waiting on its question
        # (resumable).  Neither can go on with a tool that is gone, or with an
        # input written for the schema it had.
        if started.name not in gone | reshaped:
            continue
        question = next(
            (
                g
                for g in state.gates.values()
                if g.kind == "user_input" and g.execution_id == execution_id
            ),
            None,
        )
        if question is not None:
            settled.append(GateCancelled(gate_id=question.gate_id, reason="restore_unavailable"))
        settled.append(
            ToolAbandoned(
                execution_id=execution_id,
                tool_use_id=started.tool_use_id,
                reason="restore_unavailable" if question is not None else "crashed",
            )
        )
        unknown.append(execution_id)
    for gate in state.gates.values():
        if gate.kind == "permission" and gate.tool_name in gone:
            settled += [
                Notice(
                    code="tool_removed",
                    text=(
                        f"tool {gate.tool_name} is no longer listed by its MCP server; the "
                        f"approval it waited for (gate {gate.gate_id}) is cancelled and the "
                        "call will not run"
                    ),
                    refs=(gate.gate_id,),
                ),
                GateCancelled(gate_id=gate.gate_id, reason="restore_unavailable"),
            ]
    if unknown:
        events.append(
            Notice(
                code="unknown_effects",
                text=(
                    "these tool calls started but their tool is no longer listed by its MCP "
                    "server, or its input schema changed, so they cannot be re-run and their "
                    "outcome is unknown: resolve each with `loopruntime resolve` or "
                    "Session.resolve before the turn can go on: " + ", ".join(unknown)
                ),
                refs=tuple(unknown),
            )
        )
    return events + settled
