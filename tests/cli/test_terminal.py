"""Progress of long work: drawn on stderr when it is a terminal and rich is
installed, and nothing at all otherwise (piped output stays byte for byte plain)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import trio

from journal import open_journal
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel
from session import Session
from session.replay.terminal import Bar, note, progress

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ESC = "\x1b["


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPRUNTIME_")}
    env.update({"TERM": "xterm-256color", "COLUMNS": "120", **extra})
    env.pop("NO_COLOR", None)
    return env


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal of twelve sessions, one turn each."""
    db = tmp_path_factory.mktemp("terminal") / "j.db"
    definition = LoopDefinition(name="c", model=ScriptedModel(lambda _r: Reply(text="hi")))

    async def build() -> None:
        async with open_journal(f"sqlite:///{db}") as j:
            for i in range(12):
                async with Session.create(j, definition, session_id=f"s{i:02}") as s:
                    await s.submit("hello")
                    await s.wait_idle()

    trio.run(build)
    return db


def on_terminal(
    db: Path, *args: str, python: tuple[str, ...] = ("-m", "session.cli.main"), columns: int = 120
) -> str:
    """What a person at a terminal sees (stdout and stderr share the pty)."""
    out, status = pexpect.run(
        sys.executable,
        args=[*python, *args, "--journal", str(db)],
        cwd=str(ROOT),
        env=environment(COLUMNS=str(columns)),
        encoding="utf-8",
        withexitstatus=True,
        timeout=120,  # a hung child must not hang CI; not a timing assertion
    )
    assert status == 0, out
    return str(out)


def piped(db: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "session.cli.main", *args, "--journal", str(db)],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        check=True,
        timeout=120,
    )


def test_sessions_shows_progress_on_a_terminal(journal: Path) -> None:
    seen = on_terminal(journal, "sessions")
    assert "reading sessions" in seen
    assert "12/12" in seen
    assert "s11" in seen


def test_sessions_piped_is_plain(journal: Path) -> None:
    done = piped(journal, "sessions")
    assert done.stderr == b""
    lines = done.stdout.decode().splitlines()
    assert lines[0].split() == [
        "session",
        "loops",
        "records",
        "tokens",
        "last",
        "activity",
        "status",
    ]
    assert [line.split()[0] for line in lines[1:]] == [f"s{i:02}" for i in range(12)]
    assert ESC.encode() not in done.stdout


def test_replay_check_shows_progress_on_a_terminal(journal: Path) -> None:
    seen = on_terminal(journal, "replay", "s03", "--check")
    assert "reading session s03" in seen
    assert "checking records" in seen
    # The summary itself is what a pipe gets.
    (summary,) = piped(journal, "replay", "s03", "--check").stdout.decode().splitlines()
    assert summary in seen


def test_replay_check_piped_prints_the_summary_only(journal: Path) -> None:
    done = piped(journal, "replay", "s03", "--check")
    assert done.stderr == b""
    (summary,) = done.stdout.decode().splitlines()
    assert ESC not in summary and "s03" in summary


def test_replay_causes_is_a_table_on_a_terminal_wide_enough(journal: Path) -> None:
    seen = on_terminal(journal, "replay", "s05", "--causes", columns=160)
    assert "caused by" in seen and "───" in seen
    assert "⟵" not in seen
    # Too narrow for the table: the plain listing, as piped.
    narrow = on_terminal(journal, "replay", "s05", "--causes", columns=60)
    assert "caused by" not in narrow and "⟵" in narrow


def test_replay_causes_piped_is_the_plain_listing(journal: Path) -> None:
    done = piped(journal, "replay", "s05", "--causes")
    assert done.stderr == b""
    lines = done.stdout.decode().splitlines()
    assert lines[0].split()[:3] == ["1", "main", "loop.started"]
    assert any("  ⟵ " in line for line in lines)
    assert ESC.encode() not in done.stdout


def test_without_rich_nothing_is_drawn_on_a_terminal(journal: Path) -> None:
    # rich is an optional extra: without it the command prints what it always did.
    without = (
        "-c",
        "import sys; sys.modules['rich'] = None;"
        " from session.cli.main import main; sys.exit(main())",
    )
    seen = on_terminal(journal, "sessions", python=without)
    assert "reading sessions" not in seen
    assert ESC not in seen
    assert "s11" in seen


def test_off_a_terminal_the_helpers_draw_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with progress("work", 3) as bar:
        assert type(bar) is Bar
        bar.advance()
        bar.phase("more", 2)
    note("  .. a benchmark's step")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "  .. a benchmark's step\n"
