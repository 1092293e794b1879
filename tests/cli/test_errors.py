"""The CLI given bad input: one clear line, a useful exit code, nothing lost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.sqlite import SQLiteJournal
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel
from session import Session
from session.cli.main import main
from session.replay import check
from tests.loop.test_session_errors import definition, open_gate
from tests.support.damage import damage_record

ROOT = Path(__file__).resolve().parents[2]


async def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "session.cli.main", *args],
        cwd=ROOT,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def one_turn_each(url: str, *session_ids: str) -> None:
    """Sessions that each ran one plain turn, created in this order."""
    d = LoopDefinition(name="plain", model=ScriptedModel(lambda _r: Reply(text="hi")))
    async with open_journal(url) as journal:
        for session_id in session_ids:
            async with Session.create(journal, d, session_id=session_id) as s:
                await s.submit("hello")
                await s.wait_idle()


async def test_resolve_with_a_wrong_execution_id_leaves_the_running_host_alone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "j.db"
    ran: list[str] = []
    async with open_journal(f"sqlite:///{db}") as journal:
        async with Session.create(journal, definition(ran), session_id="ses_live") as s:
            gate_id = await open_gate(s)
            done = await cli(
                "resolve", "ses_live", "exe_typo", "--result", "x", "--journal", str(db)
            )
            assert done.returncode == 2
            assert b"exe_typo has no unknown outcome" in done.stderr
            assert b"Traceback" not in done.stderr
            # Not fenced: the host goes on as if nothing happened.
            await s.decide(gate_id, True)
            await s.wait_idle()
            state = await s.snapshot()
        assert (await check(journal, "ses_live")).ok
    assert len(ran) == 1 and state.last_outcome == "completed"


def test_sessions_lists_every_session_when_one_is_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"

    async def make() -> None:
        # The damaged one is the oldest, listed first.
        await one_turn_each(url, "ses_damaged", "ses_fine")
        journal = await SQLiteJournal.open(url)
        try:
            damage_record(journal, "ses_damaged", 3, b"\x93garbage")
        finally:
            await journal.aclose()

    trio.run(make)
    code = main(["sessions", "--journal", str(tmp_path / "j.db")])
    out, err = capsys.readouterr()
    assert code == 1
    assert "ses_fine" in out and "idle" in out
    assert "ses_damaged" in out and "damaged at seq 3" in out
    assert "seq 3 is corrupt" in err and "Traceback" not in err


def test_replay_at_a_negative_seq_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trio.run(one_turn_each, f"sqlite:///{tmp_path / 'j.db'}", "ses_at")
    code = main(["replay", "ses_at", "--at", "-1", "--journal", str(tmp_path / "j.db")])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "--at takes a seq (0 or more), not -1" in err
