"""A tool call cut by its deadline: what it commits, by the kind of tool.

A replay-safe call is tried again (``Limits.tool_retries`` times), then
fails visibly; an atomic one fails visibly (it did nothing); any other's
outcome is unknown until the host resolves it (docs/boundaries.md).
"""

from __future__ import annotations

from journal.content import Text
from journal.events import (
    DeadlineAction,
    DeadlinePassed,
    Event,
    GateCancelled,
    Notice,
    ToolAbandoned,
    ToolCompleted,
)

from .notices import deadline_failure, deadline_unknown
from .ports import ToolsPort
from .tools import Tool

__all__ = ["overrun"]


def overrun(
    loop: ToolsPort, tool: Tool, execution_id: str, tool_use_id: str, seconds: float, retries: int
) -> list[Event]:
    """What a call cut by its deadline commits: the ``deadline.passed`` record
    and its consequence (a retry, a visible failure, or an unknown outcome)."""
    running = loop.state.running.get(execution_id)
    attempt = running.attempt if running is not None else 1
    loop.log.warning(
        "tool_deadline_passed",
        tool=tool.name,
        execution=execution_id,
        seconds=seconds,
        attempt=attempt,
    )

    def passed(action: DeadlineAction) -> DeadlinePassed:
        return DeadlinePassed(
            deadline="tool",
            seconds=seconds,
            turn=loop.state.turn_index,
            ref=execution_id,
            attempt=attempt,
            action=action,
        )

    # A question the call had just opened closes with it (the wait itself is
    # paused, so only a gate opened as the deadline passed can be left).
    closed: list[Event] = [
        GateCancelled(gate_id=g.gate_id, reason="interrupted")
        for g in loop.state.gates.values()
        if g.execution_id == execution_id
    ]
    if tool.replay_safe and attempt <= retries:
        return [*closed, passed("retried")]
    if tool.replay_safe or tool.atomic:
        text = deadline_failure(tool.name, seconds, attempts=attempt, atomic=not tool.replay_safe)
        return [
            *closed,
            passed("failed"),
            ToolCompleted(
                execution_id=execution_id,
                tool_use_id=tool_use_id,
                content=(Text(text=text),),
                disposition="failed",
            ),
        ]
    return [
        *closed,
        passed("unknown"),
        ToolAbandoned(execution_id=execution_id, tool_use_id=tool_use_id, reason="deadline"),
        Notice(
            code="unknown_effects",
            text=deadline_unknown(execution_id, tool.name, seconds),
            refs=(execution_id,),
        ),
    ]
