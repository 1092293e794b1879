"""The journal checker: each rule, broken once in a hand-built journal,
is reported at exactly the first bad seq (and a good journal passes)."""

from __future__ import annotations

import msgspec
import pytest

from journal import (
    ForwardingJournal,
    Journal,
    JournalError,
    JournalUnavailableError,
    StorageCheck,
    StorageProblem,
)
from journal.content import Text
from journal.events import (
    CommandKeyed,
    CompactionCommitted,
    CompactionStarted,
    DeadlinePassed,
    Event,
    GateCancelled,
    GateOpened,
    GateResolved,
    GateReviewed,
    HookDecided,
    InputQueued,
    LoopConfig,
    LoopConfigured,
    LoopInferenceChanged,
    LoopPaused,
    LoopResumed,
    ModelCallStarted,
    ModelMessageCommitted,
    SessionForked,
    ToolAbandoned,
    ToolCompleted,
    ToolProgress,
    ToolResolved,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from loopruntime.state import fold_all
from session.embedded.checkpoints import states_from
from session.replay import RULES, CheckReport, check, check_records
from tests.replay.bad import (
    SESSION,
    assistant,
    checkpoint_of,
    good_turn,
    journal_of,
    opening,
    records_of,
    user,
)
from tests.support.damage import damage_record


async def report_of(events: list[Event]) -> CheckReport:
    return await check(await journal_of(events), SESSION)


def rejected(tool_use_id: str) -> ToolCompleted:
    return ToolCompleted(
        execution_id="",
        tool_use_id=tool_use_id,
        content=(Text(text="no"),),
        disposition="rejected",
    )


def done(execution_id: str, tool_use_id: str) -> ToolCompleted:
    return ToolCompleted(
        execution_id=execution_id,
        tool_use_id=tool_use_id,
        content=(Text(text="1"),),
        disposition="succeeded",
    )


def started(execution_id: str, tool_use_id: str = "tu1") -> ToolStarted:
    return ToolStarted(execution_id=execution_id, tool_use_id=tool_use_id, name="add", input={})


def gate(gate_id: str = "g1", kind: str = "permission") -> GateOpened:
    return GateOpened(gate_id=gate_id, kind=kind, execution_id="", tool_use_id="tu1")  # type: ignore[arg-type]


def allow(gate_id: str = "g1") -> GateResolved:
    return GateResolved(gate_id=gate_id, kind="permission", allow=True, scope="once")


async def test_a_good_journal_passes() -> None:
    report = await report_of(good_turn())
    assert report.ok, report.summary()
    assert report.records == 10
    assert report.first_bad_seq is None
    assert report.summary().startswith("ok: 10 records")


# (rule, events): the first bad record is always the last one.
def _with_forged_delta() -> list[Event]:
    first = checkpoint_of(opening())
    events: list[Event] = [*opening(), first, *good_turn()[5:]]
    kept = len(first.loops[0].messages)
    honest = checkpoint_of(events, previous=6, kept=kept)
    image = honest.loops[0]
    forged = msgspec.structs.replace(
        image, messages=(*image.messages[:-1], assistant("something else"))
    )
    return [*events, msgspec.structs.replace(honest, loops=(forged,))]


def _configured(model: str) -> list[Event]:
    """A loop configured to use ``model``, with a queued input and an open turn."""
    return [
        opening()[0],
        LoopConfigured(config=LoopConfig(model=model)),
        *opening()[1:3],
    ]


CASES: list[tuple[str, list[Event]]] = [
    (
        "model call uses the configured model",
        [*_configured("m2"), ModelCallStarted(effect_id="e1", turn=1, step=0, model="m")],
    ),
    (
        # A choice made during the turn counts from the next turn: the call
        # after it in the same turn still uses m, the next turn's must use m2.
        "model call uses the configured model",
        [
            *_configured("m"),
            LoopInferenceChanged(model="m2"),
            ModelCallStarted(effect_id="e1", turn=1, step=0, model="m"),
            ModelMessageCommitted(effect_id="e1", turn=1, step=0, message=assistant("hi")),
            TurnEnded(turn=1, outcome="completed"),
            InputQueued(input_id="in2", messages=(user("again"),)),
            TurnStarted(turn=2, input_ids=("in2",)),
            ModelCallStarted(effect_id="e2", turn=2, step=0, model="m"),
        ],
    ),
    (
        "deadline names what it cut",
        [*good_turn()[:7], DeadlinePassed(deadline="tool", seconds=5, turn=1, ref="x1")],
    ),
    (
        "deadline names what it cut",
        [*opening(), DeadlinePassed(deadline="tool", seconds=5, turn=1, ref="x9")],
    ),
    (
        "deadline names what it cut",
        [*opening(), DeadlinePassed(deadline="model_call", seconds=5, turn=1, ref="e1")],
    ),
    (
        "deadline names what it cut",
        [*good_turn(), DeadlinePassed(deadline="turn", seconds=5, turn=1, action="interrupted")],
    ),
    (
        "decision names an open tool_use",
        [
            *opening(),
            HookDecided(hook="guard", point="before_tool", action="deny", tool_use_id="tu9"),
        ],
    ),
    (
        "decision names an open tool_use",
        [
            *good_turn(),
            GateReviewed(tool_use_id="tu1", tool_name="t", classifier="c", verdict="allow"),
        ],
    ),
    ("tool started once", [*opening(), started("x1"), started("x1")]),
    (
        "progress names a running call",
        [*opening(), ToolProgress(execution_id="x9", tool_use_id="tu1", message="never started")],
    ),
    (
        "progress names a running call",
        [*good_turn()[:7], ToolProgress(execution_id="x1", tool_use_id="tu1", message="too late")],
    ),
    ("settlement follows its start", [*opening(), done("x9", "tu1")]),
    ("settlement names its call", [*opening(), started("x1"), done("x1", "tu2")]),
    ("tool settled at most once", [*good_turn()[:7], done("x1", "tu1")]),
    (
        "tool settled at most once",
        [*good_turn()[:7], ToolAbandoned(execution_id="x1", tool_use_id="tu1", reason="crashed")],
    ),
    (
        "settlement follows its start",
        [
            *opening(),
            started("x1"),
            ToolResolved(execution_id="x1", tool_use_id="tu1", content=(Text(text="?"),)),
        ],
    ),
    ("result answers an open tool_use", [*opening(), rejected("tu_nobody_asked_for")]),
    (
        "every tool_use answered exactly once",
        [
            *opening()[:4],
            opening()[4].__class__(
                effect_id="e1",
                turn=1,
                step=0,
                message=assistant("two", "tu1", "tu2"),
                stop_reason="tool_use",
            ),
            rejected("tu1"),
            rejected("tu1"),
        ],
    ),
    (
        "every tool_use answered before the next call",
        [*opening(), ModelCallStarted(effect_id="e2", turn=1, step=1, model="m")],
    ),
    ("turn ends with every tool_use answered", [*opening(), TurnEnded(turn=1, outcome="failed")]),
    ("gate opened once", [*opening(), gate(), gate()]),
    ("gate closed after it opened", [*opening(), allow("g_never")]),
    (
        "gate closed at most once",
        [*opening(), gate(), allow(), GateCancelled(gate_id="g1", reason="interrupted")],
    ),
    (
        "gate resolved with its kind",
        [*opening(), gate(), GateResolved(gate_id="g1", kind="user_input", answer="x")],
    ),
    ("turns numbered in order", [*opening()[:2], TurnStarted(turn=3, input_ids=("in1",))]),
    ("turn ended at most once", [*good_turn(), TurnEnded(turn=1, outcome="completed")]),
    ("turn.ended names the open turn", [*good_turn()[:9], TurnEnded(turn=2, outcome="completed")]),
    (
        "compaction has a matching start",
        [
            *good_turn(),
            CompactionCommitted(
                attempt_id="c1", basis=9, summary=user("s"), replaced=3, retained=1
            ),
        ],
    ),
    (
        "compaction basis matches its start",
        [
            *good_turn(),
            CompactionStarted(attempt_id="c1", basis=9),
            CompactionCommitted(
                attempt_id="c1", basis=8, summary=user("s"), replaced=3, retained=1
            ),
        ],
    ),
    (
        "compaction basis is current",
        [
            *good_turn(),
            CompactionStarted(attempt_id="c1", basis=9),
            InputQueued(input_id="in2", messages=(user("more"),)),
            TurnStarted(turn=2, input_ids=("in2",)),
            TurnEnded(turn=2, outcome="interrupted"),
            CompactionCommitted(
                attempt_id="c1", basis=9, summary=user("s"), replaced=4, retained=1
            ),
        ],
    ),
    (
        "compaction range valid",
        [
            *good_turn(),
            CompactionStarted(attempt_id="c1", basis=9),
            CompactionCommitted(
                attempt_id="c1", basis=9, summary=user("s"), replaced=1, retained=1
            ),
        ],
    ),
    (
        "a paused loop begins no turn",
        [
            *good_turn(),
            LoopPaused(principal="ops"),
            InputQueued(input_id="in2", messages=(user("more"),)),
            TurnStarted(turn=2, input_ids=("in2",)),
        ],
    ),
    ("fold succeeds", [*opening(), TurnStarted(turn=2)]),
    (
        "key used once",
        # A key whose first use the fold remembers, committed again: two effects.
        [
            *good_turn(),
            CommandKeyed(key="k1", command="interrupt", digest="d", result=False),
            CommandKeyed(key="k1", command="interrupt", digest="d", result=False),
        ],
    ),
    (
        "checkpoint chain linked",
        # The second checkpoint names a seq that is not the first one's.
        [
            *opening(),
            checkpoint_of(opening()),
            *good_turn()[5:],
            checkpoint_of(good_turn(), previous=3),
        ],
    ),
    (
        "checkpoint equals the fold before it",
        # A checkpoint that forgot the last two records.
        [*good_turn(), checkpoint_of(good_turn()[:-2])],
    ),
    (
        "checkpoint equals the fold before it",
        # A delta in a chain that adds a message the records never had.
        _with_forged_delta(),
    ),
    (
        "fork marker is seq 1",
        [*opening(), SessionForked(source="ses_src", seq=3, digest=bytes(16))],
    ),
    (
        "fork base is a full checkpoint",
        # A fork whose seq 2 is a loop's record: nothing pictures where it starts.
        [SessionForked(source="ses_src", seq=3, digest=bytes(16)), *opening()[:1]],
    ),
    (
        "fork base is a full checkpoint",
        # A fork whose seq 2 continues a chain it does not have.
        [
            SessionForked(source="ses_src", seq=3, digest=bytes(16)),
            checkpoint_of(opening(), previous=1),
        ],
    ),
]


async def test_checkpoints_that_are_the_fold_pass() -> None:
    first = checkpoint_of(opening())
    events: list[Event] = [*opening(), first, *good_turn()[5:]]
    # The next image keeps the chain's messages and adds only the new ones.
    kept = len(first.loops[0].messages)
    events.append(checkpoint_of(events, previous=6, kept=kept))
    assert kept and len(events[-1].loops[0].messages) < len(checkpoint_of(events).loops[0].messages)
    report = await report_of(events)
    assert report.ok, report.summary()


@pytest.mark.parametrize(
    ("rule", "events"), CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)]
)
async def test_each_rule_names_the_first_bad_seq(rule: str, events: list[Event]) -> None:
    assert rule in RULES
    # Everything before the last record is a valid journal on its own...
    assert (await report_of(events[:-1])).ok, (await report_of(events[:-1])).summary()
    report = await report_of(events)
    assert not report.ok
    assert report.first_bad_seq == len(events), report.summary()
    assert rule in {p.rule for p in report.problems if p.seq == len(events)}, report.problems
    assert f"FAILED at seq {len(events)}" in report.summary()


def test_every_rule_has_a_case() -> None:
    covered = {rule for rule, _ in CASES} | {
        "storage intact",
        "journal readable",
        "record belongs to the session",
        "seq gap-free",
        "digest chain intact",
        # Needs the source beside the fork: tests/fork/test_fork.py breaks it.
        "fork base equals its source",
        "cause names an earlier record",  # test_a_cause_must_name_an_earlier_record
        # Over the writer spans, not the records: tests/replay/test_writers.py.
        "records of a fenced writer never follow a newer one",
        "writer span starts at a record",
    }
    assert covered == set(RULES)


async def test_a_cause_must_name_an_earlier_record() -> None:
    records = await records_of(good_turn())
    # The turn names its input (fine); the reply names a later record and a
    # record that does not exist.
    fixed = [msgspec.structs.replace(r, cause=records[1].id) if r.seq == 3 else r for r in records]
    fixed = [msgspec.structs.replace(r, cause=records[6].id) if r.seq == 5 else r for r in fixed]
    fixed = [msgspec.structs.replace(r, cause="ev_nowhere") if r.seq == 8 else r for r in fixed]
    report = check_records(SESSION, fixed, verify_digests=False)  # causes edited in place
    bad = [(p.seq, p.rule) for p in report.problems]
    assert bad == [(5, "cause names an earlier record"), (8, "cause names an earlier record")]
    ok = [msgspec.structs.replace(r, cause=records[1].id) if r.seq == 3 else r for r in records]
    assert check_records(SESSION, ok, verify_digests=False).ok


async def test_seq_gap() -> None:
    records = await records_of(good_turn())
    del records[4]  # seq 5 goes missing
    report = check_records(SESSION, records)
    assert report.first_bad_seq == 6
    assert report.problems[0].rule == "seq gap-free"


async def test_digest_chain() -> None:
    records = await records_of(good_turn())
    records[6] = msgspec.structs.replace(records[6], digest=bytes(16))
    report = check_records(SESSION, records)
    assert report.first_bad_seq == 7
    assert report.problems[0].rule == "digest chain intact"


async def test_record_of_another_session() -> None:
    records = await records_of(good_turn())
    records[2] = msgspec.structs.replace(records[2], session="ses_other")
    report = check_records(SESSION, records)
    assert report.first_bad_seq == 3
    assert "record belongs to the session" in {p.rule for p in report.problems}


async def test_damaged_record_in_the_middle() -> None:
    journal = await journal_of(good_turn())
    damage_record(journal, SESSION, 6, b"\xc1 not msgpack")
    report = await check(journal, SESSION)
    assert report.first_bad_seq == 6
    assert report.problems[0].rule == "journal readable"
    assert report.records == 5  # every good record before it was checked


async def test_a_delta_built_on_a_forged_image_is_not_taken_for_proven() -> None:
    # The second checkpoint forges a message; the third keeps it (its own
    # delta is honest).  Restore from the third would bring the forged
    # message back, so the third is as wrong as the second.
    first = checkpoint_of(opening())
    events: list[Event] = [*opening(), first, *good_turn()[5:7]]
    honest = checkpoint_of(events, previous=6, kept=1)
    image = honest.loops[0]
    forged = msgspec.structs.replace(image, messages=(assistant("forged"), *image.messages[1:]))
    events.append(msgspec.structs.replace(honest, loops=(forged,)))
    events += good_turn()[7:]
    events.append(checkpoint_of(events, previous=len(events) - 3, kept=2))
    report = await report_of(events)
    assert {p.seq for p in report.problems} == {9, 13}, report.summary()
    journal = await journal_of(events)
    fast, _ = states_from(await journal.checkpoints(SESSION))
    full = fold_all(r for r in await records_of(events) if r.loop == "main")
    assert fast["main"].messages != full.messages


class _StorageSays(ForwardingJournal):
    """A journal whose storage check answers ``said`` (or raises it)."""

    def __init__(self, inner: Journal, said: StorageCheck | JournalError) -> None:
        super().__init__(inner)
        self.said = said

    async def check_storage(self) -> StorageCheck:
        if isinstance(self.said, JournalError):
            raise self.said
        return self.said


async def test_damage_below_the_records_fails_the_check_naming_the_table() -> None:
    damage = StorageCheck(
        checked=("quick check",),
        problems=(StorageProblem(table="records", detail="Tree 4 page 4: invalid page"),),
    )
    journal = _StorageSays(await journal_of(good_turn()), damage)
    report = await check(journal, SESSION)
    assert not report.ok
    assert report.first_bad_seq is None  # no record is at fault
    assert [(p.seq, p.rule) for p in report.problems] == [(0, "storage intact")]
    assert str(report.problems[0]) == "storage intact: table records: Tree 4 page 4: invalid page"
    assert report.summary().startswith("FAILED: storage intact: table records: Tree 4")
    # Asked not to, the check leaves the storage alone.
    assert (await check(journal, SESSION, storage=False)).ok


async def test_record_problems_come_first_and_storage_damage_is_mentioned() -> None:
    damage = StorageCheck(checked=("c",), problems=(StorageProblem(table=None, detail="free"),))
    journal = _StorageSays(await journal_of([*good_turn()[:7], done("x1", "tu1")]), damage)
    report = await check(journal, SESSION)
    assert report.first_bad_seq == 8
    assert report.summary().startswith("FAILED at seq 8: seq 8: tool settled at most once")
    assert "the storage is damaged too" in report.summary()
    assert "storage intact: the storage: free" in {str(p) for p in report.problems}


async def test_a_storage_check_that_cannot_run_is_a_failure_not_a_pass() -> None:
    error = JournalUnavailableError("the server went away")
    report = await check(_StorageSays(await journal_of(good_turn()), error), SESSION)
    assert not report.ok
    assert report.problems[0].rule == "storage intact"
    assert "could not run: the server went away" in report.problems[0].detail


async def test_a_passing_check_says_what_the_storage_check_ran() -> None:
    journal = _StorageSays(await journal_of(good_turn()), StorageCheck(checked=("quick check",)))
    report = await check(journal, SESSION)
    assert report.ok
    assert report.summary() == (
        f"ok: 10 records of session {SESSION}, every invariant holds; storage checked: quick check"
    )


async def test_a_turn_after_the_resume_passes() -> None:
    events: list[Event] = [
        *good_turn(),
        LoopPaused(principal="ops"),
        InputQueued(input_id="in2", messages=(user("more"),)),
        LoopResumed(),
        TurnStarted(turn=2, input_ids=("in2",)),
    ]
    report = await report_of(events)
    assert report.ok, report.summary()
