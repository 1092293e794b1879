"""The code in README.md and docs/*.md, read as the tests check it.

A fenced ``python`` block runs as a whole program unless the line just before
its fence is ``<!-- not-run: REASON -->``: a fragment that cannot run alone
(it needs a server, or names what the page around it defines) says why in the
doc itself.  ``loopruntime ...`` lines in shell blocks, and the options named
in inline code next to a ``loopruntime`` command, are checked against the
command line's parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NOT_RUN = re.compile(r"^<!-- not-run: (?P<reason>.*?) -->$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
SHELL = {"sh", "shell", "bash", "console"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The line of the opening fence (1-based)."""
    lang: str
    code: str
    not_run: str | None
    """The reason given for not running it; None for a block that runs."""

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name
        return f"{page}:{self.line}"


@dataclass(frozen=True)
class Marker:
    page: Path
    line: int
    reason: str


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent = len(fence["indent"])
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        marker = NOT_RUN.match(lines[i - 1].strip()) if i else None
        found.append(Block(page, i + 1, fence["lang"], code, marker["reason"] if marker else None))
        i = end + 1
    return found


def markers(page: Path) -> list[Marker]:
    """Every not-run marker of ``page``, wherever it stands."""
    return [
        Marker(page, n, m["reason"])
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if (m := NOT_RUN.match(line.strip())) is not None
    ]


def python_blocks(*pages: Path) -> list[Block]:
    return [b for page in pages for b in blocks(page) if b.lang == "python"]


def command_lines(page: Path) -> list[tuple[int, list[str]]]:
    """``(line, argv after 'loopruntime')`` of each command in ``page``'s shell
    blocks; environment assignments before it and a trailing ``&`` or comment
    are not part of the command."""
    import shlex

    found: list[tuple[int, list[str]]] = []
    for block in blocks(page):
        if block.lang not in SHELL:
            continue
        for offset, line in enumerate(block.code.splitlines(), 1):
            words = shlex.split(line.removeprefix("$ "), comments=True)
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                words.pop(0)
            if words and words[-1] == "&":
                words.pop()
            if words and words[0] == "loopruntime":
                found.append((block.line + offset, words[1:]))
    return found


def prose_paragraphs(page: Path) -> list[tuple[int, str]]:
    """``(first line, text)`` of each paragraph outside fenced blocks."""
    paragraphs: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    fenced = False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if FENCE.match(line) or (fenced and line.strip() == "```"):
            fenced = not fenced
            line = ""
        if fenced or not line.strip():
            if current:
                paragraphs.append((start, " ".join(current)))
            current = []
            continue
        if not current:
            start = n
        current.append(line.strip())
    if current:
        paragraphs.append((start, " ".join(current)))
    return paragraphs


def inline_code(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)
