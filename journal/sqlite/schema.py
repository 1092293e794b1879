"""The SQLite file: connections, the schema, its upgrades, and sqlite3's errors.

Every ``sqlite3`` failure that is not a journal rule becomes a
``JournalError`` through ``unavailable``, the one translation.  Opening
creates the file (mode 0600) and the schema when the file is empty, upgrades
an older schema in one transaction, and refuses a newer one; the layout is
described in ``docs/journal.md``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Literal

from ..codec import SCHEMA_VERSION, check_schema_version
from ..errors import JournalError, JournalUnavailableError, NotAJournalError

Access = Literal["write", "read", "immutable"]
"""How a connection may use the journal file (``connect``)."""

__all__ = [
    "BUSY_TIMEOUT_MS",
    "check_existing_file",
    "connect",
    "damaged",
    "host_table_stand_ins",
    "prepare",
    "unavailable",
]

_FORMAT = "loopruntime-journal"

# The index of session.checkpoint records (schema version 2).  WITHOUT ROWID:
# the primary key is the whole row.
_CHECKPOINTS_TABLE = (
    "CREATE TABLE checkpoints ("
    " session TEXT NOT NULL,"
    " seq INTEGER NOT NULL,"
    " PRIMARY KEY (session, seq)) WITHOUT ROWID"
)

# The sessions whose first records were chained by the body-only rule of
# schema 2 (codec.chain_body): from seq ``whole_from`` on, the whole record is
# chained.  A session without a row was chained whole from seq 1.
_CHAIN_RULE_TABLE = (
    "CREATE TABLE chain_rule ( session TEXT PRIMARY KEY, whole_from INTEGER NOT NULL) WITHOUT ROWID"
)

# Large units stored once by digest (journal.blobs; schema version 4).  A
# rowid table: blobs are large, which WITHOUT ROWID tables store badly.
_BLOBS_TABLE = "CREATE TABLE blobs ( digest BLOB PRIMARY KEY, body BLOB NOT NULL)"

# Who appended (``Journal.writers``; schema version 5): a row where a lease
# other than the last span's first appended to a session, so a row per
# writer change rather than a column per record.  WITHOUT ROWID: the key is
# nearly the whole row.
_WRITERS_TABLE = (
    "CREATE TABLE writers ("
    " session TEXT NOT NULL,"
    " first_seq INTEGER NOT NULL,"
    " incarnation INTEGER NOT NULL,"
    " owner TEXT,"
    " PRIMARY KEY (session, first_seq)) WITHOUT ROWID"
)

# Leases and the inbox (journal.store): tables of their own, added to a
# journal by the first writer that knows them (``_add_host_tables``).  They
# change no record, so the schema version stays; older code ignores them.
_HOST_TABLES = (
    "CREATE TABLE IF NOT EXISTS leases ("
    " session TEXT PRIMARY KEY,"
    " owner TEXT,"
    " expires_at INTEGER NOT NULL DEFAULT 0,"
    " definition TEXT) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS leases_held ON leases (expires_at) WHERE owner IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS inbox ("
    " session TEXT NOT NULL,"
    " number INTEGER NOT NULL,"
    " key TEXT NOT NULL,"
    " body BLOB NOT NULL,"
    " created_at INTEGER NOT NULL,"
    " consumed_at INTEGER,"
    " outcome BLOB,"
    " PRIMARY KEY (session, number))",
    "CREATE UNIQUE INDEX IF NOT EXISTS inbox_by_key ON inbox (session, key)",
    "CREATE INDEX IF NOT EXISTS inbox_pending ON inbox (session, number) WHERE consumed_at IS NULL",
    # Registered hosts (``Journal.register_host``); ``definitions`` is JSON.
    "CREATE TABLE IF NOT EXISTS hosts ("
    " host TEXT PRIMARY KEY,"
    " token TEXT NOT NULL,"
    " definitions TEXT NOT NULL,"
    " expires_at INTEGER NOT NULL) WITHOUT ROWID",
)

_SCHEMA = (
    "CREATE TABLE journal_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # A rowid table: ORDER BY rowid lists sessions in creation order.
    "CREATE TABLE sessions ("
    " session TEXT NOT NULL UNIQUE,"
    " incarnation INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL)",
    # A rowid table rather than WITHOUT ROWID: bodies (tool results, messages)
    # are often kilobytes, which WITHOUT ROWID tables store badly.
    "CREATE TABLE records ("
    " session TEXT NOT NULL,"
    " seq INTEGER NOT NULL,"
    " id TEXT NOT NULL,"
    " loop TEXT NOT NULL,"
    " at INTEGER NOT NULL,"
    " cause TEXT,"
    " digest BLOB NOT NULL,"
    " body BLOB NOT NULL,"
    " PRIMARY KEY (session, seq))",
    "CREATE UNIQUE INDEX records_by_id ON records (session, id)",
    _CHECKPOINTS_TABLE,
    _CHAIN_RULE_TABLE,
    _BLOBS_TABLE,
    _WRITERS_TABLE,
    *_HOST_TABLES,
)

_UPGRADES: dict[int, tuple[str, ...]] = {
    1: (_CHECKPOINTS_TABLE,),
    2: (
        _CHAIN_RULE_TABLE,
        # Every record stored now keeps the body-only rule; the next one of
        # each session is chained whole.
        "INSERT INTO chain_rule (session, whole_from)"
        " SELECT session, max(seq) + 1 FROM records GROUP BY session",
        # Fence every writer: a process of the older version that still has
        # the file open would go on chaining bodies only, so its next append
        # must fail (FencedError) rather than write records that do not verify.
        "UPDATE sessions SET incarnation = incarnation + 1",
    ),
    # Records written before hold no references: only the table is new.
    3: (_BLOBS_TABLE,),
    # Records written before stay unattributed: only the table is new.
    4: (_WRITERS_TABLE,),
}
"""The statements that take a file from schema version ``key`` to ``key + 1``."""
_WAL_CHECKPOINT_PAGES = 4000
"""WAL pages after which a commit copies the WAL into the database (SQLite's
default is 1000).  That checkpoint runs inside the commit that crosses the
line, syncs the database file, and copies each page once however often it
was rewritten: with 4000 (a WAL of up to 16 MiB while open) a long agent
loop pays for a quarter as many of them, which makes a long turn's late
steps cheaper.  The checkpoint stays in the commit rather than in a thread of
its own: running beside the writer, such a thread never catches up, so the
WAL is never reset and grows without bound (``benchmarks/README.md`` has the
figures)."""
BUSY_TIMEOUT_MS = 10_000
"""How long a connection waits for another process's lock before failing."""


def damaged(exc: sqlite3.Error) -> bool:
    """Whether SQLite found the file damaged (``SQLITE_CORRUPT``: a page it cannot parse)."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CORRUPT


def unavailable(exc: sqlite3.Error, path: str, doing: str) -> JournalError:
    """The one translation of a sqlite3 failure that is not a journal rule.

    Readers translate page damage met while reading records themselves, to a
    ``JournalCorruptError`` naming the first record they could not read."""
    if damaged(exc):
        # Not "unavailable": trying again reads the same damaged page.
        return JournalError(
            f"sqlite journal {path}: {doing} failed: the file is damaged ({exc}); "
            "`loopruntime replay SESSION --check` runs SQLite's integrity check and names "
            "the damaged tables; restore the file from a backup"
        )
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_FULL:
        return JournalUnavailableError(
            f"sqlite journal {path}: {doing} failed: the disk is full (or the file system "
            "refused to grow the file); free some space and try again"
        )
    if isinstance(exc, sqlite3.DataError):
        # SQLITE_TOOBIG, the one failure sqlite3 reports as DataError: retrying
        # the same write can only fail again.
        return JournalError(
            f"sqlite journal {path}: {doing} failed: {exc} (a string or blob, or a "
            "whole record, is longer than SQLite's length limit); store less in one event"
        )
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return JournalUnavailableError(
            f"sqlite journal {path}: {doing} failed because another process held the "
            f"database lock for longer than {BUSY_TIMEOUT_MS} ms ({exc}); retry later"
        )
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return NotAJournalError(
            f"{path} is not a SQLite database ({exc}); point the journal URL at a "
            "loopruntime journal file or at a path where a new one may be created"
        )
    return JournalUnavailableError(f"sqlite journal {path}: {doing} failed: {exc}")


def connect(path: str, synchronous: str, access: Access = "write") -> sqlite3.Connection:
    """A connection to the journal file: ``write``, ``read`` (SQLite's read-only
    mode: it never writes the file, but needs the ``-shm`` file beside it), or
    ``immutable`` (for a file on a read-only file system or in a directory this
    process cannot write, where no writer can be at work either)."""
    # isolation_level=None: this module issues BEGIN/COMMIT itself.
    # check_same_thread=False: reader connections move between trio's worker
    # threads (never used by two threads at once: the pool hands each out once).
    if access == "write":
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    else:
        mode = "ro&immutable=1" if access == "immutable" else "ro"
        uri = f"{Path(path).resolve().as_uri()}?mode={mode}"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


def _create_file(path: str) -> None:
    """Create a new journal at ``path`` whole, or not at all.

    The file is built under a temporary name beside ``path`` (mode 0600: SQLite
    would use 0644, and gives the ``-wal`` and ``-shm`` files the main file's
    mode), schema and WAL mode included, then linked into place.  So no process
    ever opens a half-made journal, and a failure (a full disk) leaves nothing
    behind.  When another process links its journal first, that one is used.
    """
    if os.path.lexists(path):
        return
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, temp = tempfile.mkstemp(
            prefix=f".{os.path.basename(path)}.", suffix=".new", dir=directory
        )
    except OSError as exc:
        raise JournalUnavailableError(
            f"cannot create journal file {path}: {exc.strerror}; check that the "
            "directory exists and is writable"
        ) from exc
    os.close(fd)
    try:
        conn = sqlite3.connect(temp, isolation_level=None)
        try:
            _create_schema(conn)
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        _link_into_place(temp, path)
    except sqlite3.Error as exc:
        raise unavailable(exc, path, "creating the journal") from exc
    except OSError as exc:
        raise JournalUnavailableError(
            f"cannot create journal file {path}: {exc.strerror or exc}"
        ) from exc
    finally:
        for leftover in (temp, f"{temp}-wal", f"{temp}-shm", f"{temp}-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


def _link_into_place(temp: str, path: str) -> None:
    try:
        os.link(temp, path)
    except FileExistsError:
        return  # another process created the journal first: it is the one
    except OSError:
        # A file system without hard links: claim the name, then move the
        # finished file over the claim (an empty file for that moment, which
        # every opener refuses rather than takes over).
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            return
        os.replace(temp, path)


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO journal_meta (key, value) VALUES (?, ?)",
            [("format", _FORMAT), ("schema_version", str(SCHEMA_VERSION))],
        )
        conn.execute("COMMIT")
    except BaseException:
        # A failed COMMIT (a full disk) may have ended the transaction already.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def prepare(path: str, synchronous: str) -> sqlite3.Connection:
    """Open (creating if empty) the journal at ``path``; return the writer connection."""
    _create_file(path)
    try:
        conn = connect(path, synchronous)
    except sqlite3.Error as exc:
        raise unavailable(exc, path, "opening") from exc
    try:
        _check_or_create_schema(conn, path)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise JournalUnavailableError(
                f"sqlite journal {path}: the file system refused WAL mode (got {mode!r}); "
                "put the journal on a local disk"
            )
        conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_CHECKPOINT_PAGES}")
    except JournalError:
        conn.close()
        raise
    except sqlite3.Error as exc:
        conn.close()
        raise unavailable(exc, path, "opening") from exc
    return conn


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _check_or_create_schema(conn: sqlite3.Connection, path: str) -> None:
    tables = _tables(conn)
    if not tables:
        # A journal is created whole (``_create_file``): an existing empty file
        # or database is someone else's, not a journal to take over.
        raise NotAJournalError(
            f"{path} is empty: it is not a loopruntime journal; remove it, or choose "
            "another path for a new journal"
        )
    if "journal_meta" not in tables:
        raise NotAJournalError(
            f"{path} is a SQLite database but not a loopruntime journal (it has tables "
            f"{sorted(tables)} and no journal_meta); choose another file"
        )
    meta = dict(conn.execute("SELECT key, value FROM journal_meta").fetchall())
    if meta.get("format") != _FORMAT:
        raise NotAJournalError(
            f"{path} has a journal_meta table but is not a loopruntime journal "
            f"(format {meta.get('format')!r}); choose another file"
        )
    version = _schema_version(meta)
    check_schema_version(version, where=f"journal {path}")
    if version < SCHEMA_VERSION:
        _upgrade(conn)
    if not {"leases", "inbox", "hosts"} <= tables:
        _add_host_tables(conn)


def _add_host_tables(conn: sqlite3.Connection) -> None:
    """Add the lease and inbox tables to a journal made before them (one
    transaction; safe against another process doing the same)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _HOST_TABLES:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _schema_version(meta: dict[str, str]) -> int:
    try:
        return int(meta.get("schema_version", "0"))
    except ValueError:
        return 0


def _upgrade(conn: sqlite3.Connection) -> None:
    """Bring an older journal to ``SCHEMA_VERSION`` in one transaction.

    Atomic: a crash or a failure leaves the file at its old version.  Safe
    against another process upgrading the same file at the same moment (the
    version is read again under the write lock).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        meta = dict(conn.execute("SELECT key, value FROM journal_meta").fetchall())
        version = _schema_version(meta)
        while version < SCHEMA_VERSION:
            for statement in _UPGRADES[version]:
                conn.execute(statement)
            version += 1
        conn.execute(
            "UPDATE journal_meta SET value = ? WHERE key = 'schema_version'", (str(version),)
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def check_existing_file(path: str) -> Access:
    """Refuse, without creating or writing anything, a file that is not a journal;
    return how a reader may open it.

    ``NotAJournalError`` saying why: the file is missing, not a regular file,
    empty, not a SQLite database, or a database without the journal's
    ``format`` mark.  Reads through a read-only connection: ``read`` when one
    opens, else ``immutable`` when the file's directory cannot be written (a
    read-only file system or directory, where SQLite cannot make the ``-shm``
    file a read-only connection needs, and no writer can be at work either).
    """
    p = Path(path)
    if not p.exists():
        raise NotAJournalError(f"there is no journal at {path}: the file does not exist")
    if not p.is_file():
        raise NotAJournalError(f"{path} is not a journal file")
    if p.stat().st_size == 0:
        raise NotAJournalError(f"{path} is empty: it is not a loopruntime journal")
    access: Access = "read"
    try:
        meta = _read_meta(path, access)
    except sqlite3.OperationalError as exc:
        if os.access(p.resolve().parent, os.W_OK):
            raise _not_readable(path, exc) from exc
        access = "immutable"
        try:
            meta = _read_meta(path, access)
        except sqlite3.Error as again:
            raise _not_readable(path, again) from again
    except sqlite3.Error as exc:
        raise _not_readable(path, exc) from exc
    if meta.get("format") != _FORMAT:
        raise NotAJournalError(f"{path} is not a loopruntime journal")
    return access


def check_readable_version(path: str, access: Access) -> int:
    """The schema version of a journal a reader that must not write opens;
    ``JournalSchemaError`` for a newer one.  An older one is read as it is,
    through ``reader_stand_ins`` (only a writer upgrades a file)."""
    version = _schema_version(_read_meta(path, access))
    check_schema_version(version, where=f"journal {path}")
    return version


def host_table_stand_ins(path: str, access: Access) -> tuple[str, ...]:
    """Stand-ins (empty, per connection) for the lease and inbox tables of a
    journal no writer that knows them has opened yet, for a read-only reader."""
    conn = connect(path, "NORMAL", access)
    try:
        tables = _tables(conn)
    finally:
        conn.close()
    return tuple(
        statement.replace("CREATE TABLE IF NOT EXISTS", "CREATE TEMP TABLE", 1)
        for statement in _HOST_TABLES
        if statement.startswith("CREATE TABLE") and statement.split()[5] not in tables
    )


def reader_stand_ins(version: int) -> tuple[str, ...]:
    """Statements that let a read-only connection read a journal of an older
    schema version: temporary stand-ins (per connection, in memory, never in
    the file) for the tables its upgrade would add, holding what the upgrade
    would put there."""
    statements: list[str] = []
    if version < 2:
        statements.append(_CHECKPOINTS_TABLE.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
    if version < 3:
        # Every record of such a file is chained by the body-only rule: the
        # whole-record rule starts past any seq.
        statements.append(
            "CREATE TEMP VIEW chain_rule AS"
            f" SELECT session, {2**63 - 1} AS whole_from FROM main.sessions"
        )
    if version < 4:
        # No record of such a file refers to a blob.
        statements.append(_BLOBS_TABLE.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
    if version < 5:
        # No record of such a file is attributed to a writer.
        statements.append(_WRITERS_TABLE.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
    return tuple(statements)


def _read_meta(path: str, access: Access) -> dict[str, str]:
    conn = connect(path, "NORMAL", access)
    try:
        return dict(conn.execute("SELECT key, value FROM journal_meta").fetchall())
    finally:
        conn.close()


def _not_readable(path: str, exc: sqlite3.Error) -> NotAJournalError:
    if "no such table" in str(exc) or "not a database" in str(exc):
        return NotAJournalError(f"{path} is not a loopruntime journal ({exc})")
    return NotAJournalError(
        f"{path} cannot be read as a loopruntime journal ({exc}); check that this user "
        "may read it and the directory it is in"
    )
