"""A collaboration's state, folded from its own stream, and what the
coordinator is shown of it each turn.

``fold_collaboration`` is pure, like the loops' fold: live state and a
resumed collaboration are the same fold of the same records.
"""

from __future__ import annotations

import msgspec

from journal import Record
from journal.events import (
    CollabControlled,
    CollabEnded,
    CollabStarted,
    CollabTaskFinished,
    CollabTaskStarted,
    CollabTurn,
    Decision,
)

__all__ = ["CollabState", "Receipt", "TaskView", "Turn", "WorkerInfo", "fold_collaboration"]


class WorkerInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str = ""


class TaskView(msgspec.Struct, kw_only=True):
    key: str
    worker: str
    input: str
    started_turn: int
    status: str = "running"
    output: str = ""
    child_loop: str = ""


class Receipt(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    kind: str
    receipt: str


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    number: int
    input: str
    state: str
    workers: tuple[WorkerInfo, ...]
    tasks: tuple[TaskView, ...]
    controls: tuple[Receipt, ...]


class CollabState(msgspec.Struct, kw_only=True):
    """A collaboration, folded from its stream."""

    collab_id: str = ""
    input: str = ""
    workers: tuple[str, ...] = ()
    max_turns: int = 0
    max_tasks: int = 0
    max_concurrent_tasks: int = 0
    max_controls_per_turn: int = 0
    """The bounds recorded when the collaboration started: a resumed driver
    keeps them whatever the restoring code passes."""
    turns: int = 0
    notes: str = ""
    last: Decision | None = None
    tasks: dict[str, TaskView] = {}
    receipts: list[Receipt] = []
    finished_since_turn: int = 0
    """Tasks that finished since the coordinator's last view of them (what
    ``wait`` waits for)."""
    ended: bool = False
    status: str = ""
    output: str = ""
    code: str | None = None

    @property
    def running(self) -> list[TaskView]:
        return [t for t in self.tasks.values() if t.status == "running"]

    @property
    def finished(self) -> int:
        return sum(1 for t in self.tasks.values() if t.status != "running")


def fold_collaboration(state: CollabState, record: Record) -> CollabState:
    """Apply one collaboration record (pure; in place, like loop fold)."""
    e = record.event
    match e:
        case CollabStarted():
            state.collab_id, state.input, state.workers = e.collab_id, e.input, e.workers
            state.max_turns, state.max_tasks = e.max_turns, e.max_tasks
            state.max_concurrent_tasks = e.max_concurrent_tasks
            state.max_controls_per_turn = e.max_controls_per_turn
        case CollabTurn():
            state.turns = e.number
            state.notes = e.decision.state
            state.last = e.decision
            state.receipts = []
            # Tasks that finished after the view the coordinator decided on
            # have not been seen yet: they satisfy a ``wait`` at once.
            state.finished_since_turn = (
                state.finished - e.seen_finished if e.seen_finished >= 0 else 0
            )
        case CollabTaskStarted():
            state.tasks[e.key] = TaskView(
                key=e.key,
                worker=e.worker,
                input=e.input,
                started_turn=e.turn,
                child_loop=e.child_loop,
            )
        case CollabTaskFinished():
            task = state.tasks.get(e.key)
            if task is not None and task.status == "running":
                task.status, task.output = e.status, e.output
                state.finished_since_turn += 1
        case CollabControlled():
            state.receipts.append(Receipt(key=e.key, kind=e.kind, receipt=e.receipt))
        case CollabEnded():
            state.ended, state.status, state.output, state.code = True, e.status, e.output, e.code
        case _:
            pass
    return state
