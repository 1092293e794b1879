"""The journal checker: every invariant a session's journal keeps, each
named in ``RULES`` (``report.py``, with the report it fills).

``check_records`` is pure over records already read; ``check`` only reads,
and also asks the storage whether it is intact (``Journal.check_storage``).
A report names the first bad seq, and damage below the records by table.
docs/replay.md says when each rule fails.

The module is one piece: ``_Checker`` is a single pass over the records in
which each rule reads what earlier records left in the same fold (open
calls, gates, keys, children); split by rule, every part would need that
whole state again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import assert_never

import msgspec

from journal import (
    Journal,
    JournalError,
    Record,
    SessionNotFoundError,
    encode_event,
)
from journal import events as ev
from journal.codec import GENESIS, chain
from journal.content import Message, ToolResult
from loopruntime import LoopState, fold
from loopruntime.host import (
    FoldError,
    image_missing,
    image_state,
    merged,
    unanswered_tool_uses,
)

from .lineage import fork_source_problem
from .report import EVERY, RULES, CheckReport, Problem, Progress
from .writers import read_writers, writer_problems


async def check(
    journal: Journal, session_id: str, *, storage: bool = True, progress: Progress | None = None
) -> CheckReport:
    """Read a session and check every invariant (never writes).

    A record the backend cannot read (damaged bytes, an edited column, a
    broken digest chain, a missing seq, a damaged page) is reported as
    ``journal readable`` at its seq, after every rule has been checked over
    the records before it.  The backend verified the stored digest chain
    while reading, so the records are not re-hashed here (a record written
    under the body-only rule of schema 2 would not verify under today's).
    With ``storage``, the journal's own integrity check runs too
    (``Journal.check_storage``: SQLite's quick check, PostgreSQL's amcheck
    where installed); each damaged table is a ``storage intact`` problem.
    ``SessionNotFoundError`` propagates: a missing session is not a broken
    journal.  ``progress`` hears how far reading and checking got (the
    command draws it on a terminal)."""
    records: list[Record] = []
    unreadable: Problem | None = None
    try:
        async for record in journal.read(session_id):
            records.append(record)
            if progress is not None and not record.seq % EVERY:
                progress.advance(EVERY)
    except SessionNotFoundError:
        raise
    except JournalError as exc:
        seq = getattr(exc, "seq", None) or ((records[-1].seq + 1) if records else 1)
        unreadable = Problem(seq, "journal readable", str(exc))
    if progress is not None:
        progress.advance(len(records) % EVERY)
        progress.phase("checking records", len(records))
    report = await check_read(journal, session_id, records, progress=progress)
    if unreadable is not None:
        report.problems.append(unreadable)
    spans = await read_writers(journal, session_id)
    if isinstance(spans, Problem):
        report.problems.append(spans)
    else:
        # Past unreadable damage the head is unknown: no span is past it.
        head = (records[-1].seq if records else 0) if unreadable is None else 2**63 - 1
        report.problems += writer_problems(spans, head)
    if storage:
        if progress is not None:
            progress.phase("checking the storage")
        try:
            report.storage = await journal.check_storage()
        except SessionNotFoundError:
            raise
        except JournalError as exc:
            report.problems.append(
                Problem(0, "storage intact", f"the storage check could not run: {exc}")
            )
        else:
            report.problems += [
                Problem(0, "storage intact", str(found)) for found in report.storage.problems
            ]
    report.problems.sort(key=lambda p: p.seq)
    return report


async def check_read(
    journal: Journal,
    session_id: str,
    records: Sequence[Record],
    *,
    progress: Progress | None = None,
) -> CheckReport:
    """``check_records`` over records read from ``journal`` (all of a
    session's, or a prefix), and for a fork, its starting state compared with
    its source when the source is in ``journal``."""
    report = check_records(session_id, records, verify_digests=False, progress=progress)
    if len(records) >= 2 and isinstance(records[0].event, ev.SessionForked):
        problem, note = await fork_source_problem(journal, records[0].event, records[1])
        if note:
            report.notes.append(note)
        if problem:
            report.problems.append(Problem(2, "fork base equals its source", problem))
            report.problems.sort(key=lambda p: p.seq)
    return report


def check_records(
    session_id: str,
    records: Sequence[Record],
    *,
    verify_digests: bool = True,
    progress: Progress | None = None,
) -> CheckReport:
    """Check the invariants over records already read (pure).

    With ``verify_digests`` each record's digest is recomputed from the
    previous digest, the record's fields and the re-encoded event (exact for
    records chained by today's whole-record rule, not for those a journal
    kept from schema 2).  Problems are sorted by seq.  ``progress`` hears
    every ``EVERY`` records checked."""
    return _Checker(session_id).run(records, verify_digests, progress)


class _Checker:
    def __init__(self, session_id: str) -> None:
        self.session = session_id
        self.problems: list[Problem] = []
        self.states: dict[str, LoopState] = {}
        self.started: dict[str, ev.ToolStarted] = {}
        self.settled: Counter[str] = Counter()
        self.abandoned: set[str] = set()
        self.unknown: set[str] = set()
        self.gates_open: dict[str, str] = {}
        self.gates_seen: set[str] = set()
        self.gates_closed: set[str] = set()
        self.turns_open: dict[str, int] = {}
        self.compactions: dict[str, int] = {}
        self.checkpoint_seq = 0
        self.checkpoint_messages: dict[str, list[Message]] = {}
        self.checkpoint_verified: dict[str, tuple[list[Message], int]] = {}
        """Per loop, the message list found equal at its last checkpoint, and its length."""
        self.forked = False
        """Seq 1 is a ``session.forked`` marker: seq 2 is the fork's starting state."""

    def bad(self, seq: int, rule: str, detail: str) -> None:
        assert rule in RULES, rule
        self.problems.append(Problem(seq, rule, detail))

    def run(
        self, records: Sequence[Record], verify_digests: bool, progress: Progress | None = None
    ) -> CheckReport:
        expected = 1
        previous = GENESIS
        ids: set[str] = set()
        for done, r in enumerate(records, 1):
            if progress is not None and not done % EVERY:
                progress.advance(EVERY)
            # A fork goes on from its source's state: its records may name
            # records of the source, which are not in the fork.
            if r.cause is not None and r.cause not in ids and not self.forked:
                self.bad(r.seq, "cause names an earlier record", f"no earlier record {r.cause}")
            ids.add(r.id)
            if r.session != self.session:
                self.bad(r.seq, "record belongs to the session", f"record of session {r.session}")
            if r.seq != expected:
                self.bad(r.seq, "seq gap-free", f"expected seq {expected}")
            elif (
                verify_digests
                and chain(
                    previous, r.seq, r.id, r.session, r.loop, r.at, r.cause, encode_event(r.event)
                )
                != r.digest
            ):
                self.bad(r.seq, "digest chain intact", "digest does not chain from the previous")
            expected = r.seq + 1
            previous = r.digest
            state = self.states.setdefault(r.loop, LoopState())
            self.record(r, state)
            try:
                fold(state, r)
            except FoldError as exc:
                self.bad(r.seq, "fold succeeds", str(exc))
            except Exception as exc:
                self.bad(r.seq, "fold succeeds", repr(exc))
            self.after_fold(r, state)
            if r.seq == 2 and self.forked and not isinstance(r.event, ev.SessionCheckpoint):
                self.bad(
                    r.seq, "fork base is a full checkpoint", f"it is a {type(r.event).__name__}"
                )
        self.problems.sort(key=lambda p: p.seq)
        return CheckReport(session=self.session, records=len(records), problems=self.problems)

    def settle(self, seq: int, execution_id: str, tool_use_id: str) -> None:
        started = self.started.get(execution_id)
        if started is None:
            self.bad(seq, "settlement follows its start", f"{execution_id} never started")
            return
        if started.tool_use_id != tool_use_id:
            self.bad(
                seq,
                "settlement names its call",
                f"{execution_id} started for tool_use {started.tool_use_id}, not {tool_use_id}",
            )
        self.settled[execution_id] += 1
        if self.settled[execution_id] > 1:
            self.bad(seq, "tool settled at most once", execution_id)

    def answer(self, seq: int, tool_use_id: str, state: LoopState) -> None:
        """A record that gives the model a result for ``tool_use_id``."""
        if tool_use_id in state.results:
            self.bad(seq, "every tool_use answered exactly once", f"{tool_use_id} answered twice")
        elif tool_use_id not in state.tool_uses:
            self.bad(
                seq,
                "result answers an open tool_use",
                f"no committed assistant message awaits {tool_use_id}",
            )

    def record(self, r: Record, state: LoopState) -> None:
        """Rules checked against the state *before* ``r`` is folded."""
        e = r.event
        match e:
            case (
                ev.ToolStarted()
                | ev.ToolCompleted()
                | ev.ToolAbandoned()
                | ev.ToolResolved()
                | ev.DeadlinePassed()
            ):
                self._tool_rules(r, e, state)
            case (
                ev.GateOpened()
                | ev.GateResolved()
                | ev.GateCancelled()
                | ev.HookDecided()
                | ev.GateReviewed()
            ):
                self._gate_rules(r, e, state)
            case ev.TurnStarted() | ev.TurnEnded() | ev.ModelCallStarted() | ev.CommandKeyed():
                self._turn_rules(r, e, state)
            case ev.CompactionStarted() | ev.CompactionCommitted() | ev.CompactionRejected():
                self._compaction_rules(r, e, state)
            case ev.SessionCheckpoint() | ev.SessionForked():
                self._session_rules(r, e, state)
            case ev.ToolProgress():
                # Written only while its call runs, before the call's result.
                if e.execution_id not in self.started or self.settled[e.execution_id]:
                    self.bad(r.seq, "progress names a running call", e.execution_id)
            case (
                ev.LoopStarted()
                | ev.LoopModeChanged()
                | ev.LoopPaused()
                | ev.LoopResumed()
                | ev.LoopStopped()
                | ev.LoopConfigured()
                | ev.LoopReconfigured()
                | ev.LoopInferenceChanged()
                | ev.LoopToolsReplaced()
                | ev.ToolsLoaded()
                | ev.InputQueued()
                | ev.InputCancelled()
                | ev.SteerQueued()
                | ev.SteerApplied()
                | ev.ModelOutput()
                | ev.ModelMessageCommitted()
                | ev.ModelCallFailed()
                | ev.ContextMeasured()
                | ev.ChildStarted()
                | ev.ChildFinished()
                | ev.Notice()
                | ev.TurnRejected()
                | ev.CollabStarted()
                | ev.CollabTurn()
                | ev.CollabTaskStarted()
                | ev.CollabTaskFinished()
                | ev.CollabControlled()
                | ev.CollabEnded()
            ):
                pass  # no rule reads these before the fold
            case _:
                assert_never(e)

    def _tool_rules(
        self,
        r: Record,
        e: ev.ToolStarted
        | ev.ToolCompleted
        | ev.ToolAbandoned
        | ev.ToolResolved
        | ev.DeadlinePassed,
        state: LoopState,
    ) -> None:
        """A tool call starts once, settles once after its start, and answers
        an open tool_use."""
        seq = r.seq
        match e:
            case ev.ToolStarted():
                if e.execution_id in self.started:
                    self.bad(seq, "tool started once", e.execution_id)
                self.started[e.execution_id] = e
            case ev.ToolCompleted():
                if e.execution_id:
                    self.settle(seq, e.execution_id, e.tool_use_id)
                self.answer(seq, e.tool_use_id, state)
            case ev.ToolAbandoned():
                if e.execution_id not in self.started:
                    self.bad(seq, "settlement follows its start", f"{e.execution_id} never started")
                elif self.settled[e.execution_id] or e.execution_id in self.abandoned:
                    self.bad(seq, "tool settled at most once", f"{e.execution_id} abandoned late")
                elif e.reason == "interrupted":
                    self.settle(seq, e.execution_id, e.tool_use_id)
                    self.answer(seq, e.tool_use_id, state)
                else:
                    self.unknown.add(e.execution_id)
                self.abandoned.add(e.execution_id)
            case ev.ToolResolved():
                if e.execution_id not in self.unknown:
                    self.bad(
                        seq,
                        "settlement follows its start",
                        f"{e.execution_id} was not abandoned with an unknown outcome",
                    )
                else:
                    self.unknown.discard(e.execution_id)
                    self.settle(seq, e.execution_id, e.tool_use_id)
                self.answer(seq, e.tool_use_id, state)
            case ev.DeadlinePassed():
                self.deadline(seq, r.loop, e, state)
            case _:
                assert_never(e)

    def _gate_rules(
        self,
        r: Record,
        e: ev.GateOpened | ev.GateResolved | ev.GateCancelled | ev.HookDecided | ev.GateReviewed,
        state: LoopState,
    ) -> None:
        """A gate opens once and closes once, with its kind; a decision names an
        open tool_use."""
        seq = r.seq
        match e:
            case ev.GateOpened():
                if e.gate_id in self.gates_seen:
                    self.bad(seq, "gate opened once", e.gate_id)
                self.gates_seen.add(e.gate_id)
                self.gates_open[e.gate_id] = e.kind
            case ev.GateResolved() | ev.GateCancelled():
                if e.gate_id in self.gates_closed:
                    self.bad(seq, "gate closed at most once", e.gate_id)
                elif e.gate_id not in self.gates_open:
                    self.bad(seq, "gate closed after it opened", e.gate_id)
                elif isinstance(e, ev.GateResolved) and self.gates_open[e.gate_id] != e.kind:
                    self.bad(seq, "gate resolved with its kind", e.gate_id)
                self.gates_open.pop(e.gate_id, None)
                self.gates_closed.add(e.gate_id)
            case ev.HookDecided() | ev.GateReviewed():
                if e.tool_use_id and e.tool_use_id not in state.tool_uses:
                    self.bad(
                        seq,
                        "decision names an open tool_use",
                        f"no committed assistant message awaits {e.tool_use_id}",
                    )
            case _:
                assert_never(e)

    def _turn_rules(
        self,
        r: Record,
        e: ev.TurnStarted | ev.TurnEnded | ev.ModelCallStarted | ev.CommandKeyed,
        state: LoopState,
    ) -> None:
        """Turns open and close in order; a model call sees a whole context and
        its configured model; a key is used once."""
        seq = r.seq
        match e:
            case ev.TurnStarted():
                if r.loop in self.turns_open:
                    self.bad(
                        seq, "turn ended at most once", f"turn {self.turns_open[r.loop]} still open"
                    )
                elif e.turn != state.turn_index + 1:
                    self.bad(
                        seq,
                        "turns numbered in order",
                        f"turn {e.turn} after turn {state.turn_index}",
                    )
                if state.paused:
                    self.bad(
                        seq,
                        "a paused loop begins no turn",
                        f"turn {e.turn} of loop {r.loop} started after loop.paused, "
                        "with no loop.resumed between",
                    )
                self.turns_open[r.loop] = e.turn
            case ev.TurnEnded():
                open_turn = self.turns_open.pop(r.loop, None)
                if open_turn is None:
                    self.bad(seq, "turn ended at most once", f"turn {e.turn} is not open")
                elif open_turn != e.turn:
                    self.bad(seq, "turn.ended names the open turn", f"turn {e.turn} ≠ {open_turn}")
            case ev.ModelCallStarted():
                _check_tail(seq, state.messages, self.bad)
                if state.configured is not None and e.model != state.model:
                    # Journals from before loop.configured have nothing to compare.
                    self.bad(
                        seq,
                        "model call uses the configured model",
                        f"call {e.effect_id} used {e.model}, but the loop was configured "
                        f"to use {state.model}",
                    )
            case ev.CommandKeyed():
                for loop_id, other in self.states.items():
                    if other.keys and e.key in other.keys:
                        first = other.keys[e.key].seq
                        self.bad(
                            seq,
                            "key used once",
                            f"key {e.key!r} was used at seq {first} (loop {loop_id}) already",
                        )
            case _:
                assert_never(e)

    def _compaction_rules(
        self,
        r: Record,
        e: ev.CompactionStarted | ev.CompactionCommitted | ev.CompactionRejected,
        state: LoopState,
    ) -> None:
        """A compaction commits what it started, on the current history."""
        seq = r.seq
        match e:
            case ev.CompactionStarted():
                self.compactions[e.attempt_id] = e.basis
            case ev.CompactionCommitted():
                basis = self.compactions.pop(e.attempt_id, None)
                if basis is None:
                    self.bad(seq, "compaction has a matching start", e.attempt_id)
                elif basis != e.basis:
                    self.bad(
                        seq, "compaction basis matches its start", f"{e.basis} ≠ started {basis}"
                    )
                elif e.basis != state.history_seq:
                    self.bad(
                        seq,
                        "compaction basis is current",
                        f"basis {e.basis} but history changed at seq {state.history_seq}",
                    )
                if (
                    e.replaced < 1
                    or e.retained < 0
                    or e.replaced + e.retained != len(state.messages)
                ):
                    self.bad(
                        seq,
                        "compaction range valid",
                        f"replaced {e.replaced} + retained {e.retained} ≠ "
                        f"{len(state.messages)} messages in context",
                    )
            case ev.CompactionRejected():
                self.compactions.pop(e.attempt_id, None)
            case _:
                assert_never(e)

    def _session_rules(
        self, r: Record, e: ev.SessionCheckpoint | ev.SessionForked, state: LoopState
    ) -> None:
        """A fork's marker is seq 1 and its base seq 2; checkpoints picture the fold."""
        seq = r.seq
        match e:
            case ev.SessionCheckpoint():
                if self.forked and seq == 2:
                    self.adopt_base(seq, e)
                else:
                    self.checkpoint(seq, e)
            case ev.SessionForked():
                if seq != 1:
                    self.bad(seq, "fork marker is seq 1", f"a session.forked marker at seq {seq}")
                self.forked = seq == 1
            case _:
                assert_never(e)

    def adopt_base(self, seq: int, e: ev.SessionCheckpoint) -> None:
        """A fork starts from this checkpoint, not from empty states: what it
        pictures open (calls, gates, a turn) is open for the rules that follow.
        ``check`` compares it with the source when the source is at hand."""
        if e.previous != 0:
            self.bad(seq, "fork base is a full checkpoint", f"it follows seq {e.previous}")
        for image in e.loops:
            try:
                state = image_state(image.state)
            except msgspec.DecodeError as exc:
                self.bad(seq, "fork base is a full checkpoint", f"loop {image.loop}: {exc}")
                continue
            state.messages = list(image.messages)
            self.states[image.loop] = state
            self.checkpoint_messages[image.loop] = list(image.messages)
            self.checkpoint_verified[image.loop] = (state.messages, len(state.messages))
            for execution_id, started in (*state.running.items(), *state.unknown.items()):
                self.started[execution_id] = started
            self.unknown.update(state.unknown)
            self.abandoned.update(state.unknown)
            for gate in state.gates.values():
                self.gates_open[gate.gate_id] = gate.kind
                self.gates_seen.add(gate.gate_id)
            if state.turn_open:
                self.turns_open[image.loop] = state.turn_index
            if state.compacting is not None:
                self.compactions[state.compacting] = state.history_seq
        self.checkpoint_seq = seq

    def deadline(self, seq: int, loop: str, e: ev.DeadlinePassed, state: LoopState) -> None:
        """A deadline cuts something still running: an unsettled tool call, the
        open model call, the open turn."""
        if e.deadline == "tool":
            if e.ref not in self.started:
                self.bad(seq, "deadline names what it cut", f"tool call {e.ref} never started")
            elif self.settled[e.ref] or e.ref in self.abandoned:
                self.bad(seq, "deadline names what it cut", f"tool call {e.ref} had settled")
        elif e.deadline == "turn":
            if loop not in self.turns_open:
                self.bad(seq, "deadline names what it cut", f"turn {e.turn} is not open")
        elif state.open_call != e.ref:
            self.bad(seq, "deadline names what it cut", f"model call {e.ref} is not open")

    def checkpoint(self, seq: int, e: ev.SessionCheckpoint) -> None:
        """A checkpoint must be exactly the fold of every record before it,
        or a restore that starts from it would start from a lie."""
        if e.previous == 0:
            # A new chain: every loop must be in it, in full.
            self.checkpoint_seq = 0
            self.checkpoint_messages = {}
            self.checkpoint_verified = {}
        elif e.previous != self.checkpoint_seq:
            self.bad(
                seq,
                "checkpoint chain linked",
                f"previous {e.previous}, but the last checkpoint is at seq {self.checkpoint_seq}",
            )
        imaged = set()
        for image in e.loops:
            imaged.add(image.loop)
            # The messages this image holds are proven only if it passes: a
            # later delta keeping them must not count them as checked.
            verified = self.checkpoint_verified.pop(image.loop, None)
            held = self.checkpoint_messages.setdefault(image.loop, [])
            if not 0 <= image.kept <= len(held):
                self.bad(
                    seq,
                    "checkpoint chain linked",
                    f"loop {image.loop} keeps {image.kept} of {len(held)} messages",
                )
            del held[image.kept :]
            held.extend(image.messages)
            folded = self.states.get(image.loop)
            try:
                pictured = image_state(image.state)
            except msgspec.DecodeError as exc:
                self.bad(seq, "checkpoint equals the fold before it", f"loop {image.loop}: {exc}")
                continue
            if folded is None or not self._same(image, held, pictured, folded, verified):
                differ = (
                    ["the whole loop (it has no records)"]
                    if folded is None
                    else [
                        f
                        for f in LoopState.__struct_fields__
                        if getattr(pictured, f) != getattr(folded, f)
                    ]
                )
                self.bad(
                    seq,
                    "checkpoint equals the fold before it",
                    f"loop {image.loop} differs in {', '.join(differ)}",
                )
            else:
                self.checkpoint_verified[image.loop] = (folded.messages, len(folded.messages))
        for loop_id, state in self.states.items():
            if state.loop and loop_id not in imaged and state.last_seq > self.checkpoint_seq:
                self.bad(
                    seq,
                    "checkpoint equals the fold before it",
                    f"loop {loop_id} changed since the previous checkpoint but is left out",
                )
        self.checkpoint_seq = seq

    def _same(
        self,
        image: ev.LoopImage,
        held: list[Message],
        pictured: LoopState,
        folded: LoopState,
        verified: tuple[list[Message], int] | None,
    ) -> bool:
        """Whether the image (messages rebuilt from the chain: ``held``) is the fold.

        Linear over a whole journal: when the loop's message list is the very
        list checked equal at its previous checkpoint, grown only by appends
        (the fold never changes a message in place), the messages the image
        keeps were proven then and only the ones it adds are compared now."""
        messages = folded.messages
        if (
            verified is not None
            and verified[0] is messages
            and image.kept <= verified[1] <= len(messages)
        ):
            same_messages = len(held) == len(messages) and messages[image.kept :] == list(
                image.messages
            )
        else:
            same_messages = held == messages
        # The rest of the state, with the messages already settled.  A field
        # the image predates is not pictured, so it is not compared (restore
        # folds the records instead of using such an image).
        for name in image_missing(image.state):
            setattr(pictured, name, getattr(folded, name))
        pictured.messages = messages
        equal = same_messages and pictured == folded
        if not equal:
            pictured.messages = list(held)
        return equal

    def after_fold(self, r: Record, state: LoopState) -> None:
        if isinstance(r.event, ev.TurnEnded) and state.awaiting:
            self.bad(
                r.seq,
                "turn ends with every tool_use answered",
                "unanswered: " + ", ".join(state.awaiting),
            )


def _check_tail(
    seq: int, messages: Sequence[Message], bad: Callable[[int, str, str], None]
) -> None:
    """The context about to be sent answers the newest assistant message's
    tool calls exactly once (older ones were checked at earlier calls, so
    this stays O(tail) per call)."""
    start = len(messages)
    while start > 0 and messages[start - 1].role != "assistant":
        start -= 1
    start = max(0, start - 1)
    tail = merged(messages[start:])
    missing = unanswered_tool_uses(tail)
    if missing:
        bad(seq, "every tool_use answered before the next call", ", ".join(missing))
    seen: Counter[str] = Counter(
        b.tool_use_id for m in tail for b in m.blocks if isinstance(b, ToolResult)
    )
    twice = [k for k, n in seen.items() if n > 1]
    if twice:
        bad(seq, "every tool_use answered exactly once", ", ".join(twice))
