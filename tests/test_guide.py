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


def problems(page: Path) -> list[str]:
    """What keeps ``page``'s Python blocks from being either run or marked."""
    found = blocks(page)
    marked = {b.line - 1 for b in found if b.not_run is not None}
    said: list[str] = []
    for marker in markers(page):
        # A marker belongs to the fence right after it, which must be Python.
        if marker.line not in marked:
            said.append(f"{page.name}:{marker.line}: no python block follows the marker")
        elif len(marker.reason.split()) < 3:
            said.append(f"{page.name}:{marker.line}: say why the block does not run")
    for block in found:
        if block.lang in {"py", "python3", "pycon"}:
            said.append(f"{block.where}: write ```python, the fence the tests run")
        elif block.not_run is not None and block.lang != "python":
            said.append(f"{block.where}: only Python blocks are run")
        elif block.lang == "python" and block.not_run is None and "assert " not in block.code:
            said.append(
                f"{block.where}: a block asserts what its prose claims, not only that it ends"
            )
    return said


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_runs_or_says_why_not(page: Path) -> None:
    assert problems(page) == []


def test_a_block_neither_run_nor_marked_is_named(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint('no claim checked')\n```\n\n"
        "<!-- not-run: why -->\n```python\nx\n```\n\n"
        "<!-- not-run: a fragment of the above -->\n```sh\nls\n```\n\n"
        "```py\nassert True\n```\n\n"
        "<!-- not-run: a fragment of the above -->\n```python\nx\n```\n"
    )
    assert problems(page) == [
        "page.md:5: say why the block does not run",
        "page.md:1: a block asserts what its prose claims, not only that it ends",
        "page.md:11: only Python blocks are run",
        "page.md:15: write ```python, the fence the tests run",
    ]


def run_block(block: Block, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``block`` as a script of its own, in an empty directory."""
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
