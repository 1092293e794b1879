"""One fault run, start to end: the order of the faults and of the waves of
keyed commands around them (``harness.py`` has the pieces).

1. waves of inputs, one per session and wave, 30 % of them sent twice under
   their key (a client that never heard back); the waves a fault is aimed at
   are slow (``workload.SLOW_DELAY``), so calls are in flight when it comes;
2. SIGKILL of a host running a tool call, and that host launched again at
   once under its own ``--host-id``;
3. SIGSTOP of a host running a tool call, kept stopped until the journal
   shows another host settled that call (so past its lease), then SIGCONT;
4. on PostgreSQL, a restart of the server (``fast``, then ``immediate``)
   while a wave is being sent;
5. hosts that ended are launched again (so the work still gets done and
   every other property can be checked), 30 % of every key sent once more,
   and the run waits until every input was applied and its turn ended.
"""

from __future__ import annotations

import signal
import zlib
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import trio

from journal import Journal, RetryingJournal, open_journal
from journal.events import ToolAbandoned, ToolCompleted, ToolResolved, TurnEnded, TurnStarted
from session import Client
from tests.support.pgserver import RestartableServer

from .harness import (
    Fault,
    Fleet,
    HostProcess,
    Outcome,
    Sent,
    call_in_flight,
    failover_table,
    held_with_work,
    now_ns,
    read_back,
    wait_for,
)
from .workload import SLOW_DELAY

__all__ = ["fault_run"]


def resent(session: str, key: str) -> bool:
    """The 30 % of commands a client sends twice (the same ones every run)."""
    return zlib.crc32(f"{session}/{key}".encode()) % 10 < 3


async def fault_run(
    url: str,
    workdir: Path,
    backend: str,
    *,
    hosts: int,
    sessions: int,
    server: RestartableServer | None = None,
) -> Outcome:
    sent = Sent()
    faults: list[Fault] = []

    def say(what: str) -> None:
        print(f"[faults {backend}] {what}", flush=True)

    async with open_journal(url) as opened, trio.open_nursery() as nursery:
        # The harness's own reads outlive an outage too (and its waits loop).
        journal = RetryingJournal(opened)
        client = Client(journal)
        fleet = Fleet(url, workdir, nursery)
        names = [f"{backend}-h{i}" for i in range(hosts)]
        for name in names:
            assert await fleet.launch(name), f"host {name} did not start"
        sids = [f"{backend}-s{i}" for i in range(sessions)]
        for sid in sids:
            await sent.create(client, journal, sid)
        waves = 0

        async def wave(*, slow: bool = False) -> None:
            """One input per session; ``slow`` ones keep their calls in flight
            long enough to fault a host running one."""
            nonlocal waves
            waves += 1
            for sid in sids:
                key = f"w{waves}-slow" if slow else f"w{waves}"
                await sent.submit(client, sid, key)
                if resent(sid, key):
                    sent.resent += 1
                    await sent.submit(client, sid, key)

        warm = {name: await fleet.warm_up(name) for name in names}
        say("hosts up, sessions created")
        await wave(slow=True)
        say("wave 1 sent")
        slow = partial(wave, slow=True)
        killed, registered = await _kill_and_relaunch(journal, fleet, warm, slow)
        faults.append(killed)
        say(f"SIGKILLed {killed.host}, launched again")
        await wave(slow=True)
        paused, fault = await _pause_past_the_lease(journal, fleet, slow)
        faults.append(fault)
        say(f"{fault.host} paused past its lease, woken")
        if server is not None:
            for mode in ("fast", "immediate"):
                async with trio.open_nursery() as restarting:
                    restarting.start_soon(wave)
                    await trio.to_thread.run_sync(server.shut_down, mode)
                    # In this thread, blocking: see RestartableServer.
                    server.start_again()
                say(f"PostgreSQL restarted ({mode})")
        else:
            await wave()
        await _recover(journal, client, fleet, names, sent)
        say("hosts running again, keys resent, every input applied")
        outcome = await read_back(journal, backend, sent, workdir, fleet, faults)
        outcome.paused_call = paused
        outcome.relaunched_while_registered = registered
        say("journal read back and checked")
        await fleet.stop_all()
        say("hosts stopped")
    print("\n" + failover_table(backend, outcome.figures), flush=True)
    for end in outcome.exits:
        last = end.said.strip().splitlines()[-1:] or ["(nothing on stderr)"]
        print(f"host {end.host} ended with status {end.returncode}: {last[0][:200]}", flush=True)
    return outcome


async def _recover(
    journal: Journal, client: Client, fleet: Fleet, names: list[str], sent: Sent
) -> None:
    """Launch again the hosts that ended, send 30 % of every key once more (a
    client that never heard back), and wait until every input was applied
    and its turn ended."""
    for name in names:
        if name not in fleet.running:
            await fleet.keep_running(name, journal)
    for sid, key in list(sent.entries):
        if not key.endswith("/create") and resent(sid, f"again/{key}"):
            sent.resent += 1
            await sent.submit(client, sid, key)
    await wait_for(lambda: _all_done(journal, sent))


async def _wait_call_in_flight(
    journal: Journal, fleet: Fleet, more: Callable[[], Awaitable[None]]
) -> tuple[str, str, str]:
    """A call that started less than half its wait ago: a fault now comes
    before its effect, however long the harness took to find it.  When the
    hosts ran out of work before one was found, ``more`` gives them more."""
    found: tuple[str, str, str] | None = None

    async def running() -> bool:
        nonlocal found
        newest = await call_in_flight(journal, list(fleet.running))
        if newest is None and not any(i.pending for i in await journal.sessions()):
            await more()
            return False
        if newest is None or now_ns() - newest[1] > SLOW_DELAY / 2 * 1e9:
            return False
        found = newest[0]
        return True

    await wait_for(running)
    assert found is not None
    return found


async def _kill_and_relaunch(
    journal: Journal,
    fleet: Fleet,
    warm: dict[str, HostProcess],
    more: Callable[[], Awaitable[None]],
) -> tuple[Fault, bool]:
    """The fault, and whether the host was launched again while its old
    registration was still live (what the relaunch is meant to meet).
    ``warm`` holds a process started ahead for each host: whichever is killed
    is launched again within a moment, its imports done (a second or more on
    a busy machine)."""
    host, _, _ = await _wait_call_in_flight(journal, fleet, more)
    held = await held_with_work(journal, host)
    fleet.signal(host, signal.SIGKILL)
    fault = Fault("SIGKILL", host, now_ns(), held)
    registered = any(h.host == host and h.live for h in await journal.hosts())
    # At once, under its own id: it must wait out its old registration, not end.
    await fleet.keep_running(host, journal, warm=warm.pop(host))
    for unused in warm.values():
        await fleet.discard(unused)
    return fault, registered


async def _pause_past_the_lease(
    journal: Journal, fleet: Fleet, more: Callable[[], Awaitable[None]]
) -> tuple[tuple[str, str, str], Fault]:
    host, session, tool_use_id = call = await _wait_call_in_flight(journal, fleet, more)
    held = await held_with_work(journal, host)
    fleet.signal(host, signal.SIGSTOP)
    fault = Fault("SIGSTOP past the lease", host, now_ns(), held)

    async def settled_elsewhere() -> bool:
        spans = await journal.writers(session)
        async for r in journal.read(session):
            if (
                isinstance(r.event, ToolCompleted | ToolAbandoned | ToolResolved)
                and r.event.tool_use_id == tool_use_id
            ):
                owner = next((s.owner for s in reversed(spans) if s.first_seq <= r.seq), None)
                return owner != host
        return False

    await wait_for(settled_elsewhere)
    woken = now_ns()
    fleet.signal(host, signal.SIGCONT)

    async def awake() -> bool:
        # Its registration renewed after the wake-up: it ran again (and a
        # tool it was running has had its chance to go on).
        if host not in fleet.running:
            return True
        return any(h.host == host and h.expires_at > woken for h in await journal.hosts())

    await wait_for(awake)
    return call, fault


async def _all_done(journal: Journal, sent: Sent) -> bool:
    for key in sent.entries:
        entry = await journal.entry(*key)
        if entry is None or entry.outcome is None:
            return False
    for sid in {s for s, _ in sent.entries}:
        turns = [
            r.event async for r in journal.read(sid) if isinstance(r.event, TurnStarted | TurnEnded)
        ]
        if turns and not isinstance(turns[-1], TurnEnded):
            return False
    return True
