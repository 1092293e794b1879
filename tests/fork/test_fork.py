"""Forking a session at a seq: the fork starts from the fold of its source up
to that seq, settles what was open there as a crash would, goes its own way,
and leaves the source untouched; bad input writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import Draft, Journal, Record, open_journal
from journal.events import (
    CHECKPOINT_STREAM,
    InputQueued,
    SessionCheckpoint,
    SessionForked,
    ToolStarted,
    TurnEnded,
)
from journal.memory import MemoryJournal
from loopruntime import LoopState, fold
from session import ForkError, Session, SessionExistsError, UnknownSessionError
from session.cli.main import main
from session.embedded.checkpoints import read_restored, states_from
from session.embedded.fork import plan_fork, write_fork
from session.replay import build_tree, check, render_transcript, render_tree, states_at
from tests.replay.bad import SESSION as BAD_SESSION
from tests.replay.bad import good_turn, journal_of
from tests.support import crash_points as scenario


async def run_scenario(journal: Journal, tmp_path: Path) -> list[Record]:
    """The crash scenario run to its end (checkpoints every few records)."""
    ledger = scenario.Ledger(tmp_path, "run")
    async with Session.create(
        journal,
        scenario.definition(ledger),
        session_id=scenario.SESSION,
        checkpoint_every=scenario.CHECKPOINT_EVERY,
    ) as s:
        await scenario.drive(s, ledger)
    return await records(journal, scenario.SESSION)


async def records(journal: Journal, session_id: str) -> list[Record]:
    return [r async for r in journal.read(session_id)]


def fold_up_to(source: list[Record], seq: int) -> dict[str, LoopState]:
    """The plain fold of the source's records 1..seq, loop by loop."""
    states: dict[str, LoopState] = {}
    for r in source:
        if r.seq > seq:
            break
        if r.loop != CHECKPOINT_STREAM:
            fold(states.setdefault(r.loop, LoopState()), r)
    return {loop: st for loop, st in states.items() if st.loop}


async def test_the_fork_starts_from_the_fold_at_every_seq(tmp_path: Path) -> None:
    journal = MemoryJournal()
    source = await run_scenario(journal, tmp_path)
    assert any(isinstance(r.event, SessionCheckpoint) for r in source)
    for r in source:
        fork_id = f"fork-{r.seq}"
        plan = await plan_fork(journal, scenario.SESSION, r.seq, fork_id)
        written = await write_fork(journal, plan)
        marker, base = written
        assert (marker.seq, base.seq) == (1, 2)
        assert marker.event == SessionForked(
            source=scenario.SESSION, seq=r.seq, digest=r.digest, root=scenario.SESSION
        )
        assert isinstance(base.event, SessionCheckpoint) and base.event.previous == 0
        states, _ = states_from([base])
        assert states == fold_up_to(source, r.seq), f"fork at seq {r.seq}"
        # A restore, with or without the chain, starts from the same states.
        for use in (True, False):
            restored = await read_restored(journal, fork_id, use_checkpoints=use)
            assert restored.states == states
        # Time travel and the checker see the fork's base too.
        assert states_at(written, 1) == states == states_at(written, 2)
        report = await check(journal, fork_id)
        assert report.ok and not report.notes, report.summary()
    # The source was only read.
    assert await records(journal, scenario.SESSION) == source


async def test_a_fork_inside_a_tool_call_has_it_as_an_unknown_effect(tmp_path: Path) -> None:
    journal = MemoryJournal()
    source = await run_scenario(journal, tmp_path)
    started = next(
        r for r in source if isinstance(r.event, ToolStarted) and r.event.name == "send_invoice"
    )
    assert isinstance(started.event, ToolStarted)
    execution_id = started.event.execution_id
    ledger = scenario.Ledger(tmp_path, "fork")
    async with Session.fork(
        journal,
        scenario.SESSION,
        scenario.definition(ledger),
        at=started.seq,
        new_session_id="ses_invoice_fork",
    ) as fork:
        state = await fork.snapshot()
        assert list(state.unknown) == [execution_id]
        assert state.turn_open
        # The host resolves it in the fork; the turn goes on there.
        await fork.resolve(execution_id, "Invoice for 120 EUR sent to ACME.")
        await fork.wait_idle()
        await fork.verify()
        state = await fork.snapshot()
        assert not state.unknown and not state.turn_open
    # The fork re-ran nothing: every effect in the ledger is the source's.
    effects = (tmp_path / "effects").read_text().splitlines()
    assert effects and all(line.startswith("run ") for line in effects)
    assert await records(journal, scenario.SESSION) == source
    for session_id in (scenario.SESSION, "ses_invoice_fork"):
        report = await check(journal, session_id)
        assert report.ok, report.summary()


async def test_a_fork_that_ran_on_folds_from_its_base_without_checkpoints(
    tmp_path: Path,
) -> None:
    # A full fold leaves the checkpoint stream out of its read; a fork's seq 2
    # is its base all the same, read whole before the loop's records.
    journal = MemoryJournal()
    source = await run_scenario(journal, tmp_path)
    first_turn = next(r for r in source if isinstance(r.event, TurnEnded))
    ledger = scenario.Ledger(tmp_path, "fork")
    async with Session.fork(
        journal, scenario.SESSION, scenario.definition(ledger), at=first_turn.seq
    ) as fork:
        await fork.submit("Send the invoice to ACME.")
        await scenario.settle(fork, ledger)
        live = await fork.snapshot()
    written = await records(journal, fork.id)
    assert written[2].loop != CHECKPOINT_STREAM  # the loop's own records follow the base
    full = await read_restored(journal, fork.id, use_checkpoints=False)
    fast = await read_restored(journal, fork.id)
    assert full.states == fast.states
    assert full.head == fast.head == written[-1].seq
    assert full.states[live.loop].messages == live.messages
    assert full.states[live.loop].turn_index == live.turn_index == 2


async def test_a_fork_diverges_and_both_sessions_pass_their_check(tmp_path: Path) -> None:
    async with open_journal(scenario.journal_url(tmp_path)) as journal:
        source = await run_scenario(journal, tmp_path)
        first_turn = next(r for r in source if isinstance(r.event, TurnEnded))
        ledger = scenario.Ledger(tmp_path, "fork")
        async with Session.fork(
            journal, scenario.SESSION, scenario.definition(ledger), at=first_turn.seq
        ) as fork:
            fork_id = fork.id
            assert fork_id.startswith("ses_")
            await fork.submit("Send the invoice to ACME.")
            await scenario.settle(fork, ledger)
            await fork.verify()
            state = await fork.snapshot()
            assert state.turn_index == 2  # the source's turn 2 booked a table; this one did not
        assert [line.split()[2] for line in (tmp_path / "effects").read_text().splitlines()][
            -1
        ] == "send_invoice"
        assert await records(journal, scenario.SESSION) == source
        for session_id in (scenario.SESSION, fork_id):
            report = await check(journal, session_id)
            assert report.ok, report.summary()
        # A fork of the fork: cut at its head, it goes on again.
        head = await journal.head(fork_id)
        async with Session.fork(
            journal, fork_id, scenario.definition(ledger), at=head, new_session_id="ses_grandchild"
        ) as grandchild:
            await grandchild.submit("What do you remember?")
            await grandchild.wait_idle()
            await grandchild.verify()
        for session_id in (fork_id, "ses_grandchild"):
            report = await check(journal, session_id)
            assert report.ok, report.summary()
        fork_records = await records(journal, "ses_grandchild")
        assert f"forked from session {fork_id} at seq {head}" in render_transcript(fork_records)
        tree = build_tree("ses_grandchild", fork_records)
        assert tree.forked_from is not None and tree.forked_from.session == fork_id
        assert f"forked from session {fork_id} at seq {head}" in render_tree(tree)
        # The grandchild's stream folded onto its base: its last turn completed.
        assert tree.streams[0].status == "idle"


async def nothing_written(journal: Journal, before: list[str]) -> None:
    assert sorted(i.session for i in await journal.sessions()) == before


async def test_bad_input_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    journal = MemoryJournal()
    source = await run_scenario(journal, tmp_path)
    head = source[-1].seq
    before = [scenario.SESSION]
    d = scenario.definition(scenario.Ledger(tmp_path, "fork"))
    for at in (0, -1, head + 1):
        with pytest.raises(ForkError, match=rf"seq {at}: its records are seq 1\.\.{head}"):
            async with Session.fork(journal, scenario.SESSION, d, at=at):
                pass
        await nothing_written(journal, before)
    with pytest.raises(UnknownSessionError, match="there is no session nope"):
        async with Session.fork(journal, "nope", d, at=1):
            pass
    await nothing_written(journal, before)
    for taken in (scenario.SESSION,):
        with pytest.raises(SessionExistsError, match=f"session {taken} already exists"):
            async with Session.fork(journal, scenario.SESSION, d, at=3, new_session_id=taken):
                pass
    await nothing_written(journal, before)
    assert await records(journal, scenario.SESSION) == source


async def test_a_source_that_fails_its_check_is_refused() -> None:
    # Turn 1 ends with its tool call unanswered: the source breaks a rule at seq 7.
    events = good_turn()
    del events[6]
    journal = await journal_of(events)
    with pytest.raises(ForkError, match="fails its check"):
        await plan_fork(journal, BAD_SESSION, len(events), "ses_f")
    assert [i.session for i in await journal.sessions()] == [BAD_SESSION]
    # Cut before the break, the same source forks.
    plan = await plan_fork(journal, BAD_SESSION, 5, "ses_f")
    assert plan.at == 5


async def test_the_checker_compares_a_fork_with_its_source(tmp_path: Path) -> None:
    journal = MemoryJournal()
    await run_scenario(journal, tmp_path)
    plan = await plan_fork(journal, scenario.SESSION, 12, "ses_forged")
    plan.states["main"].turn_index += 1  # a base that is not the source's fold
    await write_fork(journal, plan)
    report = await check(journal, "ses_forged")
    assert report.first_bad_seq == 2
    assert [p.rule for p in report.problems] == ["fork base equals its source"]
    assert "loop(s) main differ" in report.problems[0].detail
    # A fork naming another digest: the source's history is not the one it was cut from.
    plan = await plan_fork(journal, scenario.SESSION, 12, "ses_digest")
    plan.digest = bytes(16)
    await write_fork(journal, plan)
    report = await check(journal, "ses_digest")
    assert [p.rule for p in report.problems] == ["fork base equals its source"]
    assert "digest" in report.problems[0].detail
    # A fork whose source is elsewhere passes, saying what it could not compare.
    alone = MemoryJournal()
    lease = await alone.open_session("ses_alone")
    forked = await records(journal, "ses_digest")
    await alone.append(
        lease,
        [Draft(id=r.id, loop=r.loop, event=r.event) for r in forked[:2]],
        expected_seq=0,
    )
    report = await check(alone, "ses_alone")
    assert report.ok and report.notes and "not in this journal" in report.summary()


def test_the_fork_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = scenario.journal_url(tmp_path)

    async def prepare() -> None:
        async with open_journal(url) as journal:
            await run_scenario(journal, tmp_path)

    trio.run(prepare)
    assert main(["fork", scenario.SESSION, "--at", "5", "--journal", url]) == 0
    fork_id = capsys.readouterr().out.strip()
    assert fork_id.startswith("ses_")
    assert main(["replay", fork_id, "--check", "--journal", url]) == 0
    assert main(["replay", fork_id, "--journal", url]) == 0
    assert f"forked from session {scenario.SESSION} at seq 5" in capsys.readouterr().out
    assert main(["fork", fork_id, "--at", "2", "--new-session", "ses_f2", "--journal", url]) == 0
    assert capsys.readouterr().out.strip() == "ses_f2"
    assert main(["sessions", "--journal", url]) == 0
    listed = capsys.readouterr().out
    listing = listed.splitlines()[1:]
    assert listing[0].startswith(scenario.SESSION)
    assert (
        listing[1].startswith(f"  └ {fork_id}")
        and f"fork of {scenario.SESSION} at seq 5" in (listing[1])
    )
    assert listing[2].startswith("    └ ses_f2")
    # Bad input: one line naming it, exit 2, nothing written.
    assert main(["fork", scenario.SESSION, "--at", "100000", "--journal", url]) == 2
    assert "its records are seq 1.." in capsys.readouterr().err
    assert (
        main(["fork", scenario.SESSION, "--at", "3", "--new-session", "ses_f2", "--journal", url])
        == 2
    )
    assert "session ses_f2 already exists" in capsys.readouterr().err
    assert main(["sessions", "--journal", url]) == 0
    assert capsys.readouterr().out == listed  # the refused forks wrote nothing


def test_queued_input_of_the_source_is_the_forks(tmp_path: Path) -> None:
    """Input queued at the seq is part of the state the fork starts from."""

    async def go() -> None:
        journal = MemoryJournal()
        source = await run_scenario(journal, tmp_path)
        queued = next(r for r in source if isinstance(r.event, InputQueued))
        plan = await plan_fork(journal, scenario.SESSION, queued.seq, "ses_q")
        assert [q.input_id for q in plan.states["main"].queued] == [queued.event.input_id]  # type: ignore[union-attr]

    trio.run(go)


async def test_a_fork_cut_inside_a_turn_traces_that_turn(tmp_path: Path) -> None:
    from session.traces.otel import spans_of

    journal = MemoryJournal()
    source = await run_scenario(journal, tmp_path)
    started = next(
        r for r in source if isinstance(r.event, ToolStarted) and r.event.name == "send_invoice"
    )
    ledger = scenario.Ledger(tmp_path, "fork")
    async with Session.fork(
        journal, scenario.SESSION, scenario.definition(ledger), at=started.seq, new_session_id="f"
    ) as fork:
        await scenario.settle(fork, ledger)
    spans = spans_of("f", await records(journal, "f"))
    turns = [s for s in spans if s.name.startswith("invoke_agent")]
    assert [s.name for s in turns] == ["invoke_agent crash"]
    attributes = turns[0].attributes or {}
    assert attributes["loopruntime.forked_from"] == scenario.SESSION
    assert attributes["loopruntime.forked_at"] == started.seq
    # The call the fork resolved, and the reply after it, are the turn's children.
    children = [s for s in spans if s.parent is not None]
    assert {s.parent.span_id for s in children if s.parent} == {turns[0].context.span_id}
    assert {s.name for s in children} == {"execute_tool send_invoice", "chat scripted:crash"}
