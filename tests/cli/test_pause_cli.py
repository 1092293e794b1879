"""``loopruntime pause`` / ``resume``: the commands through the session's inbox,
applied by the host that owns the session."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.events import LoopPaused, LoopResumed
from journal.inbox import Pause, Resume
from session import Host
from session.cli.main import main
from tests.host.support import counting_definition, wait_for
from tests.support.loops import events_of


async def _create(url: str) -> None:
    from session import Client

    async with open_journal(url) as journal:
        await Client(journal).create("counter", session_id="s1", key="c1")


async def _apply(url: str, key: str) -> list[object]:
    """Run a host until the entry under ``key`` is consumed; the pause records."""
    async with open_journal(url) as journal:
        async with Host.open(journal, {"counter": counting_definition()}, host_id="h", poll=0.05):

            async def consumed() -> bool:
                entry = await journal.entry("s1", key)
                return entry is not None and entry.consumed

            await wait_for(consumed, poll=0.01)
        return [
            *await events_of(journal, "s1", LoopPaused),
            *await events_of(journal, "s1", LoopResumed),
        ]


def test_pause_and_resume_go_through_the_inbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    trio.run(_create, url)
    argv = ["pause", "s1", "--key", "p1", "--principal", "ops", "--journal", url]
    assert main(argv) == 0
    assert "inbox entry 2 of session s1 (key p1)" in capsys.readouterr().out
    [paused] = trio.run(_apply, url, "p1")
    assert paused == LoopPaused(principal="ops")
    assert main(["resume", "s1", "--key", "r1", "--journal", url]) == 0
    assert trio.run(_apply, url, "r1") == [paused, LoopResumed()]

    async def stored() -> list[object]:
        async with open_journal(url) as journal:
            entries = [await journal.entry("s1", key) for key in ("p1", "r1")]
            return [e.command for e in entries if e is not None]

    commands = trio.run(stored)
    assert commands == [Pause(principal="ops"), Resume()]


def test_a_pause_without_a_key_gets_a_fresh_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    trio.run(_create, url)
    assert main(["pause", "s1", "--loop", "main", "--journal", url]) == 0
    out = capsys.readouterr().out
    assert "inbox entry 2 of session s1 (key pause-" in out


def test_wait_prints_what_the_pause_came_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    trio.run(_create, url)

    async def with_a_host() -> list[int]:
        async with open_journal(url) as journal:
            async with Host.open(
                journal, {"counter": counting_definition()}, host_id="h", poll=0.05
            ):
                # The command runs its own trio loop: in a thread of its own.
                return [
                    await trio.to_thread.run_sync(main, [*argv, "--wait", "--journal", url])
                    for argv in (["pause", "s1"], ["pause", "s1"], ["resume", "s1"])
                ]

    assert trio.run(with_a_host) == [0, 0, 0]
    out = [line for line in capsys.readouterr().out.splitlines() if "inbox entry" not in line]
    assert out == ["paused", "applied: it was already paused", "resumed"]
