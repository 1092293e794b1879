"""An open form gate across a SIGKILL: the restored tool asks it again, its answers are
still checked, and it acts once."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import open_journal
from journal.events import GateOpened, ToolCompleted
from loopruntime import InvalidAnswerError, LoopStatus
from loopruntime.models import Reply
from session import Session
from session.replay import check
from tests.support.crash_scenarios import definition, effects
from tests.support.loops import events_of
from tests.support.processes import kill_when_ready

pytestmark = pytest.mark.slow


async def test_an_open_form_survives_sigkill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await kill_when_ready("form", url, "ses_form", str(side))
    async with open_journal(url) as journal:
        d = definition("form", side, [Reply(text="shipped")])
        async with Session.restore(journal, "ses_form", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
            assert state.status is LoopStatus.AWAITING_GATE
            (gate,) = state.open_gates
            assert gate.form is not None and set(gate.form["properties"]) == {"city", "zip"}
            with pytest.raises(InvalidAnswerError, match=r"at `\$.zip`"):
                await s.answer(gate.gate_id, {"city": "Oslo", "zip": "0150"})
            await s.answer(gate.gate_id, {"city": "Oslo", "zip": 150}, principal="ann")
            await s.wait_idle()
            await s.verify()
        assert len(await events_of(journal, "ses_form", GateOpened)) == 1
        (completed,) = await events_of(journal, "ses_form", ToolCompleted)
        assert completed.content[0].text == "a lamp shipped to Oslo 150"  # type: ignore[union-attr]
        report = await check(journal, "ses_form")
        assert report.ok, report.summary()
    phases = [e["phase"] for e in effects(side)]
    assert phases == ["entered", "entered", "acted"]  # re-entered after the kill; acted once
