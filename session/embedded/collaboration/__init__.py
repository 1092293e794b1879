"""Coordinator/worker collaboration on one session.

A coordinator (a plain Python policy, or any loop definition answering in
JSON) is shown a ``Turn`` -- its number, its own notes, the workers, every
task so far with how it started and ended, and the receipts of its last
controls -- and returns a ``Decision``:

* ``tasks`` start worker loops under unique keys (child loops of the session);
* ``controls`` steer or cancel running tasks;
* ``mode``: ``continue`` runs the next coordinator turn at once, ``wait`` runs
  it once a task it has not seen finish has finished, ``complete`` returns
  ``output`` (and carries no tasks or controls) and cancels what still runs.

The grammar (which mode may carry what, ``grammar.py``), the bounds and every
failure code are in ``docs/collaboration.md``.

Every step is an event on the collaboration's own stream (loop id
``collab:<id>``), folded by the pure ``fold_collaboration``; so a collaboration
restores (``Session.resume_collaboration``) and replays like anything else.
"""

from journal.events import Control as Control
from journal.events import Decision as Decision
from journal.events import TaskSpec as TaskSpec

from .definition import COUNTER_LIMIT as COUNTER_LIMIT
from .definition import Collaboration as Collaboration
from .definition import CollaborationError as CollaborationError
from .definition import Worker as Worker
from .driver import parse_decision as parse_decision
from .fold import CollabState as CollabState
from .fold import TaskView as TaskView
from .fold import Turn as Turn
from .fold import WorkerInfo as WorkerInfo
from .fold import fold_collaboration as fold_collaboration
from .grammar import next_step as next_step
from .person import person as person
from .status import CollabPhase as CollabPhase
from .status import CollabStatus as CollabStatus

__all__ = [
    "COUNTER_LIMIT",
    "CollabPhase",
    "CollabState",
    "CollabStatus",
    "Collaboration",
    "CollaborationError",
    "Control",
    "Decision",
    "TaskSpec",
    "TaskView",
    "Turn",
    "Worker",
    "WorkerInfo",
    "fold_collaboration",
    "next_step",
    "parse_decision",
    "person",
]
