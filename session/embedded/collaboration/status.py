"""What a collaboration is doing, from its folded stream and its coordinator
loop's state (pure, like the folds it reads).

A coordinator whose subtree holds unresolved effects (an open gate, a tool
call whose outcome is unknown, a child still running) cannot authorize a
decision: the driver waits for them, and ``describe`` says so.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import msgspec

from loopruntime import LoopState

from .fold import CollabState
from .grammar import wait_satisfied

__all__ = ["CollabPhase", "CollabStatus", "describe", "unresolved_effects"]


class CollabPhase(enum.Enum):
    DECIDING = "deciding"
    """The coordinator is taking its turn."""
    COORDINATOR_UNRESOLVED = "coordinator unresolved"
    """The coordinator answered, or is waiting, with effects unresolved: its
    decision counts only once they are."""
    WAITING_FOR_TASKS = "waiting for tasks"
    COMPLETED = "completed"
    FAILED = "failed"


class CollabStatus(msgspec.Struct, frozen=True, kw_only=True):
    collab_id: str
    phase: CollabPhase
    turns: int
    running: tuple[str, ...]
    """Keys of the tasks still running."""
    unresolved: tuple[str, ...] = ()
    """What the coordinator must see resolved before its decision counts."""
    code: str | None = None
    """Why it failed."""


def unresolved_effects(coordinator: LoopState) -> tuple[str, ...]:
    """The coordinator's open gates, unknown tool calls and running children."""
    return (
        *(f"gate {g.gate_id} ({g.kind})" for g in coordinator.gates.values()),
        *(f"unknown effect {t.execution_id} ({t.name})" for t in coordinator.unknown.values()),
        *(f"child {c.child_loop}" for c in coordinator.children.values() if c.status == "running"),
    )


def describe(state: CollabState, loops: Mapping[str, LoopState]) -> CollabStatus:
    """The collaboration's status; ``loops``: the session's loop states."""
    running = tuple(t.key for t in state.running)
    coordinator = loops.get(f"collab:{state.collab_id}/coordinator")
    unresolved = unresolved_effects(coordinator) if coordinator is not None else ()
    phase = CollabPhase.DECIDING
    if state.ended:
        phase = CollabPhase.COMPLETED if state.status == "completed" else CollabPhase.FAILED
        unresolved = ()
    elif unresolved:
        phase = CollabPhase.COORDINATOR_UNRESOLVED
    elif state.last is not None and state.last.mode == "wait" and not wait_satisfied(state):
        phase = CollabPhase.WAITING_FOR_TASKS
    return CollabStatus(
        collab_id=state.collab_id,
        phase=phase,
        turns=state.turns,
        running=running,
        unresolved=unresolved,
        code=state.code,
    )
