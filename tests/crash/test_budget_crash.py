"""A token budget survives a SIGKILL: restored, a loop has spent what its
records say (the fold of the journal), never a counter that died with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import open_journal
from journal.events import ModelMessageCommitted, TurnEnded, TurnRejected
from loopruntime import BudgetExhaustedError
from session import Session
from tests.support.crash_budgets import definition
from tests.support.loops import events_of
from tests.support.processes import kill_when_ready


async def test_a_turn_and_session_budget_survive_sigkill_and_restore(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await kill_when_ready("budget", url, "ses_budget", str(side))
    async with open_journal(url) as journal:
        before = await events_of(journal, "ses_budget", ModelMessageCommitted)
        assert len(before) == 1  # killed with 600 tokens of the turn's 1000 spent
        d = definition(side)
        async with Session.restore(journal, "ses_budget", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
            spent = s.tokens_used()
            with pytest.raises(BudgetExhaustedError, match="1200 tokens of its budget of 1100"):
                await s.submit("read a third page")
            await s.verify()
        ended = await events_of(journal, "ses_budget", TurnEnded)
        rejected = await events_of(journal, "ses_budget", TurnRejected)
    # One more model call after the restore: 600 + 600 reaches the turn's
    # 1000, so the third reply is never asked for.
    assert len(d.model.requests) == 1  # type: ignore[attr-defined]
    assert [(e.outcome, e.code) for e in ended] == [("limit", "budget_exhausted")]
    assert spent == 1200 and state.turn_tokens == 1200
    assert [r.reason for r in rejected] == ["budget_exhausted"]
