"""`loopruntime host` and `console` refusing what can never work: one line on
stderr, exit 2, no traceback, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from session.cli.main import main


def failing_factory() -> object:
    raise RuntimeError("the settings file\nis missing")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err
    [line] = err.splitlines()
    assert line.startswith("loopruntime: ")
    return line


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("json:dumps", "calling dumps() failed: TypeError: "),
        (
            f"{__name__}:failing_factory",
            "calling failing_factory() failed: RuntimeError: the settings file is missing",
        ),
        ("os:sep", "expected a LoopDefinition"),
        ("json", "takes module:NAME"),
        ("json:nothing_here", "has no 'nothing_here'"),
    ],
)
def test_definitions_that_are_not_definitions(
    spec: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "host", "--definitions", spec, "--journal", str(tmp_path / "j.db"))
    assert code == 2 and out == ""
    assert said in one_line(err)


def test_a_definitions_module_that_fails_on_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_agents.py").write_text("raise KeyError('ANTHROPIC_API_KEY')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = run(
        capsys, "host", "--definitions", "broken_agents:DEFINITIONS", "--journal", "x.db"
    )
    assert code == 2
    assert "importing broken_agents failed: KeyError: 'ANTHROPIC_API_KEY'" in one_line(err)


@pytest.mark.parametrize(
    ("command", "who"),
    [
        # Each also carries another mistake, checked after the journal: before
        # the journal was checked, these failed on that one instead of serving.
        (["host", "--definitions", "os:sep"], "a host"),
        (["console", "--bind", "nowhere"], "the console"),
    ],
)
def test_a_memory_journal_is_refused(
    command: list[str], who: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *command, "--journal", "memory:")
    assert code == 2 and out == ""
    line = one_line(err)
    assert line.startswith(f"loopruntime: {who} needs a journal other processes can reach")
    assert "SQLite path or a postgresql:// URL" in line


def test_a_negative_token_budget_in_the_definitions_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "spending_agents.py").write_text(
        "from loopruntime import Limits, LoopDefinition\n"
        "from loopruntime.models import Reply, ScriptedModel\n"
        "DEFINITIONS = [LoopDefinition(name='spender', limits=Limits(max_turn_tokens=-5),\n"
        "    model=ScriptedModel(lambda request: Reply(text='ok')))]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    journal = tmp_path / "j.db"
    code, out, err = run(
        capsys, "host", "--definitions", "spending_agents:DEFINITIONS", "--journal", str(journal)
    )
    assert code == 2 and out == ""
    assert "Limits.max_turn_tokens must be 1 or more, not -5" in one_line(err)
    assert not journal.exists()
