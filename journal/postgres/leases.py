"""Leases and the inbox on PostgreSQL: blocking work for the pool's threads.

Rules: every lease change and every put is one transaction that first locks
the session's row (``SELECT ... FOR UPDATE``), the lock the group commit
takes too, so it is decided by ``journal.rules`` against the state no append
can change meanwhile.  Lease times are the server's clock (``clock_timestamp``),
so hosts on machines whose clocks disagree still agree on expiry.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..codec import GENESIS
from ..errors import FencedError, LeaseHeldError, SessionNotFoundError
from ..inbox import Claim, InboxEntry, decode_entry, decode_outcome, wakeup_payload
from ..rules import (
    UNOWNED,
    LeaseState,
    decide_acquire,
    decide_open,
    decide_put,
    decide_register,
    decide_release,
    decide_renew,
    live_holder,
)
from ..store import HostInfo, SessionLease

__all__ = [
    "acquire_all",
    "claimable",
    "deregister_host",
    "hosts",
    "register_host",
    "entry",
    "inbox",
    "lease_op",
    "open_session",
    "put",
    "renew_all",
]

_NOW_NS = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint"
_NOW = f"SELECT {_NOW_NS}"

_ENTRY_COLUMNS = "number, key, body, created_at, consumed_at, outcome"

Conn = psycopg.Connection[Any]


def _now(conn: Conn) -> int:
    row = conn.execute(_NOW).fetchone()
    assert row is not None
    return int(row[0])


def _locked(
    conn: Conn, session: str, *, skip: bool = False
) -> tuple[LeaseState, int, str | None] | None:
    """The session's lease state, head and definition, its row locked; None
    if absent (or, with ``skip``, locked by another transaction).

    The lease is read by a statement of its own, after the lock: a statement
    that waited for the row (or found it changed since its snapshot) sees
    the row's newest version but every other table as of its start, so a
    lease row joined in would be the one from before the transaction it
    waited for; another host's take committed meanwhile would go unseen and
    be taken again.  Every change of a lease holds this lock first."""
    row = conn.execute(
        "SELECT incarnation, head FROM loopruntime_sessions WHERE session = %s FOR UPDATE"
        + (" SKIP LOCKED" if skip else ""),
        (session,),
    ).fetchone()
    if row is None:
        return None
    held = conn.execute(
        "SELECT owner, expires_at, definition FROM loopruntime_leases WHERE session = %s",
        (session,),
    ).fetchone()
    owner, expires_at, definition = held if held is not None else (None, 0, None)
    return (int(row[0]), owner, int(expires_at or 0)), int(row[1]), definition


def _create(conn: Conn, session: str, now: int) -> None:
    conn.execute(
        "INSERT INTO loopruntime_sessions (session, incarnation, head, digest, created_at,"
        " updated_at) VALUES (%s, 0, 0, %s, %s, %s) ON CONFLICT (session) DO NOTHING",
        (session, GENESIS, now, now),
    )


def _store(
    conn: Conn, session: str, before: LeaseState, after: LeaseState, definition: str | None
) -> None:
    if after[0] != before[0]:
        conn.execute(
            "UPDATE loopruntime_sessions SET incarnation = %s WHERE session = %s",
            (after[0], session),
        )
    conn.execute(
        "INSERT INTO loopruntime_leases (session, owner, expires_at, definition)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (session) DO UPDATE SET owner = excluded.owner,"
        " expires_at = excluded.expires_at,"
        " definition = coalesce(excluded.definition, loopruntime_leases.definition)",
        (session, after[1], after[2], definition),
    )


def _refuse_busy(conn: Conn, session: str) -> None:
    """``LeaseHeldError`` when the session exists, its row locked by another
    transaction (``_locked(skip=True)`` found nothing)."""
    row = conn.execute(
        "SELECT l.owner, coalesce(l.expires_at, 0)"
        " FROM loopruntime_sessions s LEFT JOIN loopruntime_leases l ON l.session = s.session"
        " WHERE s.session = %s",
        (session,),
    ).fetchone()
    if row is not None:
        raise LeaseHeldError(session, row[0] or "another host taking it now", int(row[1]))


def open_session(conn: Conn, session: str, create: bool) -> SessionLease | None:
    """Blocking: ``Journal.open_session``; None when the session is missing."""
    with conn.transaction():
        now = _now(conn)
        found = _locked(conn, session)
        if found is None:
            if not create:
                return None
            _create(conn, session, now)
            found = _locked(conn, session)
            assert found is not None
        lease, head, _ = found
        after = decide_open(session, lease, now)
        _store(conn, session, lease, after, None)
        return SessionLease(session=session, incarnation=after[0], head=head)


def lease_op(
    conn: Conn,
    op: str,
    session: str,
    *,
    owner: str | None = None,
    ttl: int = 0,
    incarnation: int = 0,
    create: bool = False,
    handoff: bool = False,
    definition: str | None = None,
    notify: str | None = None,
) -> SessionLease | None:
    """Blocking: ``acquire``, ``renew`` or ``release`` (``op``); a hand-over
    notifies channel ``notify`` (delivered when the transaction commits).

    A take skips a session whose row another transaction holds (``SKIP
    LOCKED``): another host taking it, or its owner committing; hosts racing
    for one session never queue behind each other."""
    with conn.transaction():
        now = _now(conn)
        found = _locked(conn, session, skip=op == "acquire")
        if found is None and op == "acquire":
            _refuse_busy(conn, session)
        if found is None:
            if not (op == "acquire" and create):
                raise SessionNotFoundError(session)
            _create(conn, session, now)
            found = _locked(conn, session)
            assert found is not None
        lease, head, _ = found
        if op == "acquire":
            assert owner is not None
            after = decide_acquire(session, owner, lease, now, ttl)
        elif op == "renew":
            after = decide_renew(session, incarnation, owner, lease, now, ttl)
        else:
            after = decide_release(session, incarnation, lease, handoff)
        _store(conn, session, lease, after, definition)
        if handoff and notify is not None:
            conn.execute("SELECT pg_notify(%s, %s)", (notify, wakeup_payload(session, None)))
    if op == "release":
        return None
    return SessionLease(
        session=session, incarnation=after[0], head=head, owner=after[1], expires_at=after[2]
    )


def acquire_all(
    conn: Conn, sessions: list[str], owner: str, ttl: int
) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
    """Blocking: ``Journal.acquire_all``, in one transaction: the rows locked
    in session order, skipping those another transaction holds (as ``acquire``
    does: refused, never waited for), the leases read after the locks, each
    decided by ``rules.decide_acquire`` in order, the takes written by two
    statements however many they are."""
    with conn.transaction():
        locked = dict(
            conn.execute(
                "SELECT session, incarnation FROM loopruntime_sessions"
                " WHERE session = ANY(%s::text[]) ORDER BY session FOR UPDATE SKIP LOCKED",
                (sessions,),
            ).fetchall()
        )
        # Read after the locks, by a statement of its own (see ``_locked``);
        # a row skipped as locked is still named here, with its owner.
        leased = conn.execute(
            "SELECT s.session, s.head, l.owner, coalesce(l.expires_at, 0)"
            " FROM loopruntime_sessions s LEFT JOIN loopruntime_leases l ON l.session = s.session"
            " WHERE s.session = ANY(%s::text[])",
            (sessions,),
        ).fetchall()
        rows = {
            session: (int(head), owner, int(expires)) for session, head, owner, expires in leased
        }
        now = _now(conn)
        taken: list[SessionLease | LeaseHeldError | SessionNotFoundError] = []
        incarnations: dict[str, int] = {}
        for session in sessions:
            row = rows.get(session)
            if row is None:
                taken.append(SessionNotFoundError(session))
                continue
            head, held_by, expires_at = row
            if session not in locked:
                taken.append(
                    LeaseHeldError(session, held_by or "another host taking it now", expires_at)
                )
                continue
            try:
                after = decide_acquire(
                    session, owner, (int(locked[session]), held_by, expires_at), now, ttl
                )
            except LeaseHeldError as exc:
                taken.append(exc)
                continue
            locked[session] = after[0]
            rows[session] = (head, owner, after[2])  # a session named twice sees its take
            incarnations[session] = after[0]
            taken.append(
                SessionLease(
                    session=session,
                    incarnation=after[0],
                    head=head,
                    owner=owner,
                    expires_at=after[2],
                )
            )
        if incarnations:
            _store_takes(conn, owner, incarnations, rows)
    return taken


def _store_takes(
    conn: Conn, owner: str, incarnations: dict[str, int], rows: dict[str, tuple[int, Any, int]]
) -> None:
    """Write the takes of ``acquire_all``: each session's new incarnation, and
    its lease for ``owner`` until its expiry in ``rows``."""
    names = list(incarnations)
    conn.execute(
        "UPDATE loopruntime_sessions s SET incarnation = w.incarnation"
        " FROM unnest(%s::text[], %s::bigint[]) AS w(session, incarnation)"
        " WHERE s.session = w.session",
        (names, list(incarnations.values())),
    )
    conn.execute(
        "INSERT INTO loopruntime_leases (session, owner, expires_at)"
        " SELECT w.session, %s, w.expires_at FROM unnest(%s::text[], %s::bigint[])"
        " AS w(session, expires_at)"
        " ON CONFLICT (session) DO UPDATE SET owner = excluded.owner,"
        " expires_at = excluded.expires_at",
        (owner, names, [rows[name][2] for name in names]),
    )


def renew_all(
    conn: Conn, leases: list[tuple[str, int, str | None]], ttl: int
) -> list[SessionLease | None]:
    """Blocking: ``Journal.renew_all`` for ``(session, incarnation, owner)``
    each, in one transaction: the rows locked in session order (the order the
    group commit locks them in, so the two never deadlock), the leases read
    after the locks, each decided by
    ``rules.decide_renew``, the renewed ones written by one statement."""
    with conn.transaction():
        names = [session for session, _, _ in leases]
        locked = conn.execute(
            "SELECT session, incarnation, head FROM loopruntime_sessions"
            " WHERE session = ANY(%s::text[]) ORDER BY session FOR UPDATE",
            (names,),
        ).fetchall()
        # Read after the locks, by a statement of its own (see ``_locked``).
        held = {
            session: (owner, int(expires_at))
            for session, owner, expires_at in conn.execute(
                "SELECT session, owner, expires_at FROM loopruntime_leases"
                " WHERE session = ANY(%s::text[])",
                (names,),
            ).fetchall()
        }
        now = _now(conn)
        found = {
            session: (session, incarnation, *held.get(session, (None, 0)), head)
            for session, incarnation, head in locked
        }
        renewed: list[SessionLease | None] = []
        sessions: list[str] = []
        expiries: list[int] = []
        for session, incarnation, owner in leases:
            row = found.get(session)
            if row is None:
                renewed.append(None)
                continue
            try:
                after = decide_renew(
                    session, incarnation, owner, (int(row[1]), row[2], int(row[3])), now, ttl
                )
            except FencedError:
                renewed.append(None)
                continue
            sessions.append(session)
            expiries.append(after[2])
            renewed.append(
                SessionLease(
                    session=session,
                    incarnation=after[0],
                    head=int(row[4]),
                    owner=after[1],
                    expires_at=after[2],
                )
            )
        if sessions:
            conn.execute(
                "UPDATE loopruntime_leases l SET expires_at = w.expires_at"
                " FROM unnest(%s::text[], %s::bigint[]) AS w(session, expires_at)"
                " WHERE l.session = w.session",
                (sessions, expiries),
            )
    return renewed


def put(
    conn: Conn,
    session: str,
    key: str,
    body: bytes,
    definition: str | None,
    notify: str | None = None,
) -> tuple[Any, ...]:
    """Blocking: ``Journal.put``; the stored entry's row.  A new entry
    notifies channel ``notify`` with the session's id and the owner of its
    lease if live (``inbox.wakeup_payload``), on commit."""
    with conn.transaction():
        now = _now(conn)
        locked = _locked(conn, session)
        if locked is None:
            if definition is None:
                raise SessionNotFoundError(session)
            _create(conn, session, now)
            _locked(conn, session)
            _store(conn, session, UNOWNED, UNOWNED, definition)
        # Its holder under the row's lock, by the server's clock: the wake-up
        # names it, and other hosts spare a pass that could take nothing.
        holder = live_holder(locked[0], now) if locked is not None else None
        found = conn.execute(
            f"SELECT {_ENTRY_COLUMNS} FROM loopruntime_inbox WHERE session = %s AND key = %s",
            (session, key),
        ).fetchone()
        if decide_put(session, key, body, (found[0], found[2]) if found else None) is not None:
            assert found is not None
            return tuple(found)
        row = conn.execute(
            "INSERT INTO loopruntime_inbox (session, number, key, body, created_at)"
            " SELECT %s, coalesce(max(number), 0) + 1, %s, %s, %s FROM loopruntime_inbox"
            f" WHERE session = %s RETURNING {_ENTRY_COLUMNS}",
            (session, key, body, now, session),
        ).fetchone()
        assert row is not None
        if notify is not None:
            conn.execute("SELECT pg_notify(%s, %s)", (notify, wakeup_payload(session, holder)))
        return tuple(row)


def entry_of(session: str, row: tuple[Any, ...]) -> InboxEntry:
    number, key, body, created_at, consumed_at, outcome = row
    command, damage = decode_entry(bytes(body))
    return InboxEntry(
        session=session,
        number=int(number),
        key=key,
        command=command,
        created_at=int(created_at),
        consumed_at=consumed_at,
        outcome=decode_outcome(bytes(outcome)) if outcome is not None else None,
        damage=damage,
    )


def _exists(conn: Conn, session: str) -> None:
    if conn.execute("SELECT 1 FROM loopruntime_sessions WHERE session = %s", (session,)).fetchone():
        return
    raise SessionNotFoundError(session)


def inbox(conn: Conn, session: str, after: int) -> list[InboxEntry]:
    _exists(conn, session)
    rows = conn.execute(
        f"SELECT {_ENTRY_COLUMNS} FROM loopruntime_inbox"
        " WHERE session = %s AND consumed_at IS NULL AND number > %s ORDER BY number",
        (session, after),
    ).fetchall()
    return [entry_of(session, row) for row in rows]


def entry(conn: Conn, session: str, key: str) -> InboxEntry | None:
    _exists(conn, session)
    row = conn.execute(
        f"SELECT {_ENTRY_COLUMNS} FROM loopruntime_inbox WHERE session = %s AND key = %s",
        (session, key),
    ).fetchone()
    return entry_of(session, row) if row else None


# Driven by the two partial indexes (entries waiting, leases held), never by a
# scan of every session: passivated sessions cost nothing here.
_CLAIMABLE = """
WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint AS t),
candidates AS (
    SELECT DISTINCT session FROM loopruntime_inbox WHERE consumed_at IS NULL
    UNION
    SELECT session FROM loopruntime_leases, now WHERE owner IS NOT NULL AND expires_at <= now.t
)
SELECT c.session, l.owner, coalesce(l.expires_at, 0),
    (SELECT count(*) FROM loopruntime_inbox i
     WHERE i.session = c.session AND i.consumed_at IS NULL),
    l.definition
FROM candidates c CROSS JOIN now LEFT JOIN loopruntime_leases l ON l.session = c.session
WHERE (l.definition IS NULL OR l.definition = ANY(%s::text[]))
  AND (l.owner IS NULL OR l.expires_at <= now.t OR l.owner = %s)
ORDER BY c.session
LIMIT %s
"""


def claimable(conn: Conn, definitions: list[str], owner: str | None, limit: int) -> list[Claim]:
    rows = conn.execute(_CLAIMABLE, (definitions, owner, limit)).fetchall()
    return [
        Claim(session=s, owner=o, expires_at=int(e), pending=int(p), definition=d)
        for s, o, e, p, d in rows
    ]


def register_host(conn: Conn, host: str, token: str, definitions: list[str], ttl: int) -> int:
    """Blocking: ``Journal.register_host``, one transaction holding the host's
    row (``FOR UPDATE``; a first registration is serialised by the key)."""
    with conn.transaction():
        now = _now(conn)
        row = conn.execute(
            "SELECT token, expires_at FROM loopruntime_hosts WHERE host = %s FOR UPDATE",
            (host,),
        ).fetchone()
        expires_at = decide_register(host, token, (row[0], int(row[1])) if row else None, now, ttl)
        conn.execute(
            "INSERT INTO loopruntime_hosts (host, token, definitions, expires_at)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (host) DO UPDATE SET token = excluded.token,"
            " definitions = excluded.definitions, expires_at = excluded.expires_at",
            (host, token, definitions, expires_at),
        )
        return expires_at


def deregister_host(conn: Conn, host: str, token: str) -> None:
    with conn.transaction():
        conn.execute("DELETE FROM loopruntime_hosts WHERE host = %s AND token = %s", (host, token))


def hosts(conn: Conn) -> list[HostInfo]:
    rows = conn.execute(
        "SELECT host, definitions, expires_at,"
        f" expires_at > {_NOW_NS} FROM loopruntime_hosts ORDER BY host"
    ).fetchall()
    return [
        HostInfo(host=h, definitions=tuple(d), expires_at=int(e), live=bool(v))
        for h, d, e, v in rows
    ]
