"""A pause survives SIGKILL: the killed process paused its loop mid-turn; the
restored session is still paused, its held turn waits, and a resume finishes it."""

from __future__ import annotations

from pathlib import Path

from journal import open_journal
from journal.events import LoopPaused, ModelCallStarted, ToolCompleted, TurnEnded
from session import Session
from session.replay import check
from tests.support.crash_pause import definition
from tests.support.loops import events_of
from tests.support.processes import kill_when_ready


async def test_a_loop_paused_mid_turn_is_still_paused_after_sigkill_and_restore(
    tmp_path: Path,
) -> None:
    # Real time (no autojump): the child process runs in time of its own;
    # every wait below is for a state of the journal.
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    await kill_when_ready("paused", url, "s")
    async with open_journal(url) as journal:
        assert len(await events_of(journal, "s", ToolCompleted)) == 1
        assert len(await events_of(journal, "s", ModelCallStarted)) == 1
        d = definition()
        async with Session.restore(journal, "s", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
            assert state.paused and state.turn_open
            # Nothing ran while paused: the restore started no model call.
            assert len(await events_of(journal, "s", ModelCallStarted)) == 1
            assert await s.resume() is True
            await s.wait_idle()
            assert not (await s.snapshot()).turn_open
            await s.verify()
        [paused] = await events_of(journal, "s", LoopPaused)
        assert paused.principal == "ops"
        assert [e.outcome for e in await events_of(journal, "s", TurnEnded)] == ["completed"]
        assert len(await events_of(journal, "s", ModelCallStarted)) == 2
        report = await check(journal, "s")
        assert report.ok, report
