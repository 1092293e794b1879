"""Hooks and classifiers across a real crash: a child process running a call
that a classifier allowed and a hook rewrote is SIGKILLed mid-call, and a
fresh process restores the session from the SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import open_journal
from journal.content import Text, ToolUse
from journal.events import GateReviewed, HookDecided, ToolCompleted, ToolStarted
from loopruntime.models import Reply
from session import Session
from session.replay import replay_command
from tests.support.crash_scenarios import effects, hooks_definition
from tests.support.loops import events_of
from tests.support.processes import kill_when_ready

pytestmark = pytest.mark.slow

MIRROR = "https://mirror.example.org"


async def test_a_call_reviewed_and_rewritten_before_a_crash_runs_again_as_rewritten(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    side = tmp_path / "effects.jsonl"
    await kill_when_ready("hooks", url, "ses_hooks", str(side))
    before = effects(side)
    assert [e.get("hook") or e.get("tool") for e in before] == [
        "classifier",
        "before_tool",
        "fetch",
    ]

    async with open_journal(url) as journal:
        d = hooks_definition(side, [Reply(text="read it")])
        async with Session.restore(journal, "ses_hooks", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
        [review] = await events_of(journal, "ses_hooks", GateReviewed)
        decided = await events_of(journal, "ses_hooks", HookDecided)
        [started] = await events_of(journal, "ses_hooks", ToolStarted)
        [completed] = await events_of(journal, "ses_hooks", ToolCompleted)

    said: list[str] = []
    code = await replay_command(url, "ses_hooks", check_only=True, out=said.append, err=said.append)
    assert code == 0, said

    after = effects(side)[len(before) :]
    # Restore re-runs the replay-safe call with the rewritten input; the
    # review and the rewrite were durable, so neither runs again.  The
    # after_tool hook runs on the run that finished.
    assert [e.get("hook") or e.get("tool") for e in after] == ["fetch", "after_tool"]
    assert after[0]["url"] == MIRROR and after[0]["execution"] == started.execution_id
    assert review.verdict == "allow"
    assert [(d.hook, d.action) for d in decided] == [("mirror", "rewrite"), ("stamp", "replace")]
    assert started.input == {"url": MIRROR}
    assert completed.content == (Text(text=f"[checked] contents of {MIRROR}"),)
    [use] = [b for m in state.messages for b in m.blocks if isinstance(b, ToolUse)]
    assert use.input == {"url": MIRROR}
    assert state.last_outcome == "completed"
