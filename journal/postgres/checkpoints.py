"""A PostgreSQL session's checkpoints from the index, and the records after the last one.

Rules: blocking, on a pooled connection; each read is one statement (one
snapshot, one round trip; a second only for blobs).  Every checkpoint is
verified against the stored digest of the record before it, the tail on the
chain from the last checkpoint, and bodies stored by reference are joined,
all in the worker thread: a chain of checkpoints holds about the whole
message history, too much to decode between two trio checkpoints.  A
missing session is None (the caller raises ``SessionNotFoundError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from ..blobs import is_split, join, references
from ..codec import GENESIS, checkpoint_records, verified_records
from ..record import Record
from ..store import Checkpointed
from .blobs import fetch as fetch_blobs

__all__ = ["checkpointed", "checkpoints"]

# One row per checkpoint of the session: its record, and the digest of the
# record before it (NULL for seq 1, which chains from GENESIS).  Outer joins
# all the way, so a session without checkpoints is one row of NULLs, a
# missing session no row, and an index entry without its record is seen.
_CHECKPOINTS = """
SELECT c.seq, r.id, r.loop, r.at, r.cause, r.digest, r.body, p.digest, w.whole_from
FROM loopruntime_sessions s
LEFT JOIN loopruntime_chain_rule w ON w.session = s.session
LEFT JOIN loopruntime_checkpoints c ON c.session = s.session
LEFT JOIN loopruntime_records r ON r.session = c.session AND r.seq = c.seq
LEFT JOIN loopruntime_records p ON p.session = c.session AND p.seq = c.seq - 1
WHERE s.session = %s ORDER BY c.seq
"""

# A restore's read, one statement (one snapshot, one round trip): the rows of
# ``_CHECKPOINTS`` (part 0; the first carries the session's head and chain
# rule), then the records after the last checkpoint up to the head, at most
# %(limit)s of them (part 1): none when the head is that checkpoint's seq.
_CHECKPOINTED = """
WITH s AS (
    SELECT s.session, s.head, w.whole_from FROM loopruntime_sessions s
    LEFT JOIN loopruntime_chain_rule w ON w.session = s.session
    WHERE s.session = %(session)s
), last AS (
    SELECT coalesce(max(seq), 0) AS seq FROM loopruntime_checkpoints
    WHERE session = %(session)s
)
SELECT 0, s.head, s.whole_from, c.seq, r.id, r.loop, r.at, r.cause, r.digest, r.body, p.digest
FROM s
LEFT JOIN loopruntime_checkpoints c ON c.session = s.session
LEFT JOIN loopruntime_records r ON r.session = c.session AND r.seq = c.seq
LEFT JOIN loopruntime_records p ON p.session = c.session AND p.seq = c.seq - 1
UNION ALL
SELECT 1, NULL, NULL, r.seq, r.id, r.loop, r.at, r.cause, r.digest, r.body, NULL
FROM s CROSS JOIN last
JOIN loopruntime_records r ON r.session = s.session
    AND r.seq > last.seq AND r.seq <= least(s.head, last.seq + %(limit)s)
ORDER BY 1, 4
"""


def checkpoints(conn: psycopg.Connection[Any], session: str) -> list[Record] | None:
    """The session's checkpoint records, verified and decoded; None when the
    session does not exist."""
    with conn.cursor(binary=True) as cur:
        rows = cur.execute(_CHECKPOINTS, (session,)).fetchall()
    if not rows:
        return None
    # A session without checkpoints is its one row of NULLs.
    marks = [row[:8] for row in rows if row[0] is not None]
    resolve = _resolver(conn, session, marks)
    return checkpoint_records(session, marks, rows[0][8] or 1, resolve=resolve)


def checkpointed(
    conn: psycopg.Connection[Any], session: str, tail_limit: int
) -> Checkpointed | None:
    """The session's checkpoints and at most ``tail_limit`` records after the
    last one (``Journal.read_checkpointed``), verified and decoded; None when
    the session does not exist."""
    with conn.cursor(binary=True) as cur:
        rows = cur.execute(_CHECKPOINTED, {"session": session, "limit": tail_limit}).fetchall()
    if not rows:
        return None
    head, whole_from = int(rows[0][1]), rows[0][2] or 1
    marks = [row[3:11] for row in rows if row[0] == 0 and row[3] is not None]
    tail = [row[3:10] for row in rows if row[0] == 1]
    resolve = _resolver(conn, session, [*marks, *tail])
    found = checkpoint_records(session, marks, whole_from, resolve=resolve)
    records = verified_records(
        session,
        tail,
        after=found[-1].seq if found else 0,
        previous=found[-1].digest if found else GENESIS,
        whole_from=whole_from,
        resolve=resolve,
    )
    return Checkpointed(checkpoints=found, tail=list(records), head=head)


def _resolver(
    conn: psycopg.Connection[Any], session: str, rows: list[Any]
) -> Callable[[int, bytes], bytes]:
    """Joins the bodies of ``rows`` (a body at index 6) stored by reference,
    their blobs read now."""
    wanted = [d for row in rows if row[6] and is_split(row[6]) for d in references(row[6])]
    found = fetch_blobs(conn, wanted) if wanted else {}
    return lambda seq, body: join(session, seq, body, found)
