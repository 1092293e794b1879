"""Who wrote a session's records: the writer spans of ``Journal.writers``,
the checker's rules over them, and their form in ``--format json``.

Pure but for ``read_writers``.  Kept apart from the record checker: the
spans are not records, and their rules need none of the fold.
"""

from __future__ import annotations

from collections.abc import Sequence

from journal import Journal, JournalError, WriterSpan

from .report import Problem

__all__ = ["WRITER_RULES", "read_writers", "writer_problems"]

FENCED_NEVER_FOLLOWS = "records of a fenced writer never follow a newer one"
SPAN_AT_A_RECORD = "writer span starts at a record"
WRITER_RULES = (FENCED_NEVER_FOLLOWS, SPAN_AT_A_RECORD)


async def read_writers(journal: Journal, session_id: str) -> list[WriterSpan] | Problem:
    """The session's writer spans, or the problem of not being able to read them."""
    try:
        return await journal.writers(session_id)
    except JournalError as exc:
        return Problem(0, FENCED_NEVER_FOLLOWS, f"the writers could not be read: {exc}")


def writer_problems(spans: Sequence[WriterSpan], head: int) -> list[Problem]:
    """Each span after the first names a newer incarnation than the one before
    (fencing lets no older lease append after a newer one has), and starts
    at a record of the session (after the previous span's start, at most at
    ``head``).  A problem is reported at the span's first seq."""
    problems = []
    previous: WriterSpan | None = None
    for span in spans:
        if not (previous.first_seq if previous else 0) < span.first_seq <= head:
            problems.append(
                Problem(
                    max(span.first_seq, 0),
                    SPAN_AT_A_RECORD,
                    f"a writer span of incarnation {span.incarnation} starts at seq "
                    f"{span.first_seq}, outside the session's records (1-{head}) or before "
                    "the span ahead of it",
                )
            )
        elif previous is not None and span.incarnation <= previous.incarnation:
            problems.append(
                Problem(
                    span.first_seq,
                    FENCED_NEVER_FOLLOWS,
                    f"written by incarnation {span.incarnation}"
                    f"{_by(span)} after incarnation {previous.incarnation}{_by(previous)} "
                    f"had written from seq {previous.first_seq}: a fenced writer appended",
                )
            )
        previous = span
    return problems


def _by(span: WriterSpan) -> str:
    return f" (host {span.owner})" if span.owner is not None else ""
