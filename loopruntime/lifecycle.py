"""A loop's life as a state machine: what it is doing, and what may happen next.

Everything that changes a loop's phase is a ``Step`` looked up in
``TRANSITIONS``; a step not in the phase's row is a bug in the actor and
raises ``LifecycleError`` naming both.  The actor's own presence (a task
serving the mailbox, or none) is the second, smaller machine ``ACTOR``.
A pause, which the fold owns, holds the steps in ``HELD`` until the resume.
Pure: no trio, no I/O.  ``docs/architecture.md`` ("The loop's lifecycle")
tells the whole life with both tables.
"""

from __future__ import annotations

import enum

from .errors import LifecycleError

__all__ = [
    "ACTOR",
    "HELD",
    "TRANSITIONS",
    "Actor",
    "ActorStep",
    "Phase",
    "Step",
    "advance",
    "held",
    "move",
]


class Phase(enum.Enum):
    """What works on the loop's context."""

    IDLE = "idle"
    """Nothing: no turn, no compaction.  The loop waits for a command."""
    TURN = "turn"
    """A turn started and has not ended (running, or due to run)."""
    COMPACTING = "compacting"
    """A compaction runs; no turn is open in this process."""
    TURN_COMPACTING = "turn_compacting"
    """A turn waits at a person's gate while a requested compaction runs."""
    STOPPING = "stopping"
    """``Shutdown`` was taken: the running work is being stopped, no new work starts."""
    STOPPED = "stopped"
    """The actor has exited; every command and waiter is refused."""


class Step(enum.Enum):
    """What happens to a loop."""

    START_TURN = "start_turn"
    END_TURN = "end_turn"
    START_COMPACTION = "start_compaction"
    END_COMPACTION = "end_compaction"
    SHUT_DOWN = "shut_down"
    CLOSE = "close"
    """The actor exits (after ``Shutdown``, or because a task of the loop failed)."""


TRANSITIONS: dict[Phase, dict[Step, Phase]] = {
    Phase.IDLE: {
        Step.START_TURN: Phase.TURN,
        Step.START_COMPACTION: Phase.COMPACTING,
        Step.SHUT_DOWN: Phase.STOPPING,
        Step.CLOSE: Phase.STOPPED,
    },
    Phase.TURN: {
        Step.END_TURN: Phase.IDLE,
        # Only while the turn waits on a person (the actor checks the gate).
        Step.START_COMPACTION: Phase.TURN_COMPACTING,
        Step.SHUT_DOWN: Phase.STOPPING,
        Step.CLOSE: Phase.STOPPED,
    },
    Phase.COMPACTING: {
        Step.END_COMPACTION: Phase.IDLE,
        Step.SHUT_DOWN: Phase.STOPPING,
        Step.CLOSE: Phase.STOPPED,
    },
    Phase.TURN_COMPACTING: {
        Step.END_TURN: Phase.COMPACTING,
        Step.END_COMPACTION: Phase.TURN,
        Step.SHUT_DOWN: Phase.STOPPING,
        Step.CLOSE: Phase.STOPPED,
    },
    Phase.STOPPING: {
        # The work stopped by the shutdown ends; nothing new starts.
        Step.END_TURN: Phase.STOPPING,
        Step.END_COMPACTION: Phase.STOPPING,
        Step.CLOSE: Phase.STOPPED,
    },
    Phase.STOPPED: {
        # A task of a failed loop may end after the actor closed it.
        Step.END_TURN: Phase.STOPPED,
        Step.END_COMPACTION: Phase.STOPPED,
        Step.CLOSE: Phase.STOPPED,
    },
}


HELD: frozenset[Step] = frozenset({Step.START_TURN, Step.START_COMPACTION})
"""The steps a paused loop does not take: they wait for its resume.

A pause is not a phase: the fold owns it (``LoopState.paused``, from
``loop.paused`` / ``loop.resumed``), so it survives restore and failover, and
it is orthogonal to the phase (a turn stays open across a pause, and the
step it was running finishes).  Every other step is taken as its phase's row
says: a running turn ends, a compaction ends, a shutdown stops the loop."""


def held(step: Step, paused: bool) -> bool:
    """Whether ``step`` waits: the loop is paused and ``step`` is in ``HELD``."""
    return paused and step in HELD


def advance(phase: Phase, step: Step, loop_id: str = "") -> Phase:
    """The phase ``step`` moves ``phase`` to; ``LifecycleError`` when the row
    of ``phase`` has no such step."""
    try:
        return TRANSITIONS[phase][step]
    except KeyError:
        raise LifecycleError(phase.value, step.value, loop_id) from None


class Actor(enum.Enum):
    """Whether a task serves the loop's mailbox."""

    SERVING = "serving"
    """A task (the serving task) takes commands from the mailbox."""
    PARKED = "parked"
    """No task serves the mailbox: the actor is data until an item arrives.
    In ``Phase.IDLE`` the loop then holds no task, nursery or cancel scope
    (an idle loop's memory); in ``Phase.TURN`` the turn runs in the task
    that parked, and a command arriving starts a new serving task."""


class ActorStep(enum.Enum):
    PARK = "park"
    WAKE = "wake"
    """An item arrived at a parked actor's mailbox (or the parked task took
    the turn's end itself)."""


ACTOR: dict[Actor, dict[ActorStep, Actor]] = {
    Actor.SERVING: {ActorStep.PARK: Actor.PARKED},
    Actor.PARKED: {ActorStep.WAKE: Actor.SERVING},
}


def move(actor: Actor, step: ActorStep, loop_id: str = "") -> Actor:
    """``ACTOR``'s ``advance``."""
    try:
        return ACTOR[actor][step]
    except KeyError:
        raise LifecycleError(actor.value, step.value, loop_id) from None
