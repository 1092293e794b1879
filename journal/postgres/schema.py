"""The PostgreSQL database: connections, the tables and their upgrades, psycopg's errors.

Rules: every connection is autocommit and speaks UTF-8 (whatever the URL or
the environment say); ``translate`` is the one place a psycopg error becomes
a journal error (a connection lost or never made is
``JournalUnavailableError``, a refused statement a plain ``JournalError``).
The tables live in the first schema of the connection's ``search_path`` and
are created, or upgraded from an older version, in one transaction under an
advisory lock; a newer version is refused.  The layout is described in
``docs/journal.md``.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import psycopg
import structlog
import trio
from psycopg.conninfo import conninfo_to_dict

from ..codec import SCHEMA_VERSION, check_schema_version
from ..errors import JournalError, JournalUnavailableError, NotAJournalError
from ..record import check_text

__all__ = [
    "channel",
    "check_pg_text",
    "connect",
    "describe",
    "discard",
    "init_schema",
    "lost",
    "open_prepared",
    "translate",
]

log = structlog.wrap_logger(logging.getLogger(__name__))

_CONNECT_TIMEOUT = "10"
"""Seconds to wait for a connection unless the URL says otherwise."""

_SCHEMA_LOCK = "loopruntime.schema"

# The index of session.checkpoint records (schema version 2).  Like the
# records, no foreign key: only the writer inserts, in the records' transaction.
_CREATE_CHECKPOINTS = """
CREATE TABLE loopruntime_checkpoints (
    session text NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (session, seq)
);
"""

# The sessions whose first records were chained by the body-only rule of
# schema 2 (codec.chain_body): from seq ``whole_from`` on, the whole record is
# chained.  A session without a row was chained whole from seq 1.
_CREATE_CHAIN_RULE = """
CREATE TABLE loopruntime_chain_rule (
    session text PRIMARY KEY,
    whole_from bigint NOT NULL
);
"""

# Large units stored once by digest (journal.blobs; schema version 4).
_CREATE_BLOBS = """
CREATE TABLE loopruntime_blobs (
    digest bytea PRIMARY KEY,
    body bytea NOT NULL
);
"""

# Who appended (``Journal.writers``; schema version 5): a row where a lease
# other than the last span's first appended to a session, so a row per
# writer change rather than a column per record.  The span is derived here,
# once per statement that inserts records, from what that append was checked
# against: the session row it holds locked (the incarnation that passed
# fencing) and that incarnation's lease (its owner; none for open_session's).
# So every write path stores it, in the records' transaction, and the writer
# sends nothing more.
_CREATE_WRITERS = """
CREATE TABLE loopruntime_writers (
    session text NOT NULL,
    first_seq bigint NOT NULL,
    incarnation bigint NOT NULL,
    owner text,
    PRIMARY KEY (session, first_seq)
);
CREATE FUNCTION loopruntime_note_writers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO loopruntime_writers (session, first_seq, incarnation, owner)
    SELECT n.session, n.first_seq, s.incarnation, l.owner
    FROM (SELECT session, min(seq) AS first_seq FROM inserted GROUP BY session) n
    JOIN loopruntime_sessions s ON s.session = n.session
    LEFT JOIN loopruntime_leases l ON l.session = n.session
    WHERE s.incarnation IS DISTINCT FROM (
        SELECT w.incarnation FROM loopruntime_writers w
        WHERE w.session = n.session ORDER BY w.first_seq DESC LIMIT 1);
    RETURN NULL;
END $$;
CREATE TRIGGER loopruntime_note_writers AFTER INSERT ON loopruntime_records
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION loopruntime_note_writers();
"""

# Leases and the inbox (journal.store): added to a journal by the first
# process that knows them; they change no record, so the version stays.
_CREATE_HOST_TABLES = """
CREATE TABLE IF NOT EXISTS loopruntime_leases (
    session text PRIMARY KEY,
    owner text,
    expires_at bigint NOT NULL DEFAULT 0,
    definition text
);
CREATE INDEX IF NOT EXISTS loopruntime_leases_held
    ON loopruntime_leases (expires_at) WHERE owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS loopruntime_inbox (
    session text NOT NULL,
    number bigint NOT NULL,
    key text NOT NULL,
    body bytea NOT NULL,
    created_at bigint NOT NULL,
    consumed_at bigint,
    outcome bytea,
    PRIMARY KEY (session, number),
    UNIQUE (session, key)
);
CREATE INDEX IF NOT EXISTS loopruntime_inbox_pending
    ON loopruntime_inbox (session, number) WHERE consumed_at IS NULL;
CREATE TABLE IF NOT EXISTS loopruntime_hosts (
    host text PRIMARY KEY,
    token text NOT NULL,
    definitions text[] NOT NULL,
    expires_at bigint NOT NULL
);
"""

_CREATE = f"""
CREATE TABLE loopruntime_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE loopruntime_sessions (
    session text PRIMARY KEY,
    incarnation bigint NOT NULL,
    head bigint NOT NULL,
    digest bytea NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
-- No foreign key to loopruntime_sessions: only the writer inserts, and only
-- for a session row it holds locked, so the key check would be pure cost.
CREATE TABLE loopruntime_records (
    session text NOT NULL,
    seq bigint NOT NULL,
    id text NOT NULL,
    loop text NOT NULL,
    at bigint NOT NULL,
    cause text,
    digest bytea NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (session, seq),
    UNIQUE (session, id)
);
{_CREATE_CHECKPOINTS}{_CREATE_CHAIN_RULE}{_CREATE_BLOBS}{_CREATE_WRITERS}{_CREATE_HOST_TABLES}"""

_UPGRADES = {
    1: _CREATE_CHECKPOINTS,
    2: f"""{_CREATE_CHAIN_RULE}
-- Appends of older processes wait here (their row locks conflict), so the
-- heads read next are final: every record stored now keeps the body-only
-- rule, the next one of each session is chained whole.
LOCK TABLE loopruntime_sessions IN EXCLUSIVE MODE;
INSERT INTO loopruntime_chain_rule (session, whole_from)
SELECT session, head + 1 FROM loopruntime_sessions WHERE head > 0;
-- Fence every writer: a process of the older version still running would go
-- on chaining bodies only, so its next append must fail (FencedError) rather
-- than write records that do not verify.
UPDATE loopruntime_sessions SET incarnation = incarnation + 1;
""",
    # No record written before refers to a blob: only the table is new.
    3: _CREATE_BLOBS,
    # Records written before stay unattributed: only the table is new.
    4: _CREATE_WRITERS,
}
"""The statements that take a schema from version ``key`` to ``key + 1``.
Version 1 could not write ``session.checkpoint`` records, so the index it
lacks starts empty and no record is read.  Version 2 chained the event bytes
alone; its records keep that rule (``loopruntime_chain_rule``).  Version 3
stored every record whole; version 4 adds ``loopruntime_blobs``; version 5
``loopruntime_writers``."""

# -- connections and errors -----------------------------------------------------


def describe(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "the PostgreSQL server (unparsable URL)"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    user = str(params.get("user") or "")
    db = params.get("dbname") or user or "?"
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"


def connect(url: str) -> psycopg.Connection[Any]:
    """Blocking: open one autocommit connection (run it in a worker thread).

    The writer, the one that needs transactions, makes its fast path's one
    statement its own transaction, and sends BEGIN and COMMIT itself on the
    checked path, so that transaction is one pipeline (``writer.Writer``).
    """
    params = conninfo_to_dict(url)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in params:
        # libpq waits forever for an unroutable host by default.
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    if "application_name" not in params:
        extra["application_name"] = "loopruntime"
    # Always UTF-8 on the wire, whatever the URL or PGCLIENTENCODING say: the
    # journal holds Python text, the writer encodes its arrays itself, and
    # with SQL_ASCII psycopg would read text back as bytes.  The server
    # converts to the database's encoding and refuses what it cannot hold.
    extra["client_encoding"] = "UTF8"
    return psycopg.connect(url, autocommit=True, **extra)


def lost(conn: psycopg.Connection[Any] | None) -> bool:
    """Whether an error left ``conn`` unusable (or there never was one)."""
    return conn is None or conn.closed or conn.broken


def translate(
    where: str, doing: str, exc: psycopg.Error, *, lost: bool, hint: str = ""
) -> JournalError:
    """The one place psycopg errors become journal errors.

    ``lost``: the connection could not be opened or broke, which makes the
    server unavailable.  Otherwise the server refused a statement (a limit,
    a permission, ...), which is a plain ``JournalError``.
    """
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    err: JournalError
    if lost:
        err = JournalUnavailableError(
            f"{doing} failed: cannot reach PostgreSQL at {where} ({reason}); check that the "
            f"server is running and the URL is right{hint}"
        )
    else:
        err = JournalError(f"{doing} failed on PostgreSQL at {where}: {reason}{hint}")
    err.__cause__ = exc
    return err


def discard(conn: psycopg.Connection[Any] | None) -> None:
    """Blocking: close a connection that may already be broken."""
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            # Closing a broken connection can fail; it is gone either way.
            pass


def check_pg_text(what: str, value: str | None) -> None:
    if value is None:
        return
    if "\x00" in value:
        raise ValueError(
            f"{what} {value!r} contains a NUL character, which PostgreSQL text cannot "
            "store; remove it"
        )
    check_text(what, value)


def channel(schema: str, session: str) -> str:
    """The NOTIFY channel of one session (an identifier, so at most 63 bytes)."""
    key = hashlib.blake2b(f"{schema}\x00{session}".encode(), digest_size=12).hexdigest()
    return f"loopruntime_{key}"


def inbox_channel(schema: str) -> str:
    """The NOTIFY channel of every inbox of a journal: a put or a hand-over
    notifies it with the session's id and live holder
    (``inbox.wakeup_payload``; ``Journal.inbox_wakeups``)."""
    key = hashlib.blake2b(f"{schema}\x00inbox".encode(), digest_size=12).hexdigest()
    return f"loopruntime_inbox_{key}"


# -- schema -----------------------------------------------------------------------


def _prepare_schema(conn: psycopg.Connection[Any], where: str) -> str:
    """Blocking: create the tables when absent, check the version; return the schema.

    Upgrades a version-1 schema to the current one.  Runs in one transaction
    under an advisory lock, so processes opening a fresh (or version-1)
    database at the same time create (or upgrade) the tables once, and a
    failed upgrade leaves the database as it was.
    """
    with conn.transaction():
        row = conn.execute("SELECT current_schema()").fetchone()
        schema = row[0] if row else None
        if schema is None:
            raise JournalError(
                f"{where}: no schema of the search_path exists, so there is nowhere to put "
                "the journal tables; create the schema or fix search_path in the URL"
            )
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s || %s))", (_SCHEMA_LOCK, schema))
        tables = conn.execute(
            "SELECT to_regclass('loopruntime_meta'), to_regclass('loopruntime_sessions'), "
            "to_regclass('loopruntime_records'), to_regclass('loopruntime_checkpoints'), "
            "to_regclass('loopruntime_chain_rule'), to_regclass('loopruntime_blobs')"
        ).fetchone()
        assert tables is not None
        meta, sessions, records, checkpoints, chain_rule, blobs = tables
        if meta is None:
            if any(t is not None for t in (sessions, records, checkpoints, chain_rule, blobs)):
                raise NotAJournalError(
                    f"{where} schema {schema} has loopruntime tables but no loopruntime_meta "
                    "table; it is not a journal this code wrote: use another schema"
                )
            conn.execute(_CREATE)
            conn.execute(
                "INSERT INTO loopruntime_meta (key, value) VALUES ('schema_version', %s)",
                (str(SCHEMA_VERSION),),
            )
            log.info("postgres_journal_created", where=where, schema=schema)
            return str(schema)
        version = conn.execute(
            "SELECT value FROM loopruntime_meta WHERE key = 'schema_version'"
        ).fetchone()
        if version is None or not version[0].isdigit():
            raise NotAJournalError(
                f"{where} schema {schema}: loopruntime_meta has no valid schema_version; "
                "it is not a journal this code wrote"
            )
        found = int(version[0])
        check_schema_version(found, where=f"{where} (schema {schema})")
        if found < SCHEMA_VERSION:
            for step in range(found, SCHEMA_VERSION):
                conn.execute(_UPGRADES[step])
            conn.execute(
                "UPDATE loopruntime_meta SET value = %s WHERE key = 'schema_version'",
                (str(SCHEMA_VERSION),),
            )
            log.info(
                "postgres_journal_upgraded",
                where=where,
                schema=schema,
                version=SCHEMA_VERSION,
                was=found,
            )
        elif checkpoints is None or chain_rule is None or blobs is None:
            missing = (
                "loopruntime_checkpoints"
                if checkpoints is None
                else "loopruntime_chain_rule"
                if chain_rule is None
                else "loopruntime_blobs"
            )
            raise NotAJournalError(
                f"{where} schema {schema}: journal schema {found} but no {missing} table; "
                "its tables were changed by hand: restore them or use another schema"
            )
        hosts = conn.execute(
            "SELECT to_regclass('loopruntime_leases'), to_regclass('loopruntime_inbox'),"
            " to_regclass('loopruntime_hosts')"
        ).fetchone()
        if hosts is None or None in hosts:
            conn.execute(_CREATE_HOST_TABLES)
        return str(schema)


def open_prepared(url: str, where: str) -> tuple[psycopg.Connection[Any], str]:
    """Blocking: connect and prepare the schema; return the connection and the schema."""
    try:
        conn = connect(url)
    except psycopg.Error as exc:
        raise translate(where, "connecting", exc, lost=True) from exc
    try:
        return conn, _prepare_schema(conn, where)
    except psycopg.Error as exc:
        broken = lost(conn)
        discard(conn)
        raise translate(where, "preparing the journal tables", exc, lost=broken) from exc
    except BaseException:
        discard(conn)
        raise


async def init_schema(url: str) -> None:
    """Create the journal tables at ``url`` if absent and check their version.

    Idempotent.  Raises ``JournalUnavailableError`` when the server cannot be
    reached and ``JournalSchemaError`` when the database holds a newer schema.
    """
    conn, _ = await trio.to_thread.run_sync(open_prepared, url, describe(url))
    await trio.to_thread.run_sync(discard, conn)
