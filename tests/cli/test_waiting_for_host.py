"""``loopruntime sessions`` and a client by URL say when no live host serves a
session's definition."""

from __future__ import annotations

from pathlib import Path

import trio

from journal import open_journal
from session import Client, Status, open_client
from tests.cli.test_host_cli import cli
from tests.support.processes import ROOT


async def test_sessions_say_no_live_host_serves_the_definition(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    async with open_journal(url) as journal:
        # A live host serving other definitions, as `loopruntime host` registers one.
        await journal.register_host("h1", "token", ttl=3600, definitions=["echo"])
        client = Client(journal)
        await client.create("nosuch", session_id="lost", key="c1")
        await client.create("echo", session_id="served", key="c1")
        in_process = {s.session: s for s in await client.sessions()}
    async with open_client(url) as by_url:
        listed = {s.session: s for s in await by_url.sessions()}
    for statuses in (in_process, listed):
        assert statuses["lost"].status is Status.WAITING_FOR_HOST
        assert statuses["lost"].detail.startswith("no live host serves definition 'nosuch'")
        assert statuses["served"].status is Status.WAITING_FOR_HOST
        assert "waits for a host running definition 'echo'" in statuses["served"].detail
    shown = await trio.run_process(
        cli("sessions", "--journal", url), cwd=ROOT, capture_stdout=True, check=False
    )
    assert shown.returncode == 0
    [row] = [r for r in shown.stdout.decode().splitlines() if r.startswith("lost ")]
    assert "waiting for a host: no live host serves definition 'nosuch'" in row
