"""The SQLite blob table (``journal.blobs``): what the writer stores, what readers fetch.

Both run in the thread of their connection; the writer calls ``store`` in the
transaction that inserts the records referring to the blobs.
"""

from __future__ import annotations

import sqlite3

__all__ = ["fetch", "store"]

# Content-addressed: a blob already stored is the same bytes.
_INSERT = "INSERT OR IGNORE INTO blobs (digest, body) VALUES (?, ?)"

_CHUNK = 500
"""Digests per ``IN (...)`` lookup, well under SQLite's bound-parameter limit."""


def store(conn: sqlite3.Connection, blobs: list[tuple[bytes, bytes]]) -> None:
    """Store an append's blobs (a failure goes the way of a failed record insert)."""
    conn.executemany(_INSERT, blobs)


def fetch(conn: sqlite3.Connection, digests: list[bytes]) -> dict[bytes, bytes]:
    """The stored blobs among ``digests`` (a missing one is left out)."""
    found: dict[bytes, bytes] = {}
    unique = list(dict.fromkeys(digests))
    for start in range(0, len(unique), _CHUNK):
        chunk = unique[start : start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        found.update(
            conn.execute(f"SELECT digest, body FROM blobs WHERE digest IN ({marks})", chunk)
        )
    return found
