"""Every Python block in docs/*.md runs as printed and asserts what its prose
claims, or says in the doc why it does not run (``<!-- not-run: REASON -->``
on the line before its fence).  README.md's blocks: tests/test_readme.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docs import PAGES, ROOT, Block, blocks, markers, python_blocks

DOCS = sorted((ROOT / "docs").glob("*.md"))
RUN = [b for b in python_blocks(*DOCS) if b.not_run is None]


def test_the_guide_has_examples() -> None:
    assert len([b for b in RUN if b.page.name == "guide.md"]) >= 5


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_runs_or_says_why_not(page: Path) -> None:
    found = blocks(page)
    marked = {b.line - 1 for b in found if b.not_run is not None}
    for marker in markers(page):
        # A marker belongs to the fence right after it, which must be Python.
        assert marker.line in marked, f"{page.name}:{marker.line}: no python block follows"
        assert len(marker.reason.split()) >= 3, f"{page.name}:{marker.line}: give the reason"
    for block in found:
        assert block.lang not in {"py", "python3", "pycon"}, (
            f"{block.where}: write ```python, the fence the tests run"
        )
        if block.not_run is not None:
            assert block.lang == "python", f"{block.where}: only Python blocks are run"


def run_block(block: Block, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``block`` as a script of its own, in an empty directory."""
    assert "assert " in block.code, (
        f"{block.where}: a block asserts what its prose claims, not only that it ends"
    )
    script = tmp_path / f"{block.page.stem}_{block.line}.py"
    script.write_text(block.code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{block.where}\n{done.stdout}{done.stderr}"
    # The library logs nothing unless the application configures logging.
    assert "turn_finished" not in done.stdout + done.stderr
    return done


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.where)
def test_doc_example_runs(block: Block, tmp_path: Path) -> None:
    run_block(block, tmp_path)
