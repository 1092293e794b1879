"""A host's graceful stop checkpoints its sessions at rest, as passivation
does, before it releases their leases: the next host's activation reads the
checkpoints and no record after them.  Bounded, and never in the way of the
release."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import trio
from structlog.testing import capture_logs

from journal import (
    TAIL_LIMIT,
    Checkpointed,
    Draft,
    ForwardingJournal,
    Journal,
    JournalUnavailableError,
    Record,
    SessionLease,
    open_journal,
)
from journal.events import CHECKPOINT_STREAM, ToolStarted, TurnEnded
from journal.inbox import Consumed
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Client, Host, Status
from session.replay import check
from tests.host.support import counting_definition, trio_clock_journal, wait_for
from tests.support.loops import crashed_copy, events_of, records, run_turns
from tests.support.processes import ROOT

DEFS = {"counter": counting_definition()}

TURNS = 16
"""Turns of a long session: over 100 records, under the writer's 1,000."""


class CountedTail(ForwardingJournal):
    """Counts the folds of a session (reads of its checkpoints) and the
    records read with them: after the last checkpoint, its tail."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.folds = 0
        self.tail = 0

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        self.folds += 1
        read = await self.inner.read_checkpointed(session, tail_limit=tail_limit)
        self.tail += len(read.tail)
        return read

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        return self._counted(self.inner.read(session, after=after, skip_stream=skip_stream))

    async def _counted(self, records: AsyncIterator[Record]) -> AsyncIterator[Record]:
        async for record in records:
            self.tail += 1
            yield record


class CheckpointTrouble(ForwardingJournal):
    """Fails the appends of checkpoints of the sessions in ``failing``, and
    makes every checkpoint's append take ``slow`` seconds."""

    def __init__(self, inner: Journal, *, failing: Sequence[str] = (), slow: float = 0.0) -> None:
        super().__init__(inner)
        self.failing = set(failing)
        self.slow = slow
        self.began: list[float] = []
        """When each checkpoint's append began (trio time)."""

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Consumed] = (),
    ) -> list[Record]:
        if any(d.loop == CHECKPOINT_STREAM for d in drafts):
            self.began.append(trio.current_time())
            if lease.session in self.failing:
                raise JournalUnavailableError("the journal went away (a test)")
            await trio.sleep(self.slow)
        return await self.inner.append(lease, drafts, expected_seq=expected_seq, consumes=consumes)


async def turns(journal: Journal, session_id: str) -> int:
    return len(await events_of(journal, session_id, TurnEnded))


async def activate(journal: Journal, session_id: str, key: str) -> None:
    """Send ``session_id`` a command through the inbox and wait for its turn."""
    client = Client(journal)
    before = await turns(journal, session_id)
    await client.submit(session_id, "count", key=key)
    await client.wait(session_id, key, timeout=60)

    async def turned() -> bool:
        return await turns(journal, session_id) > before

    await wait_for(turned)


async def stopping_checkpoints_then_activating(journal: Journal, **host: float) -> None:
    # A long session and a short one, run by a host (activated by a command;
    # neither reaches the writer's interval), then the host stops.
    await run_turns(journal, "long", TURNS)
    await run_turns(journal, "short", 1)
    assert await journal.checkpoints("long") == []
    async with Host.open(journal, DEFS, host_id="a", idle_after=3600, **host) as a:
        await activate(journal, "long", "a1")
        await activate(journal, "short", "a2")
        assert set(a.sessions) == {"long", "short"}
    assert a.statistics().passivations == 0
    head = await journal.head("long")
    assert head > 100
    # The stop left the long one's checkpoint as its last record; the
    # short one (under 100 records after none) got none.
    assert [r.seq for r in await journal.checkpoints("long")][-1:] == [head]
    assert await journal.checkpoints("short") == []
    info = {s.session: s for s in await journal.sessions()}
    assert not info["long"].live and not info["short"].live

    counted = CountedTail(journal)
    async with Host.open(counted, DEFS, host_id="b", idle_after=3600, **host) as b:
        await activate(journal, "long", "b1")
        # Released, not expired: taken as unowned, not failed over.
        assert b.statistics().failovers == 0
    # Activation folded the checkpoints and read no record after them
    # (a session no host created is folded once more, for its definition).
    assert counted.folds == 2
    assert counted.tail == 0
    report = await check(journal, "long")
    assert report.ok, report


async def test_a_stopping_host_checkpoints_its_sessions_at_rest(autojump_clock: object) -> None:
    await stopping_checkpoints_then_activating(trio_clock_journal(), poll=0.5)


async def test_a_stopping_host_checkpoints_its_sessions_at_rest_on_sqlite(
    tmp_path: Path,
) -> None:
    """On SQLite in real time (under autojump_clock, virtual time runs ahead
    while its thread works): waits for states, never for a span of time."""
    async with open_journal(f"sqlite:///{tmp_path / 'journal.db'}") as journal:
        await stopping_checkpoints_then_activating(journal, poll=0.2, lease_ttl=30)


async def test_a_failed_checkpoint_at_stop_still_releases_the_session(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    await run_turns(journal, "broken", TURNS)
    await run_turns(journal, "fine", TURNS)
    trouble = CheckpointTrouble(journal, failing=["broken"])
    with capture_logs() as logs:
        async with Host.open(trouble, DEFS, host_id="a", idle_after=3600, poll=0.5) as a:
            await activate(journal, "broken", "a1")
            await activate(journal, "fine", "a2")
    assert not a.sessions
    events = [(e["event"], e.get("session")) for e in logs]
    assert ("rest_checkpoint_failed", "broken") in events
    assert not any(e == "session_failed" for e, _ in events)
    # The failure cost the other session nothing, and the failed one its
    # checkpoint only: both leases were released at the stop.
    assert await journal.checkpoints("broken") == []
    assert [r.seq for r in await journal.checkpoints("fine")] == [await journal.head("fine")]
    info = {s.session: s for s in await journal.sessions()}
    assert not info["broken"].live and not info["fine"].live
    async with Host.open(journal, DEFS, host_id="b", idle_after=3600, poll=0.5) as b:
        await activate(journal, "broken", "b1")
        assert b.statistics().failovers == 0
    report = await check(journal, "broken")
    assert report.ok, report


async def test_a_stop_begins_no_checkpoint_past_its_budget(autojump_clock: object) -> None:
    """Ten long sessions, checkpoints that take 15 s each, a budget of
    ``lease_ttl / 3`` = 10 s: eight begin at once (the bound on concurrency),
    the other two are released without one when their turn comes too late."""
    journal = trio_clock_journal()
    sids = [f"s{i}" for i in range(10)]
    for sid in sids:
        await run_turns(journal, sid, TURNS)
    trouble = CheckpointTrouble(journal, slow=15.0)
    with capture_logs() as logs:
        async with Host.open(trouble, DEFS, host_id="a", idle_after=3600, poll=0.5, lease_ttl=30):
            for sid in sids:
                await activate(journal, sid, f"a-{sid}")
            stop = trio.current_time()
        stopped = trio.current_time()
    checkpointed = [sid for sid in sids if await journal.checkpoints(sid)]
    assert len(checkpointed) == 8
    assert len(trouble.began) == 8 and all(t == stop for t in trouble.began)
    # Every begun checkpoint finished (an append is not abandoned midway);
    # none more was begun, so the stop took one checkpoint's time.
    assert stopped - stop == 15.0
    skipped = [e for e in logs if e["event"] == "stop_checkpoints_skipped"]
    assert [e["sessions"] for e in skipped] == [2]
    info = {s.session: s for s in await journal.sessions()}
    assert not any(info[sid].live for sid in sids)


async def test_a_session_with_an_unknown_effect_is_stopped_without_one(
    autojump_clock: object,
) -> None:
    """It waits for a person to settle the effect; the stop leaves it as
    today's clean shutdown does (its records, no checkpoint)."""
    journal = trio_clock_journal()
    await run_turns(journal, "long", TURNS)
    last = [r.seq for r in await records(journal, "long") if isinstance(r.event, ToolStarted)]
    crashed = await crashed_copy(journal, "long", last[-1])
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="a", idle_after=3600, poll=0.5) as a:
        await client.submit(crashed, "count", key="a1")
        await client.wait(crashed, "a1", timeout=60)
        await wait_for(lambda: crashed in a.sessions and a.sessions[crashed].idle())
        [listed] = [s for s in await client.sessions() if s.session == crashed]
        assert listed.status is Status.UNKNOWN_EFFECTS
    assert await journal.head(crashed) > 100
    assert await journal.checkpoints(crashed) == []
    info = {s.session: s for s in await journal.sessions()}
    assert not info[crashed].live


def held_counter(held: trio.Event) -> LoopDefinition:
    """``counting_definition`` whose ``count`` waits for ``held``."""

    @tool(permission="allow")
    async def count(ctx: ToolContext, *, n: int) -> str:
        """Counts, once ``held`` is set."""
        await held.wait()
        return str(n + 1)

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="counted")
        return Reply(tool_calls=[ToolCall(name="count", input={"n": len(request.messages)})])

    return LoopDefinition(name="counter", model=ScriptedModel(script), tools=[count])


async def test_a_session_stopped_mid_turn_is_handed_over_without_one(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    await run_turns(journal, "long", TURNS)
    client = Client(journal)
    async with Host.open(
        journal, {"counter": held_counter(trio.Event())}, host_id="a", idle_after=3600, poll=0.5
    ):
        before = len(await events_of(journal, "long", ToolStarted))
        await client.submit("long", "count", key="a1")

        async def started() -> bool:
            return len(await events_of(journal, "long", ToolStarted)) > before

        await wait_for(started)
    assert await journal.checkpoints("long") == []
    # Handed over: the lease left expired for the next host, as any stop leaves it.
    info = {s.session: s for s in await journal.sessions()}
    assert (info["long"].owner, info["long"].expires_at) == ("a", 0)


async def test_a_failed_checkpoint_at_passivation_still_releases_the_session(
    autojump_clock: object,
) -> None:
    """Passivation takes the same path: the failure is logged, the session
    passivated and its lease released, not left to expire."""
    journal = trio_clock_journal()
    await run_turns(journal, "broken", TURNS)
    trouble = CheckpointTrouble(journal, failing=["broken"])
    with capture_logs() as logs:
        async with Host.open(trouble, DEFS, host_id="a", idle_after=10, poll=0.5) as a:
            await activate(journal, "broken", "a1")
            await wait_for(lambda: "broken" not in a.sessions)
            events = [(e["event"], e.get("session")) for e in logs]
            assert ("rest_checkpoint_failed", "broken") in events
            assert a.statistics().passivations == 1
            assert not any(e == "session_failed" for e, _ in events)
            info = {s.session: s for s in await journal.sessions()}
            assert info["broken"].owner is None
            # Its next command activates it at once, its records whole.
            await activate(journal, "broken", "a2")
    assert await journal.checkpoints("broken") == []
    report = await check(journal, "broken")
    assert report.ok, report


async def test_sigterm_checkpoints_the_sessions_of_a_host_process(tmp_path: Path) -> None:
    """``loopruntime host`` stopped by SIGTERM takes the same path: its
    session's last record is the checkpoint, and its lease is released."""
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    async with open_journal(url) as journal:
        await run_turns(journal, "long", TURNS)
    host = await trio.lowlevel.open_process(
        [sys.executable, "-m", "session.cli.main", "host", "--journal", url,
         "--definitions", "tests.host.support:counting_definition",
         "--host-id", "h1", "--lease-ttl", "30", "--poll", "0.05"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with open_journal(url) as journal:
            await activate(journal, "long", "k1")
            assert await journal.checkpoints("long") == []
    finally:
        os.kill(host.pid, signal.SIGTERM)
        await host.wait()
    assert host.returncode == 0
    async with open_journal(url) as journal:
        assert [r.seq for r in await journal.checkpoints("long")] == [await journal.head("long")]
        info = {s.session: s for s in await journal.sessions()}["long"]
        assert info.owner is None
