"""`loopruntime replay` on a real SQLite journal file: formats, bad input, --follow."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.events import GateOpened
from journal.sqlite import SQLiteJournal
from session import Session
from session.cli.main import main
from tests.support import crash_points as scenario
from tests.support.damage import damage_record

ROOT = Path(__file__).resolve().parents[2]


def make_journal(tmp_path: Path) -> Path:
    """The crash scenario, run to its end on a SQLite file (process exits cleanly)."""

    async def run() -> None:
        ledger = scenario.Ledger(tmp_path, "run")
        async with open_journal(scenario.journal_url(tmp_path)) as journal:
            d = scenario.definition(ledger)
            async with Session.create(journal, d, session_id=scenario.SESSION) as s:
                await scenario.drive(s, ledger)

    trio.run(run)
    return tmp_path / "journal.db"


async def _first_gate(db: Path) -> int:
    """The seq of the scenario's first gate.opened (time travel to an open gate)."""
    async with open_journal(f"sqlite:///{db}") as journal:
        async for r in journal.read(scenario.SESSION):
            if isinstance(r.event, GateOpened):
                return r.seq
    raise AssertionError("the scenario opened no gate")


def replay(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["replay", *args])
    out, err = capsys.readouterr()
    return code, out, err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = make_journal(tmp_path)
    before = digest(db)
    code, out, _ = replay(capsys, "--journal", str(db), scenario.SESSION)
    assert code == 0
    assert "user: What's the weather in Paris and Oslo?" in out
    assert "? gate" in out and "! allowed (once)" in out and "! answered: blue" in out
    assert "→ book_table" in out and "(succeeded" in out and "══ compaction" in out
    assert "\x1b[" not in out  # plain when piped
    code, out, _ = replay(capsys, "--journal", str(db), scenario.SESSION, "--format", "tree")
    assert code == 0 and "talk 5 (external" in out and "relations:" in out
    code, out, _ = replay(
        capsys, "--journal", f"sqlite:///{db}", scenario.SESSION, "--format", "json"
    )
    assert code == 0 and json.loads(out)["schema"] == "loopruntime.replay.tree"
    code, out, _ = replay(capsys, "--journal", str(db), scenario.SESSION, "--format", "unified")
    unified = json.loads(out)
    assert code == 0 and unified["schema"] == "loopruntime.replay.unified"
    assert {"epoch.boundary", "control.permission", "tool"} <= {n["kind"] for n in unified["nodes"]}
    at = str(trio.run(_first_gate, db))
    code, out, _ = replay(capsys, "--journal", str(db), scenario.SESSION, "--at", at)
    assert code == 0 and f"state as of seq {at}" in out and "open gate" in out
    code, out, _ = replay(capsys, "--journal", str(db), scenario.SESSION, "--check")
    assert code == 0 and out.startswith("ok: ")
    assert digest(db) == before  # replay never writes


def test_bad_paths_are_refused_without_creating_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "journal.db"
    code, _, err = replay(capsys, "--journal", str(missing), "s")
    assert code == 2 and "does not exist" in err and "Traceback" not in err
    assert not missing.parent.exists()

    empty = tmp_path / "empty.db"
    empty.touch()
    code, _, err = replay(capsys, "--journal", str(empty), "s", "--check")
    assert code == 2 and "not a loopruntime journal" in err
    assert empty.stat().st_size == 0

    text = tmp_path / "notes.txt"
    text.write_text("hello, I am not a database\n" * 100)
    code, _, err = replay(capsys, "--journal", str(text), "s")
    assert code == 2 and "not a loopruntime journal" in err

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    before = digest(other)
    code, _, err = replay(capsys, "--journal", str(other), "s")
    assert code == 2 and "not a loopruntime journal" in err
    assert digest(other) == before


def test_unknown_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = make_journal(tmp_path)
    for extra in ((), ("--check",), ("--format", "json"), ("--follow",)):
        code, _, err = replay(capsys, "--journal", str(db), "ses_nope", *extra)
        assert code == 2, extra
        assert "there is no session ses_nope" in err and "Traceback" not in err


def test_corrupt_record_in_the_middle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = make_journal(tmp_path)

    async def corrupt() -> None:
        journal = await SQLiteJournal.open(f"sqlite:///{db}")
        try:
            damage_record(journal, scenario.SESSION, 30, b"\x93garbage")
        finally:
            await journal.aclose()

    trio.run(corrupt)
    code, out, err = replay(capsys, "--journal", str(db), scenario.SESSION)
    assert code == 1
    assert "user: Book a table for two." in out  # what came before is shown
    assert "damaged" in err and "seq 30" in err and "Traceback" not in err
    code, out, err = replay(capsys, "--journal", str(db), scenario.SESSION, "--check")
    assert code == 1
    assert "FAILED at seq 30" in out and "journal readable" in out


def test_follow_prints_records_appended_by_another_process(tmp_path: Path) -> None:
    db = make_journal(tmp_path)
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "session.cli.main",
            "replay",
            "--journal",
            str(db),
            scenario.SESSION,
            "--follow",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert follower.stdout is not None
    try:

        def wait_for(text: str) -> None:
            while True:
                line = follower.stdout.readline().decode()  # type: ignore[union-attr]
                assert line, f"the follower ended before printing {text!r}"
                if text in line:
                    return

        wait_for("turn 5 completed")

        async def more() -> None:
            ledger = scenario.Ledger(tmp_path, "more")
            async with open_journal(scenario.journal_url(tmp_path)) as journal:
                async with Session.restore(
                    journal, scenario.SESSION, scenario.definition(ledger)
                ) as s:
                    await s.submit("Anything else?")
                    await s.wait_idle()

        trio.run(more)
        wait_for("user: Anything else?")
        wait_for("turn 6 completed")
    finally:
        follower.terminate()
        follower.wait()
