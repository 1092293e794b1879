"""Idempotency keys: every command given twice with one key takes effect once,
in one process, across a restore, and after a SIGKILL between the commit and
the reply; the same key on other content is refused and commits nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.events import CommandKeyed, Provenance, TurnRejected
from loopruntime import (
    Delegate,
    IdempotencyKeyError,
    Limits,
    LoopClosedError,
    LoopDefinition,
    QueueFullError,
)
from loopruntime.host import KEYS_KEPT, MAX_KEY_LENGTH
from loopruntime.models import Reply, ScriptedModel
from session import Session
from session.replay import check
from tests.support import keyed
from tests.support.loops import records
from tests.support.processes import run_child


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory:"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.mark.parametrize("command", keyed.COMMANDS)
async def test_the_same_key_twice_takes_effect_once(
    command: str, journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    async with open_journal(journal_url) as journal:
        async with keyed.prepared(journal, command, "ses_keys") as (s, ctx):
            first = await keyed.issue(s, command, ctx)
            head = s.head
            again = await keyed.issue(s, command, ctx)
            assert again == first
            assert s.head == head, "a repeat committed something"
            with pytest.raises(IdempotencyKeyError) as refused:
                await keyed.issue(s, command, ctx, other=True)
            assert s.head == head, "a refused key committed something"
            session_id = s.id
            await s.interrupt()  # a stalled reply (steer, cancel_queued) ends here
            await s.wait_idle()
        rs = await records(journal, session_id)
        (first_use,) = keyed.keyed_records(rs)
        assert refused.value.seq == first_use.seq
        assert f"seq {first_use.seq}" in str(refused.value)
        assert keyed.effects(command, rs) == 1
        # Its records name the keyed record as their cause.
        assert any(r.cause == first_use.id for r in rs) or command in ("interrupt", "compact")
        # Restored, the fold still knows the key: a repeat answers the same.
        async with Session.restore(journal, session_id, keyed.definition()) as restored:
            assert await keyed.issue(restored, command, ctx) == first
            with pytest.raises(IdempotencyKeyError):
                await keyed.issue(restored, command, ctx, other=True)
            await restored.wait_idle()
        rs = await records(journal, session_id)
        assert keyed.effects(command, rs) == 1
        report = await check(journal, session_id)
        assert report.ok, report.summary()


@pytest.mark.slow
@pytest.mark.parametrize("command", keyed.COMMANDS)
async def test_a_retry_after_a_crash_between_commit_and_reply_takes_effect_once(
    command: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    killed = await run_child("keyed", command, url, "ses_crash", str(tmp_path))
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    ctx = json.loads((tmp_path / "ctx.json").read_text())
    async with open_journal(url) as journal:
        session_id = ctx["session"]
        before = await records(journal, session_id)
        assert len(keyed.keyed_records(before)) == 1, "the child died before its commit"
        async with Session.restore(journal, session_id, keyed.definition()) as s:
            result = await keyed.issue(s, command, ctx)
            if command == "submit":
                assert result == keyed.keyed_records(before)[0].event.result
            await s.wait_idle()
        rs = await records(journal, session_id)
        assert len(keyed.keyed_records(rs)) == 1
        assert keyed.effects(command, rs) == 1
        report = await check(journal, session_id)
        assert report.ok, report.summary()


async def test_a_retry_on_postgres_after_a_crash(postgres_url: str, tmp_path: Path) -> None:
    killed = await run_child("keyed", "submit", postgres_url, "ses_pgcrash", str(tmp_path))
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    async with open_journal(postgres_url) as journal:
        async with Session.restore(journal, "ses_pgcrash", keyed.definition()) as s:
            first = keyed.keyed_records(await records(journal, s.id))[0].event.result
            assert await keyed.issue(s, "submit", {}) == first
            await s.wait_idle()
        rs = await records(journal, "ses_pgcrash")
        assert keyed.effects("submit", rs) == 1
        assert (await check(journal, "ses_pgcrash")).ok


def plain() -> LoopDefinition:
    return LoopDefinition(name="plain", model=ScriptedModel(lambda _r: Reply(text="ok")))


@pytest.mark.parametrize(
    ("key", "error", "words"),
    [
        (17, TypeError, "key must be text"),
        (b"bytes", TypeError, "key must be text"),
        ("", ValueError, "must not be empty"),
        ("k" * (MAX_KEY_LENGTH + 1), ValueError, f"at most {MAX_KEY_LENGTH}"),
        ("bad \ud800 text", ValueError, "not valid Unicode"),
    ],
)
async def test_a_bad_key_is_refused_before_anything_is_committed(
    key: object, error: type[Exception], words: str
) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, plain()) as s:
            await s.wait_idle()
            head = s.head
            for call in (
                lambda: s.submit("hi", key=key),  # type: ignore[arg-type]
                lambda: s.steer("hi", key=key),  # type: ignore[arg-type]
                lambda: s.interrupt(key=key),  # type: ignore[arg-type]
                lambda: s.compact(key=key),  # type: ignore[arg-type]
                lambda: s.change_mode(None, key=key),  # type: ignore[arg-type]
                lambda: s.cancel_queued("in_x", key=key),  # type: ignore[arg-type]
                lambda: s.answer("gate_x", "a", key=key),  # type: ignore[arg-type]
                lambda: s.decide("gate_x", True, key=key),  # type: ignore[arg-type]
                lambda: s.resolve("exe_x", "r", key=key),  # type: ignore[arg-type]
            ):
                with pytest.raises(error, match=words):
                    await call()
            assert s.head == head


async def test_a_key_is_refused_for_another_command_or_another_loop() -> None:
    d = LoopDefinition(
        name="lead",
        model=ScriptedModel(lambda _r: Reply(text="ok")),
        delegates=[Delegate(name="helper", description="h", definition=plain())],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            assert await s.interrupt(key="k") is False
            head = s.head
            with pytest.raises(IdempotencyKeyError, match="for interrupt, not steer"):
                await s.steer("x", key="k")
            # A second loop of the session: the same command elsewhere is other content.
            await s.start_worker(
                "other", plain(), Provenance(parent_loop="main", turn=0, step=0, execution_id="x")
            )
            head = s.head
            with pytest.raises(IdempotencyKeyError):
                await s.interrupt(loop="other", key="k")
            assert s.head == head


async def test_concurrent_calls_with_one_key_take_effect_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, plain()) as s:
            results: list[str] = []

            async def one() -> None:
                results.append(await s.submit("hello there", key=keyed.KEY))

            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(one)
            await s.wait_idle()
        rs = await records(journal, s.id)
    assert len(set(results)) == 1 and len(results) == 5
    assert keyed.effects("submit", rs) == 1


async def test_a_loop_remembers_its_newest_keys_only() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, plain()) as s:
            for i in range(KEYS_KEPT + 1):
                await s.interrupt(key=f"k{i}")
            state = await s.snapshot()
    assert state.keys is not None and len(state.keys) == KEYS_KEPT
    assert "k0" not in state.keys and f"k{KEYS_KEPT}" in state.keys


# -- the bounded queue ------------------------------------------------------------------


def slow(limit: int) -> LoopDefinition:
    """A loop whose "slow" replies stall: its queue fills behind the turn."""
    return LoopDefinition(
        name="slow",
        model=keyed.Stalling(),
        limits=dataclasses.replace(keyed.STALLING_LIMITS, max_queued_inputs=limit),
    )


async def test_a_submit_beyond_the_queue_bound_is_refused_and_recorded(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, slow(3)) as s:
            await s.submit("a slow one please")
            queued = [await s.submit(f"queued {i}") for i in range(3)]
            with pytest.raises(QueueFullError, match="max_queued_inputs=3"):
                await s.submit("one too many", key="too-many")
            state = await s.snapshot()
            assert [q.input_id for q in state.queued] == queued
            # The key was not used up: the same key goes through once there is room.
            await s.cancel_queued(queued[0])
            accepted = await s.submit("one too many", key="too-many")
            await s.interrupt()
        rs = await records(journal, s.id)
    (rejected,) = [r.event for r in rs if isinstance(r.event, TurnRejected)]
    assert rejected.reason == "queue_full" and rejected.key == "too-many"
    assert rejected.input_id != accepted


async def test_a_submit_during_shutdown_is_recorded_and_refused() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, plain()) as s:
            await s.wait_idle()
            await s.shutdown()
            with pytest.raises(LoopClosedError):
                await s.submit("too late", key="late")
        rs = await records(journal, s.id)
        (rejected,) = [r.event for r in rs if isinstance(r.event, TurnRejected)]
        assert rejected.reason == "shutting_down" and rejected.key == "late"
        # The key was not used: no command.keyed record.
        assert not [r for r in rs if isinstance(r.event, CommandKeyed)]
    # The journal closed: nothing can be recorded, the refusal stands.
    with pytest.raises(LoopClosedError):
        await s.submit("later still")


@pytest.mark.parametrize(
    ("bad", "error"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("64", TypeError)],
)
def test_max_queued_inputs_must_be_a_positive_whole_number(bad: object, error: type) -> None:
    with pytest.raises(error, match="max_queued_inputs"):
        Limits(max_queued_inputs=bad)  # type: ignore[arg-type]
