"""The README's example runs as printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_runs(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    [example] = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    script = tmp_path / "example.py"
    script.write_text(example)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "2 + 3 = 5" in done.stdout
    # A library configures no logging of its own: the example prints what it prints.
    assert len(done.stdout.splitlines()) == 1, done.stdout
    assert done.stderr == ""
    assert (tmp_path / "agent.db").exists()


def test_readme_quickstart_has_exactly_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```sh\n(.*?)\n```", quickstart, flags=re.S) == ["./dev demo", "./dev test"]
