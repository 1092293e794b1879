"""What the ``loopruntime`` command shows a person at a terminal: progress of
long work, notes, and tables.

Rules: everything drawn here goes to stderr, and only when stderr is a
terminal (not ``TERM=dumb``) and ``rich`` is installed (the extra ``cli``);
otherwise nothing is drawn, and what the command prints is byte for byte what
it prints without this module (a pipe, a file, a test's capture).  stdout is
never touched while progress is drawn, so the command's output stays plain
however it is redirected.  A table is drawn on stdout only when stdout is a
terminal too, and only when it fits its width; else the caller prints its
plain lines.  ``rich`` is imported only when drawing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["Bar", "drawing", "note", "progress", "table", "tracked"]

T = TypeVar("T")


class Bar:
    """Progress of one piece of work: what is being done, how much of how much.
    This base draws nothing (no terminal); ``progress`` yields a drawing one."""

    def advance(self, n: int = 1) -> None:
        """``n`` more units are done."""

    def phase(self, what: str, total: int | None = None) -> None:
        """The work goes on with ``what``, from zero of ``total``."""


class _Drawn(Bar):
    def __init__(self, bar: Any, task: Any) -> None:
        self._bar, self._task = bar, task

    def advance(self, n: int = 1) -> None:
        self._bar.advance(self._task, n)

    def phase(self, what: str, total: int | None = None) -> None:
        self._bar.reset(self._task, description=what, total=total)


def drawing() -> bool:
    """Whether progress is drawn: stderr is a terminal and rich is installed."""
    stream = sys.stderr
    try:
        tty = stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
    if not tty or os.environ.get("TERM") == "dumb":
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _console(*, stderr: bool = True) -> Any:
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


@contextmanager
def progress(what: str, total: int | None = None) -> Iterator[Bar]:
    """A progress bar of ``what`` on stderr (a spinner and a count when
    ``total`` is unknown), gone when the work is; yields the ``Bar`` to
    advance as work gets done.  Without a terminal it yields one that draws
    nothing."""
    if not drawing():
        yield Bar()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    # Not redirect_stdout: what the command prints to a pipe must stay there,
    # not be drawn on the terminal; log lines on stderr are shown above the bar.
    with Progress(
        *columns,
        console=_console(),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=True,
    ) as bar:
        yield _Drawn(bar, bar.add_task(what, total=total))


def tracked(items: Sequence[T], what: str) -> Iterator[T]:
    """``items`` one by one, with a bar of ``what`` on a terminal."""
    with progress(what, len(items)) as bar:
        for item in items:
            yield item
            bar.advance()


def note(line: str) -> None:
    """A line for the person watching, on stderr: dimmed on a terminal with
    rich, else written as it is."""
    if drawing():
        from rich.text import Text

        _console().print(Text(line, style="dim"))
        return
    print(line, file=sys.stderr, flush=True)


TABLE_ROWS = 10_000
"""Beyond this many rows a listing stays plain: a table is measured whole
before the first line is drawn."""


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> bool:
    """Draw ``rows`` under ``header`` as a table on stdout when stdout and
    stderr are a terminal, rich is installed and the table fits the
    terminal's width; True when drawn (else the caller prints its plain
    lines, and nothing was written)."""
    if not drawing() or len(rows) > TABLE_ROWS:
        return False
    try:
        if not sys.stdout.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    from rich import box
    from rich.table import Table

    console = _console(stderr=False)
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]
    # Two spaces of padding a column, and the table's edges.
    if sum(widths) + 2 * len(widths) + 2 > console.width:
        return False
    grid = Table(*header, box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for row in rows:
        grid.add_row(*row)
    console.print(grid)
    return True
