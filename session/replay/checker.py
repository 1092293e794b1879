"""The journal checker: every invariant a session's journal keeps, each
named in ``RULES``.

``check_records`` is pure over records already read; ``check`` only reads.
A report names the first bad seq.  docs/replay.md says when each rule fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import assert_never

import msgspec

from journal import Journal, JournalError, Record, SessionNotFoundError, encode_event
from journal.codec import GENESIS, chain
from journal.content import Message, ToolResult
from journal.events import (
    ChildFinished,
    ChildStarted,
    CollabControlled,
    CollabEnded,
    CollabStarted,
    CollabTaskFinished,
    CollabTaskStarted,
    CollabTurn,
    CommandKeyed,
    CompactionCommitted,
    CompactionRejected,
    CompactionStarted,
    ContextMeasured,
    GateCancelled,
    GateOpened,
    GateResolved,
    InputCancelled,
    InputQueued,
    LoopImage,
    LoopModeChanged,
    LoopStarted,
    LoopStopped,
    ModelCallFailed,
    ModelCallStarted,
    ModelMessageCommitted,
    ModelOutput,
    Notice,
    SessionCheckpoint,
    SteerApplied,
    SteerQueued,
    ToolAbandoned,
    ToolCompleted,
    ToolResolved,
    ToolStarted,
    TurnEnded,
    TurnRejected,
    TurnStarted,
)
from loopruntime import LoopState, fold
from loopruntime.host import (
    FoldError,
    image_missing,
    image_state,
    merged,
    unanswered_tool_uses,
)

RULES = (
    "journal readable",
    "record belongs to the session",
    "seq gap-free",
    "digest chain intact",
    "tool started once",
    "settlement follows its start",
    "settlement names its call",
    "tool settled at most once",
    "result answers an open tool_use",
    "every tool_use answered exactly once",
    "every tool_use answered before the next call",
    "turn ends with every tool_use answered",
    "gate opened once",
    "gate closed after it opened",
    "gate closed at most once",
    "gate resolved with its kind",
    "turns numbered in order",
    "turn ended at most once",
    "turn.ended names the open turn",
    "compaction has a matching start",
    "compaction basis matches its start",
    "compaction basis is current",
    "compaction range valid",
    "fold succeeds",
    "cause names an earlier record",
    "key used once",
    "checkpoint chain linked",
    "checkpoint equals the fold before it",
)
"""Every rule the checker enforces, by the name a ``Problem`` carries."""


@dataclass(frozen=True)
class Problem:
    seq: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.rule}: {self.detail}"


@dataclass
class CheckReport:
    session: str
    records: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_bad_seq(self) -> int | None:
        return min((p.seq for p in self.problems), default=None)

    def summary(self) -> str:
        if self.ok:
            return f"ok: {self.records} records of session {self.session}, every invariant holds"
        first = min(self.problems, key=lambda p: p.seq)
        return (
            f"FAILED at seq {self.first_bad_seq}: {first} "
            f"({len(self.problems)} problem(s) in {self.records} records)"
        )


async def check(journal: Journal, session_id: str) -> CheckReport:
    """Read a session and check every invariant (never writes).

    A record the backend cannot read (damaged bytes, a broken digest chain,
    a missing seq) is reported as ``journal readable`` at its seq, after
    every rule has been checked over the records before it.  The backend
    verified the stored bytes' digest chain while reading, so the records are
    not re-hashed here (re-encoding a record written by an older schema would
    not reproduce its bytes).  ``SessionNotFoundError`` propagates: a missing
    session is not a broken journal."""
    records: list[Record] = []
    try:
        async for record in journal.read(session_id):
            records.append(record)
    except SessionNotFoundError:
        raise
    except JournalError as exc:
        report = check_records(session_id, records, verify_digests=False)
        seq = getattr(exc, "seq", (records[-1].seq + 1) if records else 1)
        report.problems.append(Problem(seq, "journal readable", str(exc)))
        report.problems.sort(key=lambda p: p.seq)
        return report
    return check_records(session_id, records, verify_digests=False)


def check_records(
    session_id: str, records: Sequence[Record], *, verify_digests: bool = True
) -> CheckReport:
    """Check the invariants over records already read (pure).

    With ``verify_digests`` each record's digest is recomputed from the
    previous digest and the re-encoded event (exact for records written by
    this schema version).  Problems are sorted by seq."""
    return _Checker(session_id).run(records, verify_digests)


class _Checker:
    def __init__(self, session_id: str) -> None:
        self.session = session_id
        self.problems: list[Problem] = []
        self.states: dict[str, LoopState] = {}
        self.started: dict[str, ToolStarted] = {}
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

    def bad(self, seq: int, rule: str, detail: str) -> None:
        assert rule in RULES, rule
        self.problems.append(Problem(seq, rule, detail))

    def run(self, records: Sequence[Record], verify_digests: bool) -> CheckReport:
        expected = 1
        previous = GENESIS
        ids: set[str] = set()
        for r in records:
            if r.cause is not None and r.cause not in ids:
                self.bad(r.seq, "cause names an earlier record", f"no earlier record {r.cause}")
            ids.add(r.id)
            if r.session != self.session:
                self.bad(r.seq, "record belongs to the session", f"record of session {r.session}")
            if r.seq != expected:
                self.bad(r.seq, "seq gap-free", f"expected seq {expected}")
            elif verify_digests and chain(previous, encode_event(r.event)) != r.digest:
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
        seq = r.seq
        match e:
            case ToolStarted():
                if e.execution_id in self.started:
                    self.bad(seq, "tool started once", e.execution_id)
                self.started[e.execution_id] = e
            case ToolCompleted():
                if e.execution_id:
                    self.settle(seq, e.execution_id, e.tool_use_id)
                self.answer(seq, e.tool_use_id, state)
            case ToolAbandoned():
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
            case ToolResolved():
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
            case GateOpened():
                if e.gate_id in self.gates_seen:
                    self.bad(seq, "gate opened once", e.gate_id)
                self.gates_seen.add(e.gate_id)
                self.gates_open[e.gate_id] = e.kind
            case GateResolved() | GateCancelled():
                if e.gate_id in self.gates_closed:
                    self.bad(seq, "gate closed at most once", e.gate_id)
                elif e.gate_id not in self.gates_open:
                    self.bad(seq, "gate closed after it opened", e.gate_id)
                elif isinstance(e, GateResolved) and self.gates_open[e.gate_id] != e.kind:
                    self.bad(seq, "gate resolved with its kind", e.gate_id)
                self.gates_open.pop(e.gate_id, None)
                self.gates_closed.add(e.gate_id)
            case TurnStarted():
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
                self.turns_open[r.loop] = e.turn
            case TurnEnded():
                open_turn = self.turns_open.pop(r.loop, None)
                if open_turn is None:
                    self.bad(seq, "turn ended at most once", f"turn {e.turn} is not open")
                elif open_turn != e.turn:
                    self.bad(seq, "turn.ended names the open turn", f"turn {e.turn} ≠ {open_turn}")
            case ModelCallStarted():
                _check_tail(seq, state.messages, self.bad)
            case CompactionStarted():
                self.compactions[e.attempt_id] = e.basis
            case CompactionCommitted():
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
            case CompactionRejected():
                self.compactions.pop(e.attempt_id, None)
            case SessionCheckpoint():
                self.checkpoint(seq, e)
            case CommandKeyed():
                for loop_id, other in self.states.items():
                    if other.keys and e.key in other.keys:
                        first = other.keys[e.key].seq
                        self.bad(
                            seq,
                            "key used once",
                            f"key {e.key!r} was used at seq {first} (loop {loop_id}) already",
                        )
            case (
                LoopStarted()
                | LoopModeChanged()
                | LoopStopped()
                | InputQueued()
                | InputCancelled()
                | SteerQueued()
                | SteerApplied()
                | ModelOutput()
                | ModelMessageCommitted()
                | ModelCallFailed()
                | ContextMeasured()
                | ChildStarted()
                | ChildFinished()
                | Notice()
                | TurnRejected()
                | CollabStarted()
                | CollabTurn()
                | CollabTaskStarted()
                | CollabTaskFinished()
                | CollabControlled()
                | CollabEnded()
            ):
                pass
            case _:
                assert_never(e)

    def checkpoint(self, seq: int, e: SessionCheckpoint) -> None:
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
        image: LoopImage,
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
        if isinstance(r.event, TurnEnded) and state.awaiting:
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
