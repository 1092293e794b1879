"""A SQLite session's checkpoints from the index, and the records after the last one.

Rules: blocking, on a reader connection the caller lends; ``checkpointed``
reads in one read transaction, so its checkpoints, head and tail are one
snapshot, and reads the tail only when the head is past the last
checkpoint.  Every checkpoint is verified against the stored digest of the
record before it, the tail on the chain from the last checkpoint, and bodies
stored by reference are joined.  A damaged page is a ``JournalCorruptError``:
checkpoints are derived data, and a restore reads the records instead.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from ..blobs import is_split, join, references
from ..codec import GENESIS, checkpoint_records, verified_records
from ..errors import JournalCorruptError, SessionNotFoundError
from ..record import Record
from ..store import Checkpointed
from .blobs import fetch as fetch_blobs
from .schema import damaged, unavailable

__all__ = ["checkpointed", "checkpoints"]

# Whether the session exists, the first seq chained over the whole record
# (NULL: from seq 1), and its head.
_SELECT_SESSION = (
    "SELECT (SELECT 1 FROM sessions WHERE session = ?),"
    " (SELECT whole_from FROM chain_rule WHERE session = ?),"
    " (SELECT max(seq) FROM records WHERE session = ?)"
)
# The checkpoint's record and the digest of the record before it (NULL for
# seq 1, which chains from GENESIS, or when that record is missing).
_SELECT_CHECKPOINTS = (
    "SELECT c.seq, r.id, r.loop, r.at, r.cause, r.digest, r.body, p.digest"
    " FROM checkpoints AS c"
    " LEFT JOIN records AS r ON r.session = c.session AND r.seq = c.seq"
    " LEFT JOIN records AS p ON p.session = c.session AND p.seq = c.seq - 1"
    " WHERE c.session = ? ORDER BY c.seq"
)
_SELECT_TAIL = (
    "SELECT seq, id, loop, at, cause, digest, body FROM records"
    " WHERE session = ? AND seq > ? ORDER BY seq LIMIT ?"
)


def checkpoints(conn: sqlite3.Connection, path: str, session: str) -> list[Record]:
    """The session's checkpoint records, verified and decoded."""
    with _translated(path, session):
        whole_from, _ = _session(conn, session)
        rows = conn.execute(_SELECT_CHECKPOINTS, (session,)).fetchall()
        resolve = _resolver(conn, session, rows)
    return checkpoint_records(session, rows, whole_from, resolve=resolve)


def checkpointed(
    conn: sqlite3.Connection, path: str, session: str, tail_limit: int
) -> Checkpointed:
    """The session's checkpoints and at most ``tail_limit`` records after the
    last one (``Journal.read_checkpointed``), verified and decoded."""
    with _translated(path, session):
        conn.execute("BEGIN")
        try:
            whole_from, head = _session(conn, session)
            rows = conn.execute(_SELECT_CHECKPOINTS, (session,)).fetchall()
            after = rows[-1][0] if rows else 0
            tail = []
            if head > after:
                tail = conn.execute(_SELECT_TAIL, (session, after, tail_limit)).fetchall()
            resolve = _resolver(conn, session, [*rows, *tail])
        finally:
            conn.execute("COMMIT")
    found = checkpoint_records(session, rows, whole_from, resolve=resolve)
    records = verified_records(
        session,
        tail,
        after=after,
        previous=found[-1].digest if found else GENESIS,
        whole_from=whole_from,
        resolve=resolve,
    )
    return Checkpointed(checkpoints=found, tail=list(records), head=head)


def _session(conn: sqlite3.Connection, session: str) -> tuple[int, int]:
    """The session's first whole-record seq and its head; ``SessionNotFoundError``."""
    exists, whole_from, head = conn.execute(_SELECT_SESSION, (session,) * 3).fetchone()
    if not exists:
        raise SessionNotFoundError(session)
    return whole_from or 1, head or 0


def _resolver(
    conn: sqlite3.Connection, session: str, rows: list[Any]
) -> Callable[[int, bytes], bytes]:
    """Joins the bodies of ``rows`` stored by reference, their blobs read now."""
    wanted = [d for row in rows if row[6] and is_split(row[6]) for d in references(row[6])]
    found = fetch_blobs(conn, wanted) if wanted else {}
    return lambda seq, body: join(session, seq, body, found)


@contextlib.contextmanager
def _translated(path: str, session: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        if damaged(exc):
            raise JournalCorruptError(
                session,
                None,
                f"a damaged database page holds its checkpoints or the records after them "
                f"({exc}); `loopruntime replay SESSION --check` names the damaged tables",
            ) from exc
        raise unavailable(exc, path, f"reading the checkpoints of session {session}") from exc
