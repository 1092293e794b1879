"""The README's example runs as printed, and its quickstart is the two commands."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docs import ROOT, python_blocks
from tests.test_guide import run_block


def test_readme_example_runs(tmp_path: Path) -> None:
    [example] = python_blocks(ROOT / "README.md")
    assert example.not_run is None
    done = run_block(example, tmp_path)
    assert "2 + 3 = 5" in done.stdout
    # A library configures no logging of its own: the example prints what it prints.
    assert len(done.stdout.splitlines()) == 1, done.stdout
    assert done.stderr == ""
    assert (tmp_path / "agent.db").exists()


def test_readme_quickstart_has_exactly_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```sh\n(.*?)\n```", quickstart, flags=re.S) == ["./dev demo", "./dev test"]
