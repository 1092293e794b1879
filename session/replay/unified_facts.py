"""What the unified model reads from the records beyond the conversation tree.

One pass over a session's records: the joins the tree does not keep (the
child a result reports, the calls that launched children, redacted inputs,
failed calls, turn times, the tool uses replies asked for and the results
that answer them), what the runtime injected into a model's context (a
hook's context, its reminder), which loops judge others, and the session's
activity windows (segments).  A new event kind is a case of ``read_facts``'s
``match`` (mypy insists).
"""

from __future__ import annotations

from collections import defaultdict
from typing import assert_never

import msgspec

from journal import Record
from journal import events as ev
from journal.content import ToolUse

from .text import blocks_text

RESULT_MARKER = "[result of child loop "
"""How the runtime words a child's result input (the join old journals need)."""

REMINDER_CODE = "output_required"
"""The code of the notice the runtime commits with its reminder steering when a
reply lacks the typed answer (``loopruntime.notices.OUTPUT_REQUIRED``; a test
pins that the two agree)."""

BUDGET_CODE = "budget_exhausted"
"""The code of the notice the runtime commits with the steering that tells the
model a token budget ended its turn (``loopruntime.notices.BUDGET_EXHAUSTED``)."""

RUNTIME_STEERING = {REMINDER_CODE: "reminder", BUDGET_CODE: "budget"}
"""Notice code -> the source of the steering the runtime writes with it."""

COORDINATOR = "coordinator"
"""The execution id a collaboration's provenance gives its coordinator's loop."""


class Facts(msgspec.Struct, kw_only=True):
    """What the tree does not keep, read from the records in one pass."""

    redacted: set[str] = msgspec.field(default_factory=set)
    """tool_use ids whose recorded input is the redacted form."""
    reports: dict[str, str] = {}
    """input id -> the child loop it reports, as the record says."""
    started: dict[str, list[tuple[int, ev.ChildStarted]]] = {}
    """child loop -> the child.started records that name it."""
    launches: dict[str, list[tuple[int, ev.ChildStarted]]] = {}
    """execution id of the delegating call -> the child.started records it made."""
    finished: dict[str, tuple[int, ev.ChildFinished]] = {}
    finished_in: dict[str, str] = {}
    """child loop -> the loop its child.finished record is on (its parent's)."""
    failed_calls: dict[str, tuple[int, str]] = {}
    """effect id -> (seq, code) of its model.call_failed."""
    turn_at: dict[tuple[str, int], list[tuple[int, int]]] = {}
    """(loop, turn) -> [(seq, at)] of its turn.started and turn.ended."""
    steers: dict[str, list[int]] = {}
    """steer id -> the seqs of its steer.queued and steer.applied."""
    auxiliary: set[str] = msgspec.field(default_factory=set)
    input_seq: dict[str, int] = {}
    """input id -> the seq that cancelled it by request."""
    injected: dict[int, ev.HookDecided] = {}
    """seq -> a hook's ``context`` decision: its text entered the model context."""
    reminders: dict[str, str] = {}
    """steer id -> its source (``RUNTIME_STEERING``): steering the runtime wrote
    (its reminder of a typed answer, its word that a budget ended the turn),
    not a person."""
    judges: set[str] = msgspec.field(default_factory=set)
    """Loops that decide on other streams' work: a collaboration's coordinator."""
    requested: set[tuple[str, str]] = msgspec.field(default_factory=set)
    """(loop, tool_use id) of every tool use a reply asked for."""
    answers: dict[tuple[str, str], tuple[int, str]] = {}
    """(loop, tool_use id) -> (seq, text) of the last record answering it."""
    direct: dict[tuple[str, int], tuple[str, ...]] = {}
    """(loop, turn) -> the tool_use ids whose results its ``turn.ended`` names
    as the answer (direct tools)."""
    refused: list[tuple[str, int, ev.TurnRejected]] = []
    """(loop, seq, record) of every submit the runtime refused."""
    root: str = ""
    """A fork's conversation root (``session.forked.root``, else its source);
    empty for a session that is no fork."""


# One pass with one ``match`` over the event union, past 80 lines on purpose:
# the facts of a record often depend on the record before it in its loop, and
# one match lets the type checker prove every event kind is read or ignored.
def read_facts(records: list[Record]) -> Facts:
    f = Facts()
    f.started = defaultdict(list)
    f.turn_at = defaultdict(list)
    f.launches = defaultdict(list)
    f.steers = defaultdict(list)
    previous: dict[str, Record] = {}
    """loop -> its last record so far."""
    for r in records:
        e = r.event
        before, previous[r.loop] = previous.get(r.loop), r
        match e:
            case ev.ToolStarted():
                if e.input_digest:
                    f.redacted.add(e.tool_use_id)
            case ev.ModelMessageCommitted():
                for block in e.message.blocks:
                    if isinstance(block, ToolUse):
                        f.requested.add((r.loop, block.id))
            case ev.ToolCompleted() | ev.ToolResolved():
                f.answers[(r.loop, e.tool_use_id)] = (r.seq, blocks_text(e.content))
            case ev.ToolAbandoned():
                f.answers[(r.loop, e.tool_use_id)] = (r.seq, "")
            case ev.InputQueued():
                if e.child_loop is not None:
                    f.reports[e.input_id] = e.child_loop
            case ev.ChildStarted():
                f.started[e.child_loop].append((r.seq, e))
                f.launches[e.provenance.execution_id].append((r.seq, e))
            case ev.ChildFinished():
                f.finished[e.child_loop] = (r.seq, e)
                f.finished_in[e.child_loop] = r.loop
            case ev.ModelCallFailed():
                f.failed_calls[e.effect_id] = (r.seq, e.code)
            case ev.SessionForked():
                f.root = e.root or e.source
            case ev.TurnStarted():
                f.turn_at[(r.loop, e.turn)].append((r.seq, r.at))
            case ev.TurnEnded():
                f.turn_at[(r.loop, e.turn)].append((r.seq, r.at))
                if e.direct:
                    f.direct[(r.loop, e.turn)] = e.direct
            case ev.TurnRejected():
                f.refused.append((r.loop, r.seq, e))
            case ev.CollabStarted():
                f.auxiliary.add(r.loop)
            case ev.SteerQueued():
                f.steers[e.steer_id].append(r.seq)
                source = runtime_steering(before, r)
                if source is not None:
                    f.reminders[e.steer_id] = source
            case ev.HookDecided():
                if e.action == "context":
                    f.injected[r.seq] = e
            case ev.LoopStarted():
                parent = e.parent
                if (
                    parent
                    and parent.parent_loop in f.auxiliary
                    and parent.execution_id == COORDINATOR
                ):
                    f.judges.add(r.loop)
            case ev.SteerApplied():
                for steer_id in e.steer_ids:
                    f.steers[steer_id].append(r.seq)
            case ev.InputCancelled():
                if e.reason == "requested":
                    f.input_seq[e.input_id] = r.seq
            case (
                ev.LoopConfigured()
                | ev.LoopReconfigured()
                | ev.LoopInferenceChanged()
                | ev.LoopToolsReplaced()
                | ev.LoopModeChanged()
                | ev.LoopPaused()
                | ev.LoopResumed()
                | ev.LoopStopped()
                | ev.ToolsLoaded()
                | ev.ModelCallStarted()
                | ev.ModelOutput()
                | ev.ToolProgress()
                | ev.GateOpened()
                | ev.GateResolved()
                | ev.GateCancelled()
                | ev.GateReviewed()
                | ev.CompactionStarted()
                | ev.CompactionCommitted()
                | ev.CompactionRejected()
                | ev.ContextMeasured()
                | ev.DeadlinePassed()
                | ev.Notice()
                | ev.CommandKeyed()
                | ev.SessionCheckpoint()
                | ev.CollabTurn()
                | ev.CollabTaskStarted()
                | ev.CollabTaskFinished()
                | ev.CollabControlled()
                | ev.CollabEnded()
            ):
                pass  # the conversation tree carries what the model needs of these
            case _:
                assert_never(e)
    return f


def runtime_steering(before: Record | None, r: Record) -> str | None:
    """The source of steering the runtime wrote (None: a person's).  Its
    steering comes in one commit right after its notice, with the same cause;
    a person's steering never follows such a notice."""
    if (
        before is not None
        and isinstance(before.event, ev.Notice)
        and before.cause == r.cause
        and before.seq == r.seq - 1
    ):
        return RUNTIME_STEERING.get(before.event.code)
    return None


def segment_windows(records: list[Record]) -> list[tuple[int, int]]:
    """The session's activity windows as (first seq, last seq).

    A window opens at an external input queued while the session is quiet and
    closes at the record after which no loop has a turn open, an input queued
    or a child unfinished or its result undelivered; a window still open at
    the head ends at the head."""
    open_turns: set[str] = set()
    queued: set[str] = set()
    children: set[str] = set()
    delivering: set[str] = set()
    """Loops a finished child's result is on its way to."""
    windows: list[tuple[int, int]] = []
    start: int | None = None
    for r in records:
        e = r.event
        if isinstance(e, ev.InputQueued):
            queued.add(e.input_id)
            if e.trigger != "external":
                delivering.discard(r.loop)
            if start is None and e.trigger == "external":
                start = r.seq
        elif isinstance(e, ev.InputCancelled):
            queued.discard(e.input_id)
        elif isinstance(e, ev.TurnStarted):
            open_turns.add(r.loop)
            queued.difference_update(e.input_ids)
            if start is None:
                start = r.seq
        elif isinstance(e, ev.TurnEnded):
            open_turns.discard(r.loop)
        elif isinstance(e, ev.ChildStarted):
            children.add(e.child_loop)
        elif isinstance(e, ev.ChildFinished):
            children.discard(e.child_loop)
            if not e.rejected:
                delivering.add(r.loop)  # its result input follows in the same commit
        if start is not None and not (open_turns or queued or children or delivering):
            windows.append((start, r.seq))
            start = None
    if start is not None and records:
        windows.append((start, records[-1].seq))
    return windows
