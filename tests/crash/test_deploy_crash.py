"""Deploys across real processes: a SIGKILL right after a reconfiguration or
a model choice, and a refused deploy that leaves the live host running.

A child process runs a scenario of ``tests/support/crash_scenarios.py``; the
SIGKILL tests restore in this process what the killed one left.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.events import LoopReconfigured, ModelCallStarted, TurnEnded
from session import DefinitionDriftError, Session
from session.replay import check
from tests.support.crash_scenarios import deploy_definition
from tests.support.loops import events_of, records, tags
from tests.support.processes import READY, ROOT, _command, kill_when_ready

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A journal two processes can share."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


async def test_sigkill_between_a_reconfiguration_and_the_next_turn(shared_url: str) -> None:
    async with open_journal(shared_url) as journal:
        async with Session.create(journal, deploy_definition("model-a")) as s:
            await s.submit("hello")
            await s.wait_idle()
    await kill_when_ready("reconfigure", shared_url, s.id)
    async with open_journal(shared_url) as journal:
        left = await records(journal, s.id)
        # The killed deploy recorded what it found, and nothing ran under it.
        assert isinstance(left[-1].event, LoopReconfigured)
        [change] = left[-1].event.changes
        assert (change.what, change.old, change.new) == ("model", "model-a", "model-b")
        d = deploy_definition("model-b")
        async with Session.restore(journal, s.id, d) as restored:
            # The same deploy again: its configuration is already recorded.
            assert len(await tags(journal, s.id)) == len(left)
            assert (await restored.snapshot()).model == "model-b"
            await restored.submit("again")
            await restored.wait_idle()
            await restored.verify()
        calls = await events_of(journal, s.id, ModelCallStarted)
        report = await check(journal, s.id)
    assert [c.model for c in calls] == ["model-a", "model-b"]
    assert len(d.model.requests) == 1  # type: ignore[attr-defined]
    assert report.ok, report.summary()


async def test_sigkill_between_a_model_choice_and_its_turn(shared_url: str) -> None:
    await kill_when_ready("inference", shared_url, "ses_inference")
    async with open_journal(shared_url) as journal:
        d = deploy_definition("model-a")
        async with Session.restore(journal, "ses_inference", d) as restored:
            state = await restored.snapshot()
            await restored.submit("again")
            await restored.wait_idle()
            await restored.verify()
        ended = await events_of(journal, "ses_inference", TurnEnded)
        calls = await events_of(journal, "ses_inference", ModelCallStarted)
        report = await check(journal, "ses_inference")
    # The turn the kill cut ran under model-a; the choice holds from the next.
    assert [e.outcome for e in ended] == ["crashed", "completed"]
    assert state.chosen_model == "model-alt" and state.model == "model-alt"
    assert [c.model for c in calls] == ["model-a", "model-alt"]
    alt = d.find_model("model-alt")
    assert alt is not None and len(alt.requests) == 1  # type: ignore[attr-defined]
    assert report.ok, report.summary()


async def _said(stream: trio.abc.ReceiveStream, times: int) -> bytes:
    said = b""
    with trio.fail_after(120):  # a hung child must not hang CI; not a timing assertion
        while said.count(READY) < times:
            chunk = await stream.receive_some()
            if not chunk:
                break
            said += chunk
    return said


async def test_a_refused_deploy_leaves_the_live_host_running(shared_url: str) -> None:
    proc = await trio.lowlevel.open_process(
        _command("live-host", (shared_url, "ses_live")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert READY in await _said(proc.stdout, 1)
        async with open_journal(shared_url) as journal:
            before = await tags(journal, "ses_live")
            with pytest.raises(DefinitionDriftError, match="model model-a → model-b"):
                async with Session.restore(
                    journal, "ses_live", deploy_definition("model-b"), drift="refuse"
                ):
                    raise AssertionError("a refused deploy must not open")
            assert await tags(journal, "ses_live") == before
        # The host was not fenced: it commits its next turn.
        await proc.stdin.send_all(b"go\n")
        assert (await _said(proc.stdout, 1)).count(READY) >= 1
        assert proc.poll() is None
        async with open_journal(shared_url) as journal:
            ended = await events_of(journal, "ses_live", TurnEnded)
            report = await check(journal, "ses_live")
        assert [e.outcome for e in ended] == ["completed", "completed"]
        assert report.ok, report.summary()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
