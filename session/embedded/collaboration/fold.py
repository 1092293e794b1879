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
    """``running``, how the worker's loop ended, ``cancelled``, or
    ``start_failed`` (the worker never ran it: ``output`` says why)."""
    output: str = ""
    child_loop: str = ""
    code: str | None = None
    """Why the start failed."""


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
    state_schema: str = ""
    output_schema: str = ""
    turns: int = 0
    notes: str = ""
    last: Decision | None = None
    tasks: dict[str, TaskView] = {}
    receipts: list[Receipt] = []
    finish_order: list[str] = []
    """Keys of the finished tasks, in the order their ends were recorded."""
    unseen: list[str] = []
    """Keys of the tasks that finished after the view the coordinator last
    decided on (what ``wait`` waits for)."""
    ended: bool = False
    status: str = ""
    output: str = ""
    code: str | None = None
    detail: str = ""
    protocol_error: str = ""
    """The first record that breaks the collaboration protocol (a resumed
    driver refuses such a stream with ``collaboration.protocol.invalid``)."""

    @property
    def running(self) -> list[TaskView]:
        return [t for t in self.tasks.values() if t.status == "running"]

    @property
    def finished(self) -> int:
        return len(self.finish_order)

    @property
    def finished_since_turn(self) -> int:
        return len(self.unseen)


def fold_collaboration(state: CollabState, record: Record) -> CollabState:
    """Apply one collaboration record (pure; in place, like loop fold).  A
    record the driver could not have written is noted in ``protocol_error``
    (the first one) and otherwise skipped."""
    e = record.event
    broken = _protocol_error(state, e)
    if broken:
        state.protocol_error = state.protocol_error or f"seq {record.seq}: {broken}"
        return state
    match e:
        case CollabStarted():
            state.collab_id, state.input, state.workers = e.collab_id, e.input, e.workers
            state.max_turns, state.max_tasks = e.max_turns, e.max_tasks
            state.max_concurrent_tasks = e.max_concurrent_tasks
            state.max_controls_per_turn = e.max_controls_per_turn
            state.state_schema, state.output_schema = e.state_schema, e.output_schema
        case CollabTurn():
            state.turns = e.number
            state.notes = e.decision.state
            state.last = e.decision
            state.receipts = []
            # Tasks that finished after the view the coordinator decided on
            # have not been seen yet: they satisfy a ``wait`` at once.
            seen = e.seen_finished if e.seen_finished >= 0 else len(state.finish_order)
            state.unseen = state.finish_order[seen:]
        case CollabTaskStarted():
            state.tasks[e.key] = TaskView(
                key=e.key,
                worker=e.worker,
                input=e.input,
                started_turn=e.turn,
                child_loop=e.child_loop,
            )
        case CollabTaskFinished():
            task = state.tasks[e.key]
            if task.status == "running":
                task.status, task.output, task.code = e.status, e.output, e.code
                state.finish_order.append(e.key)
                state.unseen.append(e.key)
        case CollabControlled():
            state.receipts.append(Receipt(key=e.key, kind=e.kind, receipt=e.receipt))
        case CollabEnded():
            state.ended, state.status, state.output, state.code = True, e.status, e.output, e.code
            state.detail = e.detail
        case _:
            pass
    return state


def _protocol_error(state: CollabState, e: object) -> str:
    """Why ``e`` cannot follow ``state`` on a collaboration's stream ("" when
    it can).  A task's end recorded twice is not one: a cancellation and the
    task's own end may both land."""
    if isinstance(e, CollabStarted):
        return "a second collab.started" if state.collab_id else ""
    if not state.collab_id:
        return "a record before collab.started"
    if state.ended:
        return "a record after collab.ended"
    match e:
        case CollabTurn() if e.number != state.turns + 1:
            return f"turn {e.number} after turn {state.turns}"
        case CollabTaskStarted() if e.key in state.tasks:
            return f"task {e.key!r} started twice"
        case CollabTaskFinished() | CollabControlled() if e.key not in state.tasks:
            return f"task {e.key!r} was never started"
        case _:
            return ""
