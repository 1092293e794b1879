"""Writer spans in the SQLite file (``Journal.writers``): the statement the
writer thread runs as an append commits, and the readers' query.

Rule: a span is stored only where the append's incarnation is not the
session's last span's (``rules.starts_span``), decided inside the insert
itself, under the write lock, so it sees the spans of this transaction and
of every other process.
"""

from __future__ import annotations

from ..store import WriterSpan

__all__ = ["INSERT_WRITER", "SELECT_WRITERS", "Span", "spans_of"]

Span = tuple[str, int, int, str | None]
"""A writer span to store: ``(session, first_seq, incarnation, owner)``."""

INSERT_WRITER = (
    "INSERT INTO writers (session, first_seq, incarnation, owner) SELECT ?1, ?2, ?3, ?4"
    " WHERE ?3 IS NOT"
    " (SELECT incarnation FROM writers WHERE session = ?1 ORDER BY first_seq DESC LIMIT 1)"
)


SELECT_WRITERS = (
    "SELECT first_seq, incarnation, owner FROM writers WHERE session = ? ORDER BY first_seq"
)


def spans_of(rows: list[tuple[int, int, str | None]]) -> list[WriterSpan]:
    """The spans of ``SELECT_WRITERS``'s rows."""
    return [WriterSpan(first_seq=f, incarnation=i, owner=o) for f, i, o in rows]
