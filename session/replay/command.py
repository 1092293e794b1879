"""``loopruntime replay``: open a journal to read it, show or check a session.

Never writes.  Exit 0 when the output is complete (or the check passed), 1
when the journal is damaged or fails the check, 2 when the journal or the
session cannot be read at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Literal

from journal import (
    Journal,
    JournalError,
    NotAJournalError,
    Record,
    SessionNotFoundError,
    check_existing_journal,
    open_journal,
)
from loopruntime.host import FoldError

from ..embedded.check.checker import check
from .causes import CAUSE_COLUMNS, cause_rows, render_causes
from .inherited import inherited_lines
from .states import render_states, states_at
from .terminal import progress, table
from .transcript import TranscriptRenderer, render_transcript
from .tree import WriterNode, render_tree, tree_json
from .tree_builder import build_tree
from .unified import unified_json
from .unified_builder import build_unified


class ReplayInputError(Exception):
    """The journal or session named for replay cannot be read (a clear message)."""


@asynccontextmanager
async def open_for_replay(url: str, *, write: bool = False) -> AsyncIterator[Journal]:
    """Open an existing journal, refusing a SQLite file that is missing or not a
    journal before anything could create it.  Read-only unless ``write`` (a
    command that settles something, like ``resolve``).  Backend errors (a
    newer schema, an unreachable server) are ``JournalError``s."""
    try:
        location = await check_existing_journal(url)
    except NotAJournalError as exc:
        raise ReplayInputError(
            f"{exc}; name the journal with --journal URL_OR_PATH or $LOOPRUNTIME_JOURNAL"
        ) from exc
    async with open_journal(location.url, readonly=not write) as journal:
        yield journal


async def read_session(journal: Journal, session_id: str) -> AsyncIterator[Record]:
    """``journal.read`` with a clear error for a session that is not there."""
    try:
        async for record in journal.read(session_id):
            yield record
    except SessionNotFoundError as exc:
        raise _no_session(journal, session_id) from exc


Format = Literal["transcript", "tree", "json", "unified"]
"""The trace (``--format otel-json``, ``--otlp``) is ``traces.command``'s: it
reads the unified model, a part above this one."""


async def read_until_damaged(
    journal: Journal, session_id: str
) -> tuple[list[Record], JournalError | None]:
    """The session's records up to any damage, and that damage (None when the
    journal is whole): a view shows everything before the damage, then says
    where it is (``say_damaged``)."""
    records: list[Record] = []
    try:
        async for record in read_session(journal, session_id):
            records.append(record)
    except ReplayInputError:
        raise
    except JournalError as exc:
        return records, exc
    return records, None


def say_damaged(damage: JournalError, err: Callable[[str], object]) -> int:
    """Tell that the journal is damaged and where to look; the exit status."""
    err(
        f"loopruntime replay: the journal is damaged: {damage}; "
        "`replay --check` names the first bad seq"
    )
    return 1


# Long for its validation: every argument is checked, with its own message,
# before the journal is opened; the work itself is the calls at its end.
async def replay_command(
    url: str,
    session_id: str,
    *,
    fmt: Format = "transcript",
    check_only: bool = False,
    follow: bool = False,
    at: int | None = None,
    causes: bool = False,
    inherited: bool = True,
    content: bool = True,
    color: bool = False,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = print,
) -> int:
    """``loopruntime replay``: 0 when the output is complete (or the check
    passed), 1 when the journal is damaged or fails the check, 2 when the
    journal or session cannot be read at all, or ``at`` is past its head.
    The transcript of a fork begins with the conversation it inherited from
    its source, marked as such, unless not ``inherited``.  The unified
    document leaves every payload out (``omitted``) unless ``content``.
    Never writes to the journal."""
    if follow and (check_only or at is not None or fmt != "transcript" or causes):
        err("loopruntime replay: --follow works with the transcript format only")
        return 2
    if causes and (check_only or at is not None or fmt != "transcript"):
        err(
            "loopruntime replay: --causes is a listing of its own; the JSON format "
            "(--format json) carries the causes too"
        )
        return 2
    if not content and fmt != "unified":
        err("loopruntime replay: --no-content works with --format unified only")
        return 2
    if at is not None and at < 0:
        err(f"loopruntime replay: --at takes a seq (0 or more), not {at}")
        return 2
    try:
        async with open_for_replay(url) as journal:
            if check_only:
                try:
                    with progress(f"reading session {session_id}", None) as bar:
                        report = await check(journal, session_id, progress=bar)
                except SessionNotFoundError as exc:
                    raise _no_session(journal, session_id) from exc
                for problem in report.problems:
                    err(str(problem))
                out(report.summary())
                return 0 if report.ok else 1
            if follow:
                return await _follow(journal, session_id, color, inherited, out, err)
            records, damage = await read_until_damaged(journal, session_id)
            head = records[-1].seq if records else 0
            if at is not None and at > head and damage is None:
                err(
                    f"loopruntime replay: --at {at} is past the head of session {session_id} "
                    f"(seq {head}); give a seq from 0 to {head}"
                )
                return 2
            if at is not None:
                try:
                    out(
                        render_states(
                            states_at(records, at), min(at, records[-1].seq if records else 0)
                        )
                    )
                except FoldError as exc:
                    err(f"loopruntime replay: {exc}; `replay --check` reports every problem")
                    return 1
            elif causes:
                if not table(CAUSE_COLUMNS, cause_rows(records)):
                    out(render_causes(records, color=color))
            elif fmt == "transcript":
                if inherited and records:
                    for line in await inherited_lines(journal, records[0], color=color):
                        out(line)
                out(render_transcript(records, color=color))
            elif fmt == "tree":
                out(render_tree(build_tree(session_id, records), color=color))
            elif fmt == "unified":
                document = build_unified(session_id, records, omit_content=not content)
                out(unified_json(document).decode())
            else:
                tree = build_tree(session_id, records)
                tree.writers = await _writer_nodes(journal, session_id, err)
                out(tree_json(tree).decode())
            return 0 if damage is None else say_damaged(damage, err)
    except ReplayInputError as exc:
        err(f"loopruntime replay: {exc}")
        return 2


async def _writer_nodes(
    journal: Journal, session_id: str, err: Callable[[str], object]
) -> list[WriterNode]:
    """The session's writers for the JSON tree; none (said on stderr) when
    they cannot be read, so the tree is still shown."""
    try:
        spans = await journal.writers(session_id)
    except JournalError as exc:
        err(f"loopruntime replay: the session's writers could not be read: {exc}")
        return []
    return [
        WriterNode(first_seq=s.first_seq, incarnation=s.incarnation, host=s.owner) for s in spans
    ]


def _no_session(journal: Journal, session_id: str) -> ReplayInputError:
    return ReplayInputError(
        f"there is no session {session_id} in journal {journal.url}; "
        "`loopruntime sessions` lists the sessions there are"
    )


async def _follow(
    journal: Journal,
    session_id: str,
    color: bool,
    inherited: bool,
    out: Callable[[str], None],
    err: Callable[[str], None],
) -> int:
    """Print the transcript (a fork's after what it inherited), then every
    record appended later, until the journal closes (or the reader is
    interrupted)."""
    renderer = TranscriptRenderer(color=color)
    try:
        async for record in journal.tail(session_id):
            if inherited and record.seq == 1:
                for line in await inherited_lines(journal, record, color=color):
                    out(line)
            for line in renderer.feed(record):
                out(line)
    except SessionNotFoundError as exc:
        raise _no_session(journal, session_id) from exc
    except JournalError as exc:
        err(f"loopruntime replay: the journal is damaged: {exc}")
        return 1
    return 0
