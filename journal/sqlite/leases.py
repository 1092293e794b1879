"""Leases and the inbox in the SQLite file: statements the writer thread runs.

Rules: called only by the writer thread, inside its transaction, after the
writer has found the session; every decision is ``journal.rules``'s, made
before anything is written, so a refusal leaves the transaction as it was.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from ..rules import LeaseState, decide_consumes, decide_put, decide_register
from ..store import HostInfo

__all__ = [
    "EntryRow",
    "consume",
    "extend_leases",
    "held_leases",
    "host_op",
    "insert_session",
    "list_hosts",
    "lease_state",
    "put_entry",
    "store_lease",
]

_CHUNK = 500
"""Sessions per ``IN (...)`` lookup, well under SQLite's bound-parameter limit."""

EntryRow = tuple[int, str, bytes, int, int | None, bytes | None]
"""A stored inbox entry: ``(number, key, body, created_at, consumed_at, outcome)``."""


def insert_session(conn: sqlite3.Connection, session: str, now: int, incarnation: int = 0) -> None:
    """Store a new session, with no records, at ``incarnation``."""
    conn.execute(
        "INSERT INTO sessions (session, incarnation, created_at) VALUES (?, ?, ?)",
        (session, incarnation, now),
    )


def lease_state(conn: sqlite3.Connection, session: str, incarnation: int) -> LeaseState:
    row = conn.execute(
        "SELECT owner, expires_at FROM leases WHERE session = ?", (session,)
    ).fetchone()
    if row is None:
        return (incarnation, None, 0)
    return (incarnation, row[0], row[1])


def store_lease(
    conn: sqlite3.Connection,
    session: str,
    before: int,
    after: LeaseState,
    definition: str | None,
) -> None:
    """Write lease state ``after`` (the incarnation too, when it moved from ``before``)."""
    incarnation, owner, expires_at = after
    if incarnation != before:
        conn.execute(
            "UPDATE sessions SET incarnation = ? WHERE session = ?", (incarnation, session)
        )
    conn.execute(
        "INSERT INTO leases (session, owner, expires_at, definition) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (session) DO UPDATE SET owner = excluded.owner,"
        " expires_at = excluded.expires_at,"
        " definition = coalesce(excluded.definition, leases.definition)",
        (session, owner, expires_at, definition),
    )


def held_leases(conn: sqlite3.Connection, sessions: Sequence[str]) -> dict[str, tuple[str, int]]:
    """The owner and expiry of each of ``sessions`` that has an owner, in a
    few statements however many they are."""
    held: dict[str, tuple[str, int]] = {}
    for start in range(0, len(sessions), _CHUNK):
        chunk = sessions[start : start + _CHUNK]
        marks = ", ".join("?" * len(chunk))
        for session, owner, expires_at in conn.execute(
            "SELECT session, owner, expires_at FROM leases"
            f" WHERE owner IS NOT NULL AND session IN ({marks})",
            chunk,
        ):
            held[session] = (owner, expires_at)
    return held


def extend_leases(conn: sqlite3.Connection, expiries: Sequence[tuple[int, str]]) -> None:
    """Move each lease's expiry: ``(expires_at, session)`` pairs, one statement."""
    conn.executemany("UPDATE leases SET expires_at = ? WHERE session = ?", expiries)


def put_entry(conn: sqlite3.Connection, session: str, key: str, body: bytes, now: int) -> EntryRow:
    """The entry stored under ``key``, stored now when the key is new."""
    found = conn.execute(
        "SELECT number, key, body, created_at, consumed_at, outcome FROM inbox"
        " WHERE session = ? AND key = ?",
        (session, key),
    ).fetchone()
    if decide_put(session, key, body, (found[0], found[2]) if found else None) is not None:
        return tuple(found)
    number = conn.execute(
        "SELECT coalesce(max(number), 0) + 1 FROM inbox WHERE session = ?", (session,)
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO inbox (session, number, key, body, created_at) VALUES (?, ?, ?, ?, ?)",
        (session, number, key, body, now),
    )
    return (number, key, body, now, None, None)


def consume(
    conn: sqlite3.Connection, session: str, consumes: Sequence[tuple[int, bytes]], now: int
) -> None:
    """Mark the entries an append applies, as ``rules.decide_consumes`` decides."""
    found: list[Any] = []
    for number, _ in consumes:
        row = conn.execute(
            "SELECT consumed_at, outcome FROM inbox WHERE session = ? AND number = ?",
            (session, number),
        ).fetchone()
        found.append(None if row is None else (row[0] is not None, row[1]))
    for number, outcome in decide_consumes(session, consumes, found):
        conn.execute(
            "UPDATE inbox SET consumed_at = ?, outcome = ? WHERE session = ? AND number = ?",
            (now, outcome, session, number),
        )


def host_op(
    conn: sqlite3.Connection,
    host: str,
    token: str,
    definitions: tuple[str, ...],
    now: int,
    ttl: int,
) -> int | None:
    """Register (or renew) ``host`` for ``token``, as ``rules.decide_register``
    decides, and return its expiry; with ``ttl`` 0, deregister it."""
    if not ttl:
        conn.execute("DELETE FROM hosts WHERE host = ? AND token = ?", (host, token))
        return None
    row = conn.execute("SELECT token, expires_at FROM hosts WHERE host = ?", (host,)).fetchone()
    expires_at = decide_register(host, token, tuple(row) if row else None, now, ttl)
    conn.execute(
        "INSERT INTO hosts (host, token, definitions, expires_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (host) DO UPDATE SET token = excluded.token,"
        " definitions = excluded.definitions, expires_at = excluded.expires_at",
        (host, token, msgspec.json.encode(definitions).decode(), expires_at),
    )
    return expires_at


def list_hosts(conn: sqlite3.Connection) -> list[HostInfo]:
    """Every registered host, live or not (judged by this machine's clock, as
    the writer judges registrations)."""
    now = time.time_ns()
    rows = conn.execute("SELECT host, definitions, expires_at FROM hosts ORDER BY host")
    return [
        HostInfo(
            host=host,
            definitions=tuple(msgspec.json.decode(names)),
            expires_at=expires_at,
            live=expires_at > now,
        )
        for host, names, expires_at in rows.fetchall()
    ]
