"""Hosts in real processes meeting faults: a host paused past its lease while
its tool waits never performs the effect once resumed; a host relaunched
under its own id after a SIGKILL waits out its former registration.

Time: real (the hosts are other processes), with short leases; every wait is
for a state of the journal, a file or a line a host logs, never a span."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio
import trio.lowlevel

from journal import HostIdInUseError, open_journal
from journal.events import ToolStarted, TurnEnded
from session import Client, Host
from session.embedded.status import Status
from tests.host.support import wait_for
from tests.host.test_host_crash import _write_lock_free
from tests.support.crash_hosts import LEASE_TTL, charging_definitions
from tests.support.crash_scenarios import effects
from tests.support.loops import events_of
from tests.support.processes import CHILD, READY, ROOT, kill_when_ready


async def read_until(stream: trio.abc.ReceiveStream, *wanted: bytes) -> bytes:
    """What ``stream`` said up to one of ``wanted`` (an assertion at EOF)."""
    said = b""
    while not any(w in said for w in wanted):
        chunk = await stream.receive_some()
        assert chunk, said
        said += chunk
    return said


async def test_a_paused_host_never_performs_an_effect_after_losing_its_lease(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    url = f"sqlite:///{path}"
    side, go = tmp_path / "effects.jsonl", tmp_path / "go"
    async with open_journal(url) as journal:
        client = Client(journal)
        sid = await client.create("charger", key="c1")
        await client.submit(sid, "charge it", key="s1")
    a = await trio.lowlevel.open_process(
        [sys.executable, "-m", CHILD, "host-pause", url, str(side), str(go)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert a.stdout is not None and a.stderr is not None
    try:
        await read_until(a.stdout, READY)  # its tool runs, waiting for ``go``
        # Paused (SIGSTOP) between two of its transactions, never inside one.
        while True:
            os.kill(a.pid, signal.SIGSTOP)
            if _write_lock_free(path):
                break
            os.kill(a.pid, signal.SIGCONT)
            await trio.lowlevel.checkpoint()
        async with open_journal(url) as journal:
            client = Client(journal)
            # Host b takes the session once a's lease expired; the call, not
            # replay-safe, is an unknown effect, which the operator settles.
            defs = charging_definitions(side, go)
            async with Host.open(journal, defs, host_id="b", lease_ttl=LEASE_TTL, poll=0.05) as b:
                await wait_for(lambda: b.statistics().failovers == 1)

                async def unknown() -> bool:
                    found = {s.session: s for s in await client.sessions()}
                    return found[sid].status is Status.UNKNOWN_EFFECTS

                await wait_for(unknown)
                [started] = await events_of(journal, sid, ToolStarted)
                await client.resolve(
                    sid, started.execution_id, "did not happen", is_error=True, key="r1"
                )
                await client.wait(sid, "r1", timeout=None)
                # What host a's tool waited for is there: resumed, it would
                # charge now, were its work not stopped first.
                go.touch()
                os.kill(a.pid, signal.SIGCONT)
                # Its session leaves it: stopped at its deadline (or, were it
                # still running, fenced at its next commit).
                said = await read_until(a.stderr, b"session_stopped", b"session_dropped")
                assert effects(side) == []
                assert b"reason=lease_deadline" in said
                assert {s.session: s for s in await client.sessions()}[sid].owner == "b"
        # Its session's work is gone (stopped, not merely late): nothing of it is left to run.
        os.kill(a.pid, signal.SIGKILL)
        await a.wait()
        assert effects(side) == []
    finally:
        if a.returncode is None:
            os.kill(a.pid, signal.SIGCONT)
            os.kill(a.pid, signal.SIGKILL)
            await a.wait()


async def test_a_host_relaunched_under_its_own_id_waits_out_its_registration(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    side = tmp_path / "hang-effects.jsonl"
    async with open_journal(url) as journal:
        client = Client(journal)
        sid = await client.create("fetcher", key="c1")
        await client.submit(sid, "fetch it", key="s1")
    # Host a (a 5 s registration, so the relaunch below finds it live) is
    # SIGKILLed while its tool runs.
    await kill_when_ready("host-tool", url, str(side), "5")
    host = await trio.lowlevel.open_process(
        [sys.executable, "-m", "session.cli.main", "host", "--journal", url,
         "--definitions", "tests.support.crash_hosts:cli_definitions",
         "--host-id", "a", "--lease-ttl", str(LEASE_TTL), "--poll", "0.05"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert host.stdout is not None and host.stderr is not None
    try:
        said = await read_until(host.stderr, b"host_id_waiting")
        assert b"still registered by another process" in said
        await read_until(host.stdout, b"host a runs fetcher")
        async with open_journal(url) as journal:

            async def completed() -> bool:
                ended = await events_of(journal, sid, TurnEnded)
                return [e.outcome for e in ended] == ["completed"]

            await wait_for(completed)
        os.kill(host.pid, signal.SIGTERM)
        await host.wait()
        assert host.returncode == 0
    finally:
        if host.returncode is None:
            host.kill()
            await host.wait()


def test_a_registration_with_less_than_a_second_left_is_not_said_to_run_0s() -> None:
    assert "runs 0.1s more" in str(HostIdInUseError("a", 0.04))
    assert "runs 0.5s more" in str(HostIdInUseError("a", 0.41))
    assert "runs 12.0s more" in str(HostIdInUseError("a", 12.0))
