"""A crash (SIGKILL of a child process) while the compactor runs leaves the
original history intact and the loop usable."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import Journal, Record, open_journal
from journal.events import CompactionCommitted, CompactionRejected, CompactionStarted
from loopruntime import LoopStatus
from loopruntime.models import Reply, ScriptedModel
from session import Session
from session.embedded.restore import read_states
from session.replay import check
from tests.compaction.support import TestCompactor, summary, texts
from tests.support.crash_scenarios import compaction_definition as definition
from tests.support.processes import kill_when_ready

pytestmark = pytest.mark.slow


async def crash_while_compacting(url: str, session_id: str) -> None:
    """Run the child until its compactor works, then SIGKILL it."""
    await kill_when_ready("compaction", url, session_id)


async def read_all(journal: Journal, session_id: str) -> list[Record]:
    return [r async for r in journal.read(session_id)]


async def test_crash_while_compacting_keeps_the_history_and_the_loop_usable(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    await crash_while_compacting(url, "ses_cmp")
    async with open_journal(url) as journal:
        before = await read_all(journal, "ses_cmp")
        assert isinstance(before[-1].event, CompactionStarted)
        folded = (await read_states(journal, "ses_cmp"))["main"]
        model = ScriptedModel([Reply(text="a3")])
        compactor = TestCompactor(summary(goal="after the crash"))
        d = definition(model, compactor)
        async with Session.restore(journal, "ses_cmp", d) as s:
            restored = await s.snapshot()
            await s.verify()
            # The original history is the context, untouched.
            assert [texts(m) for m in restored.messages] == [["u1"], ["a1"], ["u2"], ["a2"]]
            assert restored.messages == folded.messages
            assert restored.compactions == 0
            assert restored.status is LoopStatus.IDLE
            # The loop takes input and runs a turn ...
            await s.submit("u3")
            await s.wait_idle()
            # ... and a new compaction commits.
            attempt = await s.compact()
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        after = await read_all(journal, "ses_cmp")
        report = await check(journal, "ses_cmp")
    # Nothing committed before the crash was lost or rewritten.
    assert len(after) > len(before)
    for old, new in zip(before, after, strict=False):
        assert (old.seq, old.id, old.digest) == (new.seq, new.id, new.digest)
    assert report.ok, report.summary()
    # Restore settled the abandoned attempt; the new one committed.
    [abandoned] = [r.event for r in after if isinstance(r.event, CompactionRejected)]
    assert abandoned.attempt_id == before[-1].event.attempt_id
    assert abandoned.reason == "failed" and "process stopped" in abandoned.detail
    [committed] = [r.event for r in after if isinstance(r.event, CompactionCommitted)]
    assert committed.attempt_id == attempt
    assert state.compactions == 1 and state.compacting is None
    assert [texts(m) for m in state.messages[1:]] == [["u3"], ["a3"]]
    assert [m.role for m in compactor.calls[0].messages] == ["user", "assistant"] * 2


async def test_restored_loop_does_not_think_it_is_compacting(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    await crash_while_compacting(url, "ses_cmp2")
    async with open_journal(url) as journal:
        d = definition(ScriptedModel(), TestCompactor(summary()))
        async with Session.restore(journal, "ses_cmp2", d) as s:
            state = await s.snapshot()
            await s.verify()
    assert state.compacting is None
