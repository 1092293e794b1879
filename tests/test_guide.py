"""docs/guide.md teaches with whole programs: each Python block runs as printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "guide.md").read_text(), flags=re.S)


def test_the_guide_has_examples() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_guide_example_runs(index: int, tmp_path: Path) -> None:
    script = tmp_path / f"guide_{index}.py"
    script.write_text(BLOCKS[index])
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The library logs nothing unless the application configures logging.
    assert "turn_finished" not in done.stdout + done.stderr
