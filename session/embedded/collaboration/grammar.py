"""The decision grammar and the driver's next step, as pure functions of a
folded ``CollabState``.

Everything that decides whether a decision is accepted, and what the
collaboration does next, lives here; the driver only carries it out.  Each
refusal is a ``CollaborationError`` whose ``code`` names the rule (the table
is in docs/collaboration.md).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import msgspec

from journal.events import Decision

from .definition import COUNTER_LIMIT, CollaborationError
from .fold import CollabState

__all__ = [
    "Complete",
    "Decide",
    "Done",
    "Fail",
    "Step",
    "Wait",
    "check_decision",
    "next_step",
    "wait_satisfied",
]

INVALID = "collaboration.decision.invalid"


@dataclass(frozen=True)
class Decide:
    """Run the next coordinator turn."""


@dataclass(frozen=True)
class Wait:
    """A ``wait`` not yet satisfied: block until a task's end is recorded."""


@dataclass(frozen=True)
class Complete:
    output: str


@dataclass(frozen=True)
class Fail:
    code: str
    detail: str


@dataclass(frozen=True)
class Done:
    """The stream already holds ``collab.ended``."""


Step = Decide | Wait | Complete | Fail | Done


def wait_satisfied(state: CollabState) -> bool:
    """A ``wait`` is over once a task the coordinator has not seen end has
    drained; a start failure alone ends it only when no task still runs
    (older running tasks are what the coordinator waits for)."""
    unseen = [state.tasks[key] for key in state.unseen]
    if any(t.status != "start_failed" for t in unseen):
        return True
    return bool(unseen) and not state.running


def next_step(state: CollabState) -> Step:
    """What the collaboration does next, from its folded stream alone."""
    last = state.last
    if state.ended:
        return Done()
    if last is not None and last.mode == "complete":
        return Complete(last.output)
    if last is not None and last.mode == "wait" and not wait_satisfied(state):
        if state.running:
            return Wait()
        return Fail(INVALID, "wait with no running task")
    if state.turns >= COUNTER_LIMIT:
        return Fail(
            "engine.counter.exhausted",
            f"the turn counter reached its end ({COUNTER_LIMIT}); the collaboration cannot "
            "number another turn",
        )
    if state.turns >= state.max_turns:
        return Fail(
            "collaboration.limit.turns",
            f"the coordinator used its {state.max_turns} turns without completing",
        )
    return Decide()


_SHAPES = {
    ("complete", "tasks"): "collaboration.decision.complete_with_tasks",
    ("complete", "controls"): "collaboration.decision.complete_with_controls",
    ("continue", "output"): "collaboration.decision.continue_with_output",
    ("wait", "output"): "collaboration.decision.wait_with_output",
}


def _check_shape(d: Decision) -> None:
    """``complete`` carries an output and no actions; ``continue`` and
    ``wait`` carry no output."""
    parts = (("tasks", bool(d.tasks)), ("controls", bool(d.controls)), ("output", bool(d.output)))
    for part, present in parts:
        code = _SHAPES.get((d.mode, part))
        if code is not None and present:
            raise CollaborationError(f"a {d.mode!r} decision carries no {part}", code=code)
    if d.mode == "complete" and not d.output:
        raise CollaborationError(
            "a 'complete' decision must carry the collaboration's output",
            code="collaboration.decision.complete_without_output",
        )


def check_typed(text: str, schema: type[Any] | None, part: str) -> None:
    """Refuse ``text`` (the decision's ``state`` or ``output``) unless it is
    JSON of ``schema``; the error's ``path`` names where it breaks."""
    if schema is None:
        return
    try:
        msgspec.json.decode(text, type=schema)
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).partition(" - at `")
        path = part + at.rstrip("`").removeprefix("$")
        raise CollaborationError(
            f"the decision's {part} does not match {_name(schema)} at {path}: {message}",
            code=INVALID,
            path=path,
        ) from exc
    except msgspec.DecodeError as exc:
        raise CollaborationError(
            f"the decision's {part} is not JSON of {_name(schema)}: {exc}", code=INVALID, path=part
        ) from exc


def _name(schema: type[Any]) -> str:
    return getattr(schema, "__name__", repr(schema))


def check_decision(
    state: CollabState,
    d: Decision,
    *,
    seen: int,
    defined: Collection[str],
    state_type: type[Any] | None = None,
    output_type: type[Any] | None = None,
) -> None:
    """Refuse a decision that breaks the grammar or a bound, before anything
    of it is recorded.  ``seen``: the finished tasks the coordinator was
    shown; ``defined``: the workers this process has definitions for."""
    _check_shape(d)
    if d.mode != "complete" or d.state:
        # The state is handed to the next turn: a decision that has one must
        # carry it whole (a final decision needs none).
        check_typed(d.state, state_type, "state")
    if d.mode == "complete":
        check_typed(d.output, output_type, "output")
    keys = [t.key for t in d.tasks]
    for t in d.tasks:
        if t.worker not in state.workers:
            raise CollaborationError(f"unknown worker {t.worker!r}", code=INVALID)
        if t.worker not in defined:
            raise CollaborationError(
                f"worker {t.worker!r} has no definition in this process; pass it in the "
                "Collaboration given to resume_collaboration",
                code="collaboration.worker.missing",
            )
        if not t.key or t.key in state.tasks or keys.count(t.key) > 1:
            raise CollaborationError(f"duplicate task key {t.key!r}", code=INVALID)
    for ctl in d.controls:
        if ctl.key not in state.tasks:
            raise CollaborationError(f"control names unknown task {ctl.key!r}", code=INVALID)
    if len(d.controls) > state.max_controls_per_turn:
        raise CollaborationError(
            f"{len(d.controls)} controls in one turn (at most {state.max_controls_per_turn})",
            code="collaboration.limit.controls",
        )
    _check_counts(state, d)
    cancelled = {ctl.key for ctl in d.controls if ctl.kind == "cancel"}
    running = len([t for t in state.running if t.key not in cancelled])
    if d.mode != "complete" and running + len(d.tasks) > state.max_concurrent_tasks:
        raise CollaborationError(
            f"{running + len(d.tasks)} tasks at once (at most {state.max_concurrent_tasks})",
            code="collaboration.limit.concurrent_tasks",
        )
    if d.mode == "wait" and not running and not d.tasks and state.finished <= seen:
        # A task that finished while the coordinator decided is still news.
        raise CollaborationError("wait with no task running or unseen", code=INVALID)


def _check_counts(state: CollabState, d: Decision) -> None:
    if len(state.tasks) + len(d.tasks) > state.max_tasks:
        raise CollaborationError(
            f"more than {state.max_tasks} tasks in all", code="collaboration.limit.tasks"
        )
