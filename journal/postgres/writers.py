"""Writer spans on PostgreSQL (``Journal.writers``): the readers' query.

The spans are stored by the database itself, as records are inserted (the
trigger of ``schema._CREATE_WRITERS``): a span only where the incarnation
that appended is not the session's last span's (``rules.starts_span``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..store import WriterSpan

__all__ = ["list_writers"]


def list_writers(conn: psycopg.Connection[Any], session: str) -> list[WriterSpan] | None:
    """Blocking: the session's spans in seq order; None when there is no such session."""
    rows = conn.execute(
        "SELECT w.first_seq, w.incarnation, w.owner FROM loopruntime_sessions s"
        " LEFT JOIN loopruntime_writers w ON w.session = s.session"
        " WHERE s.session = %s ORDER BY w.first_seq",
        (session,),
    ).fetchall()
    if not rows:
        return None
    return [
        WriterSpan(first_seq=int(f), incarnation=int(i), owner=o)
        for f, i, o in rows
        if f is not None
    ]
