"""Commands a host will never apply: each entry is consumed once with the
reason, and the host does not claim the session again and again for them.
A transient failure is not a refusal: its entry waits."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import trio

from journal import (
    FencedError,
    ForwardingJournal,
    InvalidEventError,
    Journal,
    JournalUnavailableError,
    LeaseHeldError,
    SessionLease,
    SessionNotFoundError,
    open_journal,
)
from journal import inbox as ib
from loopruntime import LeaseLostError, LoopClosedError, LoopError, QueueFullError
from session import Client, CommandRefusedError, Host, Status
from session.hosting.host_commands import refused
from tests.cli.test_host_cli import cli
from tests.host.support import counting_definition, trio_clock_journal, wait_for
from tests.support.processes import ROOT

DEFS = {"counter": counting_definition()}


class CountingClaims(ForwardingJournal):
    """Counts the host's acquisitions and its passes looking for work.  Past a
    few acquisitions each one takes a second of (virtual) time, so a host
    claiming a session in a loop lets the test go on and fail rather than
    spin under the autojump clock forever."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.acquires = 0
        self.passes = 0

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        self.acquires += len(sessions)
        if self.acquires > 3:
            await trio.sleep(1)
        return await super().acquire_all(sessions, owner, ttl=ttl)

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[ib.Claim]:
        self.passes += 1
        return await super().claimable(definitions=definitions, owner=owner, limit=limit)


@pytest.fixture
async def journal() -> AsyncIterator[Journal]:
    """The memory journal only: these tests count claims under the autojump
    clock, and a SQLite commit runs in a thread while virtual time jumps on,
    past a lease's deadline.  A real host process on a SQLite file is
    ``test_a_host_process_refuses_a_principal_once_and_submit_says_why``."""
    yield trio_clock_journal()


async def _passes_after(counting: CountingClaims, more: int) -> None:
    """Until the host looked for work ``more`` times after now."""
    target = counting.passes + more
    await wait_for(lambda: counting.passes >= target)


async def _settled(counting: CountingClaims, session: str, key: str) -> None:
    """Until the entry under ``key`` is consumed, or the host claimed the
    session more often than it should (then the test's asserts say so), and
    the host looked for work a few times more."""

    async def done() -> bool:
        entry = await counting.entry(session, key)
        return (entry is not None and entry.consumed) or counting.acquires > 3

    await wait_for(done)
    await _passes_after(counting, 5)


async def test_a_refused_principal_is_consumed_once_and_never_claimed_again(
    journal: Journal, autojump_clock: object
) -> None:
    counting = CountingClaims(journal)
    client = Client(journal)
    async with Host.open(counting, DEFS, host_id="h1", poll=0.5, principals={"alice"}) as host:
        await client.create("counter", session_id="s1", key="k1/create", principal="bob")
        await client.submit("s1", "hi", key="k1", principal="bob")
        await _settled(counting, "s1", "k1")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait("s1", "k1", timeout=0.5)
        claims = host.statistics().claims
        [listed] = [s for s in await client.sessions() if s.session == "s1"]
    assert listed.status is Status.IDLE and listed.detail.startswith("never started")
    assert caught.value.outcome.error == "UnknownPrincipalError"
    assert "principal 'bob' is not one host h1 takes commands from" in str(caught.value)
    create = await journal.entry("s1", "k1/create")
    assert create is not None and create.outcome is not None
    assert create.outcome.error == "UnknownPrincipalError"
    assert await journal.inbox("s1") == []  # nothing left to claim it for
    assert [r async for r in journal.read("s1")] == []  # no session was started
    assert claims == 1 and counting.acquires == 1


async def test_a_command_after_a_refused_create_is_refused_once(
    journal: Journal, autojump_clock: object
) -> None:
    counting = CountingClaims(journal)
    client = Client(journal)
    async with Host.open(counting, DEFS, host_id="h1", poll=0.5, principals={"alice"}) as host:
        await client.create("counter", session_id="s1", key="c1", principal="mallory")
        await client.submit("s1", "hi", key="k1", principal="alice")
        await _settled(counting, "s1", "k1")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait("s1", "k1", timeout=0.5)
        # Created afterwards by a principal the host knows, it starts and serves.
        await client.create("counter", session_id="s1", key="c2", principal="alice")
        await client.submit("s1", "count", key="k2", principal="alice")
        await client.wait("s1", "k2", timeout=None)
        assert host.statistics().applied == 4
        # The two refused before the session started, each by its reason.
        assert host.statistics().refused == {"UnknownPrincipalError": 1, "UnknownSessionError": 1}
    assert caught.value.outcome.error == "UnknownSessionError"
    said = str(caught.value)
    assert "session s1 was never started" in said and "--create" in said
    assert "its create (key 'c1') was refused with UnknownPrincipalError" in said
    assert counting.acquires == 2  # once to refuse, once to start it


async def test_a_command_failing_in_its_session_is_consumed_once(
    journal: Journal, autojump_clock: object
) -> None:
    counting = CountingClaims(journal)
    client = Client(journal)
    async with Host.open(counting, DEFS, host_id="h1", poll=0.5) as host:
        sid = await client.create("counter", key="c1")
        await client.submit(sid, "to a loop it lacks", key="k1", loop="nosuch")
        await _settled(counting, sid, "k1")
        with pytest.raises(CommandRefusedError, match="has no loop 'nosuch'"):
            await client.wait(sid, "k1", timeout=0.5)
        assert host.statistics().applied == 2
    assert await journal.inbox(sid) == []
    assert counting.acquires == 1


def test_deterministic_refusals_are_told_from_transient_failures() -> None:
    for deterministic in (
        LoopError("session s has no loop 'x'"),
        QueueFullError("the queue is full"),
        ValueError("empty text"),
        InvalidEventError(object(), "too large"),
    ):
        outcome = refused(deterministic)
        assert outcome is not None and outcome.error == type(deterministic).__name__
        assert outcome.message == str(deterministic)
    for transient in (
        LoopClosedError("closing"),
        LeaseLostError("s", "host-a", "its lease ran out"),
        FencedError("s", 2, 3),
        JournalUnavailableError("the server went away"),
        RuntimeError("a bug"),
    ):
        assert refused(transient) is None


@pytest.mark.slow
async def test_a_host_process_refuses_a_principal_once_and_submit_says_why(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    log = tmp_path / "host.log"

    async def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process(
            cli(*args, "--journal", url),
            cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip

    with log.open("wb") as out:
        host = await trio.lowlevel.open_process(
            cli(
                "host", "--journal", url, "--definitions",
                "examples.web_service.agents:DEFINITIONS", "--host-id", "h1",
                "--poll", "0.05", "--known-principal", "alice",
            ),
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
        try:
            # --wait's bound is a hang guard (the host may still be starting), not a speed.
            refused_ = await run(
                "submit", "s1", "hi", "--key", "k1", "--create", "echo", "--principal", "bob",
                "--wait", "120",
            )  # fmt: skip
            # A session after it is served: the host went on past the refusal.
            served = await run(
                "submit", "s2", "hi", "--key", "k1", "--create", "echo", "--principal",
                "alice", "--wait", "120",
            )  # fmt: skip
        finally:
            os.kill(host.pid, signal.SIGTERM)
            await host.wait()
    assert refused_.returncode == 2
    said = refused_.stderr.decode()
    assert "was refused: UnknownPrincipalError" in said
    assert "principal 'bob' is not one host h1 takes commands from" in said
    assert "start one offering" not in said
    assert served.returncode == 0, served.stderr.decode()
    assert host.returncode == 0
    async with open_journal(url) as journal:
        assert await journal.inbox("s1") == []
        create = await journal.entry("s1", "k1/create")
        assert create is not None and create.outcome is not None
        assert create.outcome.error == "UnknownPrincipalError"
    lines = log.read_text().splitlines()
    assert len([x for x in lines if "session_claimed" in x and "session=s1" in x]) == 1
