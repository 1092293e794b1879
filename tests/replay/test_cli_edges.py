"""`loopruntime replay` at its edges: a seq past the head, and a fork's
inherited conversation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from journal import open_journal
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel
from session import Session
from session.cli.main import main
from session.replay.inherited import MARK

ROOT = Path(__file__).resolve().parents[2]


def _definition(*replies: str) -> LoopDefinition:
    return LoopDefinition(name="talk", model=ScriptedModel([Reply(text=r) for r in replies]))


def _journal_with_a_fork(tmp_path: Path) -> tuple[str, str, str, int]:
    """A session of two exchanges and a fork of it after the first (and a fork
    of that fork); returns the journal path, the two forks' ids and the seq."""
    url = f"sqlite:///{tmp_path / 'j.db'}"

    async def run() -> tuple[str, str, int]:
        async with open_journal(url) as journal:
            async with Session.create(journal, _definition("first answer", "second answer")) as s:
                await s.submit("first question")
                await s.wait_idle()
                at = await journal.head(s.id)
                await s.submit("second question")
                await s.wait_idle()
            fork_model = _definition("answer in the fork")
            async with Session.fork(journal, s.id, fork_model, at=at, new_session_id="f1") as f:
                await f.submit("question in the fork")
                await f.wait_idle()
                deeper = await journal.head(f.id)
            async with Session.fork(journal, "f1", _definition(), at=deeper, new_session_id="f2"):
                pass
            return s.id, "f1", at

    source, fork, at = trio.run(run)
    return str(tmp_path / "j.db"), source, fork, at


def replay(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["replay", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_at_past_the_head_is_refused_naming_the_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, source, _, _ = _journal_with_a_fork(tmp_path)
    code, _, err = replay(capsys, "--journal", db, source)
    assert code == 0
    head = trio.run(_head, db, source)
    code, out, err = replay(capsys, "--journal", db, source, "--at", "99999")
    assert code == 2 and out == ""
    assert err.strip() == (
        f"loopruntime replay: --at 99999 is past the head of session {source} "
        f"(seq {head}); give a seq from 0 to {head}"
    )
    code, out, _ = replay(capsys, "--journal", db, source, "--at", str(head))
    assert code == 0 and f"state as of seq {head}" in out


async def _head(db: str, session: str) -> int:
    async with open_journal(f"sqlite:///{db}") as journal:
        return await journal.head(session)


def test_a_fork_shows_the_conversation_it_inherited_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, source, fork, at = _journal_with_a_fork(tmp_path)
    code, out, _ = replay(capsys, "--journal", db, fork)
    assert code == 0
    lines = out.splitlines()
    inherited = [line for line in lines if line.startswith(MARK)]
    own = [line for line in lines if not line.startswith(MARK)]
    assert (
        inherited[0]
        == f"{MARK}inherited from session {source}, seq 1 to {at} (--no-inherited hides it)"
    )
    assert any("user: first question" in line for line in inherited)
    assert any("assistant: first answer" in line for line in inherited)
    # Only what the source held at the fork's seq, and nothing of the fork's own.
    assert not any("second" in line for line in lines)
    assert not any("in the fork" in line for line in inherited)
    assert any(f"forked from session {source} at seq {at}" in line for line in own)
    assert any("assistant: answer in the fork" in line for line in own)
    # The inherited part comes first.
    assert lines.index(inherited[-1]) < lines.index(own[0])

    code, out, _ = replay(capsys, "--journal", db, fork, "--no-inherited")
    assert code == 0
    assert MARK not in out and "first question" not in out
    assert "assistant: answer in the fork" in out


def test_a_fork_of_a_fork_shows_both_sources_outermost_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, source, fork, _ = _journal_with_a_fork(tmp_path)
    code, out, _ = replay(capsys, "--journal", db, "f2")
    assert code == 0
    headings = [line for line in out.splitlines() if "inherited from session" in line]
    assert [h.split()[4].rstrip(",") for h in headings] == [source, fork]
    assert out.index("first question") < out.index("question in the fork")


def test_follow_on_a_fork_begins_with_what_it_inherited(tmp_path: Path) -> None:
    db, source, fork, at = _journal_with_a_fork(tmp_path)
    follower = subprocess.Popen(
        [sys.executable, "-m", "session.cli.main", "replay", "--journal", db, fork, "--follow"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None
    try:
        lines: list[str] = []
        while not lines or "answer in the fork" not in lines[-1]:
            line = follower.stdout.readline()
            assert line, f"the follower ended after {lines!r}"
            lines.append(line.rstrip("\n"))
    finally:
        follower.terminate()
        follower.wait()
    assert (
        lines[0]
        == f"{MARK}inherited from session {source}, seq 1 to {at} (--no-inherited hides it)"
    )
    assert any(line.startswith(MARK) and "user: first question" in line for line in lines)
    own = [line for line in lines if not line.startswith(MARK)]
    assert f"forked from session {source} at seq {at}" in own[0]


def test_the_trace_takes_no_other_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, source, _, _ = _journal_with_a_fork(tmp_path)
    for extra in (["--format", "otel-json", "--at", "2"], ["--otlp", "http://x", "--check"]):
        code, out, err = replay(capsys, "--journal", path, source, *extra)
        assert (code, out) == (2, "")
        assert "the trace (--otlp, --format otel-json) takes no other option" in err
    # Alone, --format otel-json prints the trace (the traces part's command).
    code, out, _ = replay(capsys, "--journal", path, source, "--format", "otel-json")
    assert code == 0 and '"resourceSpans"' in out
