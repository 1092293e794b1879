"""The PostgreSQL blob table (``journal.blobs``): what the writer stores, what readers fetch.

Blocking calls on a connection a worker thread holds.  The writer calls
``store`` in the transaction that inserts the records referring to the blobs;
on the fast path the writer's one statement inserts ``unique_blobs`` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .arrays import bytea_array

__all__ = ["fetch", "store", "unique_blobs"]

# Content-addressed: a blob already stored is the same bytes.
_INSERT = """
INSERT INTO loopruntime_blobs (digest, body) SELECT * FROM unnest(%b::bytea[], %b::bytea[])
ON CONFLICT (digest) DO NOTHING
"""


def unique_blobs(
    batch: Sequence[Any], results: Sequence[Any] = ()
) -> tuple[list[bytes], list[bytes]]:
    """The digests and bodies of the blobs of the appends of ``batch`` (each with
    a ``blobs`` list or None), each once; with ``results``, only of those whose
    result is not an error."""
    unique: dict[bytes, bytes] = {}
    for n, item in enumerate(batch):
        if item.blobs and not (results and isinstance(results[n], BaseException)):
            unique.update(item.blobs)
    return list(unique), list(unique.values())


def store(conn: psycopg.Connection[Any], batch: Sequence[Any], results: Sequence[Any] = ()) -> None:
    """Store the blobs of the appends of ``batch`` (``unique_blobs``)."""
    digests, bodies = unique_blobs(batch, results)
    if digests:
        conn.execute(_INSERT, (bytea_array(digests), bytea_array(bodies)))


def fetch(conn: psycopg.Connection[Any], digests: list[bytes]) -> dict[bytes, bytes]:
    """The stored blobs among ``digests`` (a missing one is left out)."""
    with conn.cursor(binary=True) as cur:
        rows = cur.execute(
            "SELECT digest, body FROM loopruntime_blobs WHERE digest = ANY(%s)",
            (list(dict.fromkeys(digests)),),
        ).fetchall()
    return {bytes(d): bytes(b) for d, b in rows}
