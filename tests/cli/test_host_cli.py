"""``loopruntime host`` in a process of its own, fed by ``loopruntime submit``;
``sessions`` shows the owner; SIGTERM stops the host cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from journal import open_journal
from journal.events import TurnEnded
from tests.host.support import wait_for
from tests.support.loops import events_of
from tests.support.processes import ROOT


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "session.cli.main", *args]


async def test_a_host_process_fed_by_submit_and_stopped_by_sigterm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    host = await trio.lowlevel.open_process(
        cli(
            "host", "--journal", url, "--definitions",
            "tests.support.crash_hosts:cli_definitions",
            "--host-id", "h1", "--lease-ttl", "30", "--poll", "0.05",
        ),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        sent = await trio.run_process(
            cli("submit", "s1", "fetch it", "--key", "k1", "--create", "fetcher", "--wait",
                "--journal", url),
            cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr.decode()
        out = sent.stdout.decode()
        assert "inbox entry 2 of session s1" in out and "applied: in_" in out
        again = await trio.run_process(
            cli("submit", "s1", "fetch it", "--key", "k1", "--journal", url),
            cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert "inbox entry 2 of session s1" in again.stdout.decode()
        other = await trio.run_process(
            cli("submit", "s1", "something else", "--key", "k1", "--journal", url),
            cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert other.returncode == 2 and "already used" in other.stderr.decode()
        async with open_journal(url) as journal:
            await wait_for(lambda: ended(journal))
        listed = await trio.run_process(
            cli("sessions", "--journal", url), cwd=ROOT, capture_stdout=True, check=False
        )
        [row] = [r for r in listed.stdout.decode().splitlines() if r.startswith("s1 ")]
        assert "  idle  [owner h1, lease until " in row
        # A second host under the live host's id: one line, exit 2, nothing taken.
        twin = await trio.run_process(
            cli("host", "--journal", url, "--definitions",
                "tests.support.crash_hosts:cli_definitions", "--host-id", "h1"),
            cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert twin.returncode == 2
        assert "host id 'h1' is in use by a live host" in twin.stderr.decode()
    finally:
        os.kill(host.pid, signal.SIGTERM)
        await host.wait()
    assert host.returncode == 0
    async with open_journal(url) as journal:
        info = {i.session: i for i in await journal.sessions()}["s1"]
        assert info.owner is None  # released on the clean stop, not left to expire
        assert len(await events_of(journal, "s1", TurnEnded)) == 1


async def ended(journal: object) -> bool:
    return bool(await events_of(journal, "s1", TurnEnded))  # type: ignore[arg-type]
