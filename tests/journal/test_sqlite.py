"""What only the SQLite backend promises: the file, its format, its options,
group commit, and readers in other processes."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from journal import (
    SCHEMA_VERSION,
    ConflictError,
    Draft,
    FencedError,
    JournalCorruptError,
    JournalError,
    JournalReadOnlyError,
    JournalSchemaError,
    NotAJournalError,
    Record,
    SessionLease,
    WriterSpan,
    check_existing_journal,
    open_journal,
)
from journal.codec import GENESIS, chain, chain_body, encode_event
from journal.events import Notice
from journal.sqlite import SQLiteJournal
from journal.sqlite import reading as sqlite_reading
from journal.sqlite import schema as sqlite_schema
from journal.sqlite.writer import Writer as _Writer
from tests.support.damage import damage_record, edit_record
from tests.support.old_journal import (
    to_version_1_sqlite,
    to_version_2_sqlite,
    to_version_4_sqlite,
)

from .contract import checkpoint, drafts, notice, read_all

REPO = Path(__file__).resolve().parents[2]


def url(path: Path, query: str = "") -> str:
    return f"sqlite:///{path}" + (f"?{query}" if query else "")


async def test_files_are_private_to_their_owner(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    old = os.umask(0o022)  # the usual umask, which would leave 0644
    try:
        async with open_journal(url(path)) as journal:
            lease = await journal.open_session("s")
            await journal.append(lease, drafts("x", 2), expected_seq=0)
            files = [tmp_path / n for n in os.listdir(tmp_path) if n.startswith("journal.db")]
            assert {p.name for p in files} >= {"journal.db", "journal.db-wal"}
            for p in files:
                assert stat.S_IMODE(p.stat().st_mode) == 0o600, p.name
    finally:
        os.umask(old)


async def test_a_plain_path_is_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "plain.db"
    async with open_journal(str(path)) as journal:
        assert isinstance(journal, SQLiteJournal)
        assert journal.path == str(path)
    assert path.exists()


async def test_an_existing_empty_file_is_refused_as_replay_refuses_it(tmp_path: Path) -> None:
    # A journal is created whole under its own mode (0600); an empty file someone
    # made (world-readable, say) is not taken over.
    path = tmp_path / "empty.db"
    path.touch(mode=0o644)
    with pytest.raises(NotAJournalError, match="is empty: it is not a loopruntime journal"):
        async with open_journal(url(path)):
            pass
    with pytest.raises(NotAJournalError, match="is empty: it is not a loopruntime journal"):
        await check_existing_journal(url(path))
    assert path.stat().st_size == 0 and path.stat().st_mode & 0o777 == 0o644


async def test_a_new_journal_appears_whole_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with open_journal(url(path)):
        assert (await trio.Path(path).stat()).st_mode & 0o777 == 0o600
    # Nothing of the temporary file it was built under is left beside it.
    left = [p.name for p in await trio.Path(tmp_path).iterdir()]
    assert [name for name in left if not name.startswith("new.db")] == []


async def test_a_journal_opened_read_only_refuses_writes_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with open_journal(url(path)) as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, [Draft(id="e1", loop="main", event=notice(1))], expected_seq=0)
    async with open_journal(url(path), readonly=True) as journal:
        assert [r.seq async for r in journal.read("s")] == [1]
        with pytest.raises(JournalReadOnlyError, match="opened read-only"):
            await journal.open_session("t")
        with pytest.raises(JournalReadOnlyError):
            more = [Draft(id="e2", loop="main", event=notice(2))]
            await journal.append(lease, more, expected_seq=1)
    async with open_journal(url(path)) as journal:
        assert [(i.session, i.head, i.incarnation) for i in await journal.sessions()] == [
            ("s", 1, lease.incarnation)
        ]
    missing = tmp_path / "missing.db"
    with pytest.raises(NotAJournalError, match="does not exist"):
        async with open_journal(url(missing), readonly=True):
            pass
    assert not await trio.Path(missing).exists()


async def test_random_bytes_are_not_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "noise.db"
    noise = bytes(range(256)) * 16
    path.write_bytes(noise)
    with pytest.raises(NotAJournalError, match="not a SQLite database"):
        async with open_journal(url(path)):
            pass
    assert path.read_bytes() == noise


async def test_another_applications_database_is_not_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.commit()
    conn.close()
    with pytest.raises(NotAJournalError, match="invoices"):
        async with open_journal(url(path)):
            pass
    # Refused without being touched: no tables added, not switched to WAL.
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"invoices"}
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()


async def test_a_meta_table_of_another_format_is_not_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE journal_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO journal_meta VALUES ('format', 'someone-elses')")
    conn.commit()
    conn.close()
    with pytest.raises(NotAJournalError, match="someone-elses"):
        async with open_journal(url(path)):
            pass


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    async with open_journal(url(path)) as journal:
        await journal.open_session("s")
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE journal_meta SET value = ? WHERE key = 'schema_version'",
        (str(SCHEMA_VERSION + 1),),
    )
    conn.commit()
    conn.close()
    with pytest.raises(JournalSchemaError, match=f"schema {SCHEMA_VERSION + 1}"):
        async with open_journal(url(path)):
            pass
    # Refused without being "upgraded" or downgraded.
    assert _raw_schema_version(path) == str(SCHEMA_VERSION + 1)


def _raw_schema_version(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT value FROM journal_meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.close()
    assert isinstance(row[0], str)
    return row[0]


def _raw_checkpoint_index(path: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(path)
    try:
        return [
            (row[0], row[1])
            for row in conn.execute("SELECT session, seq FROM checkpoints ORDER BY session, seq")
        ]
    finally:
        conn.close()


def _no_digests(records: list[Record]) -> list[Record]:
    return [msgspec.structs.replace(r, digest=b"") for r in records]


def _body_chain(records: list[Record]) -> list[bytes]:
    """The digests schema 2 gave these records: the event bytes alone, chained."""
    out, previous = [], GENESIS
    for r in records:
        previous = chain_body(previous, encode_event(r.event))
        out.append(previous)
    return out


def _whole_chain(records: list[Record], previous: bytes) -> list[bytes]:
    out = []
    for r in records:
        body = encode_event(r.event)
        previous = chain(previous, r.seq, r.id, r.session, r.loop, r.at, r.cause, body)
        out.append(previous)
    return out


def _raw_chain_rule(path: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(path)
    try:
        return [tuple(row) for row in conn.execute("SELECT * FROM chain_rule ORDER BY session")]
    finally:
        conn.close()


async def test_a_new_file_is_written_at_the_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with open_journal(url(path)):
        pass
    assert _raw_schema_version(path) == str(SCHEMA_VERSION)
    assert _raw_checkpoint_index(path) == []
    assert _raw_chain_rule(path) == []


async def test_a_version_1_file_is_upgraded_on_open(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    async with open_journal(url(path)) as journal:
        lease = await journal.open_session("s")
        written = await journal.append(lease, drafts("x", 3), expected_seq=0)
    to_version_1_sqlite(path)
    assert _raw_schema_version(path) == "1"
    async with open_journal(url(path)) as journal:
        old = await read_all(journal, "s")
        assert _no_digests(old) == _no_digests(written)
        assert await journal.checkpoints("s") == []
        lease = await journal.open_session("s", create=False)
        more = await journal.append(lease, [checkpoint(0), *drafts("y", 1)], expected_seq=3)
        assert await journal.checkpoints("s") == more[:1]
    assert _raw_schema_version(path) == str(SCHEMA_VERSION)
    assert _raw_checkpoint_index(path) == [("s", 4)]
    # Once upgraded, opening again changes nothing.
    async with open_journal(url(path)) as journal:
        assert await journal.checkpoints("s") == more[:1]
        assert await read_all(journal, "s") == old + more
    assert _raw_schema_version(path) == str(SCHEMA_VERSION)


async def test_a_version_4_file_gains_writers_from_its_next_append(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    async with open_journal(url(path)) as journal:
        lease = await journal.acquire("s", "host-a", ttl=60, create=True)
        written = await journal.append(lease, drafts("x", 2), expected_seq=0)
    to_version_4_sqlite(path)
    assert _raw_schema_version(path) == "4"
    # A reader that must not write reads it as it is: nothing attributed.
    async with open_journal(url(path), readonly=True) as journal:
        assert await journal.writers("s") == []
    assert _raw_schema_version(path) == "4"
    async with open_journal(url(path)) as journal:
        assert await read_all(journal, "s") == written
        assert await journal.writers("s") == []
        # The lease taken before the upgrade still writes: its span starts
        # at its first append after it.
        await journal.append(lease, drafts("y", 1), expected_seq=2)
        assert await journal.writers("s") == [
            WriterSpan(first_seq=3, incarnation=lease.incarnation, owner="host-a")
        ]
    assert _raw_schema_version(path) == str(SCHEMA_VERSION)


async def test_a_version_2_file_keeps_its_chain_and_chains_new_records_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v2.db"
    async with open_journal(url(path)) as journal:
        lease = await journal.open_session("s")
        written = await journal.append(
            lease, [*drafts("x", 2), checkpoint(0), *drafts("z", 1)], expected_seq=0
        )
        other = await journal.open_session("empty")
        incarnations = {i.session: i.incarnation for i in await journal.sessions()}
    to_version_2_sqlite(path)
    assert _raw_schema_version(path) == "2"
    async with open_journal(url(path)) as journal:
        # The records version 2 wrote read back, verified by its rule.
        old = await read_all(journal, "s")
        assert _no_digests(old) == _no_digests(written)
        assert [r.digest for r in old] == _body_chain(written)
        assert await journal.checkpoints("s") == [old[2]]
        # Upgrading fenced every lease taken before it (an older process's).
        assert {i.session: i.incarnation for i in await journal.sessions()} == {
            session: n + 1 for session, n in incarnations.items()
        }
        with pytest.raises(FencedError):
            await journal.append(lease, drafts("late", 1), expected_seq=4)
        lease = await journal.open_session("s", create=False)
        more = await journal.append(lease, [*drafts("y", 1), checkpoint(1, 3)], expected_seq=4)
        # New records are chained whole, from the last body-only digest on.
        assert [r.digest for r in more] == _whole_chain(more, old[-1].digest)
        assert await journal.checkpoints("s") == [old[2], more[1]]
        other = await journal.open_session("empty", create=False)
        fresh = await journal.append(other, drafts("e", 2), expected_seq=0)
        assert [r.digest for r in fresh] == _whole_chain(fresh, GENESIS)
        assert await read_all(journal, "s", after=2) == [*old[2:], *more]
    assert _raw_schema_version(path) == str(SCHEMA_VERSION)
    # The rule is remembered for the session that had records, and only for it.
    assert _raw_chain_rule(path) == [("s", 5)]
    async with open_journal(url(path)) as journal:
        assert await read_all(journal, "s") == old + more
        assert await read_all(journal, "empty") == fresh
        # An edited column of a new record is caught; of a body-only record it
        # cannot be (schema 2 never covered it), but its bytes still are.
        edit_record(journal, "s", 5, "loop", "elsewhere")
        with pytest.raises(JournalCorruptError) as caught:
            await read_all(journal, "s")
        assert caught.value.seq == 5
        damage_record(journal, "s", 1, encode_event(notice(9)))
        with pytest.raises(JournalCorruptError) as caught:
            await read_all(journal, "s")
        assert caught.value.seq == 1


async def test_a_failed_upgrade_leaves_the_file_at_its_version(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    async with open_journal(url(path)) as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, drafts("x", 2), expected_seq=0)
    to_version_1_sqlite(path)
    # Something in the way of the upgrade's last CREATE TABLE makes it fail halfway.
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIEW chain_rule AS SELECT 1")
    conn.commit()
    conn.close()
    with pytest.raises(JournalError, match="already exists"):
        async with open_journal(url(path)):
            pass
    assert _raw_schema_version(path) == "1"
    # The first step (1 to 2) is undone with it.
    conn = sqlite3.connect(path)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "checkpoints" not in tables


async def test_checkpoints_in_a_replayed_group_are_indexed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As test_a_constraint_in_a_group_is_replayed_without_failing_the_rest: the
    # group's fast insert (records and index) is rolled back and replayed
    # request by request; each checkpoint must end up indexed exactly once.
    replayed = []
    apply_slow = _Writer._apply_slow

    def counting(writer: _Writer, group: list[Any]) -> Any:
        replayed.append(len(group))
        return apply_slow(writer, group)

    monkeypatch.setattr(_Writer, "_apply_slow", counting)
    path = tmp_path / "j.db"
    async with open_journal(url(path)) as journal:
        bad = await journal.open_session("bad")
        stored = await journal.append(bad, [checkpoint(0)], expected_seq=0)
        leases = [await journal.open_session(f"s{i}") for i in range(5)]
        results: dict[str, object] = {}

        async def attempt(lease: SessionLease, batch: list[Draft], expected: int, key: str) -> None:
            results[key] = await journal.append(lease, batch, expected_seq=expected)

        async with trio.open_nursery() as nursery:
            for lease in leases:
                batch = [*drafts("g", 1), checkpoint(1), *drafts("h", 1)]
                nursery.start_soon(attempt, lease, batch, 0, lease.session)
            # An idempotent re-append of a checkpoint at the current head.
            nursery.start_soon(attempt, bad, [checkpoint(0)], 1, "retry")
        assert replayed, "the group was not replayed on the slow path"
        assert results["retry"] == stored
        assert await journal.checkpoints("bad") == stored
        for lease in leases:
            records = results[lease.session]
            assert isinstance(records, list)
            assert await journal.checkpoints(lease.session) == records[1:2]
    assert _raw_checkpoint_index(path) == [("bad", 1)] + [(f"s{i}", 2) for i in range(5)]


async def test_an_index_entry_that_is_not_a_checkpoint_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with open_journal(url(path)) as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, [*drafts("x", 2), checkpoint(0)], expected_seq=0)
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO checkpoints (session, seq) VALUES ('s', 2)")
        conn.commit()
        conn.close()
        with pytest.raises(JournalCorruptError) as caught:
            await journal.checkpoints("s")
        assert (caught.value.session, caught.value.seq) == ("s", 2)


def _writer_synchronous(journal: SQLiteJournal) -> int:
    # The writer thread is idle between appends, so its connection may be asked.
    value = journal._writer.conn.execute("PRAGMA synchronous").fetchone()[0]
    assert isinstance(value, int)
    return value


@pytest.mark.parametrize(("query", "expected"), [("", 1), ("synchronous=FULL", 2)])
async def test_synchronous_is_normal_unless_full_is_asked(
    tmp_path: Path, query: str, expected: int
) -> None:
    async with open_journal(url(tmp_path / "j.db", query)) as journal:
        assert isinstance(journal, SQLiteJournal)
        lease = await journal.open_session("s")
        await journal.append(lease, drafts("x", 1), expected_seq=0)
        assert journal.synchronous == {1: "NORMAL", 2: "FULL"}[expected]
        assert _writer_synchronous(journal) == expected


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("sqlite:///{dir}/j.db?synchronous=OFF", "synchronous must be NORMAL or FULL"),
        ("sqlite:///{dir}/j.db?fast=yes", "unknown option 'fast'"),
        ("sqlite:///{dir}/j.db?poll=0", "poll must be a positive number"),
        ("sqlite:///:memory:", "does not name a database file"),
        ("sqlite://host/j.db", "names a host"),
    ],
)
async def test_malformed_urls_say_what_is_wrong(tmp_path: Path, bad: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        async with open_journal(bad.format(dir=tmp_path)):
            pass


async def test_appends_waiting_together_share_one_transaction(tmp_path: Path) -> None:
    async with open_journal(url(tmp_path / "j.db")) as journal:
        assert isinstance(journal, SQLiteJournal)
        leases = [await journal.open_session(f"s{i}") for i in range(50)]
        before = journal.statistics()

        async def append(lease: SessionLease) -> None:
            await journal.append(lease, drafts("x", 2), expected_seq=0)

        async with trio.open_nursery() as nursery:
            for lease in leases:
                nursery.start_soon(append, lease)
        after = journal.statistics()
        assert after.requests - before.requests == 50
        # Started in the same scheduling round: after a quiet spell the first
        # goes alone (lowest latency), every other one joins a single group.
        assert after.transactions - before.transactions <= 2
        assert after.largest_group >= 49
        for lease in leases:
            assert await journal.head(lease.session) == 2


async def test_each_round_of_appends_is_handed_over_by_its_first_appender(
    tmp_path: Path,
) -> None:
    # Ten appenders, five appends each, released together by each commit: a
    # round's first appender yields once and hands the round over itself, never
    # through a callback to the trio thread (trio's entry queue, woken through
    # a socket), and the round still goes in one transaction.
    class CountingToken:
        def __init__(self, inner: trio.lowlevel.TrioToken) -> None:
            self.inner, self.calls = inner, 0

        def run_sync_soon(self, *args: Any) -> None:
            self.calls += 1
            self.inner.run_sync_soon(*args)

    async with open_journal(url(tmp_path / "j.db")) as journal:
        assert isinstance(journal, SQLiteJournal)
        leases = [await journal.open_session(f"s{i}") for i in range(10)]
        token = CountingToken(journal._token)
        journal._token = token  # type: ignore[assignment]
        before = journal.statistics()

        async def appender(lease: SessionLease) -> None:
            for i in range(5):
                await journal.append(lease, drafts("x", 1, start=i), expected_seq=i)

        async with trio.open_nursery() as nursery:
            for lease in leases:
                nursery.start_soon(appender, lease)
        after = journal.statistics()
    assert token.calls == 0
    assert after.requests - before.requests == 50
    # After a quiet spell the first append goes alone; then the rounds.
    assert after.transactions - before.transactions <= 2 * 5 + 1
    assert after.largest_group >= 9


async def test_a_constraint_in_a_group_is_replayed_without_failing_the_rest(
    tmp_path: Path,
) -> None:
    # The fast path inserts a whole group at once; an id that is already
    # stored trips the unique index and the group is replayed request by
    # request.  The good appends in it must still commit, once.
    async with open_journal(url(tmp_path / "j.db")) as journal:
        assert isinstance(journal, SQLiteJournal)
        bad = await journal.open_session("bad")
        stored = await journal.append(bad, drafts("x", 1), expected_seq=0)
        leases = [await journal.open_session(f"s{i}") for i in range(5)]
        results: dict[str, object] = {}

        async def attempt(lease: SessionLease, batch: list[Draft], expected: int, key: str) -> None:
            try:
                results[key] = await journal.append(lease, batch, expected_seq=expected)
            except Exception as exc:
                results[key] = exc

        async with trio.open_nursery() as nursery:
            for lease in leases:
                nursery.start_soon(attempt, lease, drafts("g", 3), 0, lease.session)
            # Same id, same content, current head: an idempotent re-append.
            nursery.start_soon(attempt, bad, drafts("x", 1), 1, "retry")
        assert results["retry"] == stored
        for lease in leases:
            records = results[lease.session]
            assert isinstance(records, list)
            assert await read_all(journal, lease.session) == records
        assert await journal.head("bad") == 1


async def test_a_lost_race_with_another_connection_is_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with open_journal(url(path)) as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, drafts("x", 1), expected_seq=0)
        # Another writer (same incarnation, as after a lease was copied) commits
        # seq 2 behind this journal's back.
        async with open_journal(url(path)) as other:
            await other.append(lease, drafts("y", 1), expected_seq=1)
        with pytest.raises(ConflictError) as caught:
            await journal.append(lease, drafts("z", 1), expected_seq=1)
        assert (caught.value.expected, caught.value.actual) == (1, 2)
        assert [r.id for r in await read_all(journal, "s")] == ["x-0", "y-0"]


async def test_reads_span_many_batches(tmp_path: Path) -> None:
    async with open_journal(url(tmp_path / "j.db")) as journal:
        lease = await journal.open_session("s")
        n = 10_000  # more than two read batches
        for start in range(0, n, 2_500):
            await journal.append(lease, drafts("x", 2_500, start=start), expected_seq=start)
        records = await read_all(journal, "s")
        assert [r.seq for r in records] == list(range(1, n + 1))
        assert [r.seq for r in await read_all(journal, "s", after=4_999)] == list(
            range(5_000, n + 1)
        )


async def test_damage_deep_in_a_long_session_is_found(tmp_path: Path) -> None:
    async with open_journal(url(tmp_path / "j.db")) as journal:
        assert isinstance(journal, SQLiteJournal)
        lease = await journal.open_session("s")
        await journal.append(lease, drafts("x", 6_000), expected_seq=0)
        damage_record(journal, "s", 5_000, encode_event(notice(1, "forged")))
        seen = 0
        with pytest.raises(Exception) as caught:
            async for record in journal.read("s"):
                seen = record.seq
        assert seen == 4_999
        assert getattr(caught.value, "seq", None) == 5_000


_CHILD = """
import sys, trio
from journal import Draft, open_journal
from journal.events import Notice

async def main(url, session, n):
    async with open_journal(url) as journal:
        lease = await journal.open_session(session)
        for i in range(n):
            draft = Draft(id=f"child-{i}", loop="child", event=Notice(code="child", text=str(i)))
            await journal.append(lease, [draft], expected_seq=lease.head + i)

trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""


@pytest.mark.slow
async def test_a_tail_sees_appends_from_another_process(tmp_path: Path) -> None:
    journal_url = url(tmp_path / "j.db", "poll=0.05")
    async with open_journal(journal_url) as journal:
        lease = await journal.open_session("shared")
        await journal.append(lease, drafts("x", 1), expected_seq=0)
        send, receive = trio.open_memory_channel[Record](100)

        async def follow() -> None:
            async with send:
                async for record in journal.tail("shared"):
                    await send.send(record)

        # A hang guard only (a child Python process takes real time to start).
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                assert (await receive.receive()).id == "x-0"
                env = {**os.environ, "PYTHONPATH": str(REPO)}
                await trio.run_process(
                    [sys.executable, "-c", _CHILD, journal_url, "shared", "3"], env=env
                )
                got = [await receive.receive() for _ in range(3)]
                nursery.cancel_scope.cancel()
        assert [(r.seq, r.id, r.loop) for r in got] == [
            (2, "child-0", "child"),
            (3, "child-1", "child"),
            (4, "child-2", "child"),
        ]
        assert got == (await read_all(journal, "shared"))[1:]


async def _open_together(journal: SQLiteJournal, sessions: list[str]) -> list[SessionLease]:
    """Open ``sessions`` at the same moment.

    The first goes to the writer alone and the rest as one group, after which
    the journal groups again: appends started together next share one
    transaction (each test checks that it did).
    """
    leases: dict[str, SessionLease] = {}

    async def open_one(session: str) -> None:
        leases[session] = await journal.open_session(session)

    async with trio.open_nursery() as nursery:
        for session in sessions:
            nursery.start_soon(open_one, session)
    return [leases[s] for s in sessions]


_LIMIT = 20_000
"""The largest string or blob (and row) the connections of the next test store."""


@pytest.mark.parametrize("what", ["body", "session id", "id at a stale head", "replayed group"])
async def test_a_value_over_sqlites_length_limit_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    # SQLite refuses a string, blob or row longer than its length limit
    # (1 GB by default; lowered here so the test stays small).  The refusal
    # comes from the insert or a lookup of one request; the appends of other
    # sessions committing in the same group must not share its fate.
    connect = sqlite_schema.connect

    def limited(
        path: str, synchronous: str, access: sqlite_schema.Access = "write"
    ) -> sqlite3.Connection:
        conn = connect(path, synchronous, access)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _LIMIT)
        return conn

    monkeypatch.setattr(sqlite_schema, "connect", limited)
    monkeypatch.setattr(sqlite_reading, "connect", limited)
    huge = "h" * (2 * _LIMIT)
    async with open_journal(url(tmp_path / "j.db")) as journal:
        assert isinstance(journal, SQLiteJournal)
        lease = await journal.open_session("s")
        first = await journal.append(lease, drafts("x", 1), expected_seq=0)
        others = await _open_together(journal, [f"o{i}" for i in range(4)])
        results: dict[str, list[Record]] = {}

        async def innocent(other: SessionLease) -> None:
            results[other.session] = await journal.append(other, drafts("i", 2), expected_seq=0)

        async def refused() -> None:
            with pytest.raises(JournalError, match="too big") as caught:
                if what == "session id":
                    await journal.open_session(huge)
                elif what == "id at a stale head":
                    draft = Draft(id=huge, loop="main", event=notice(1))
                    await journal.append(lease, [draft], expected_seq=0)
                else:
                    big = Draft(id="big", loop="main", event=Notice(code="big", text=huge))
                    await journal.append(lease, [big], expected_seq=1)
            assert len(str(caught.value)) < 1000  # names the session, not all of it

        async def retried() -> None:
            # An idempotent re-append at the head trips the unique index: the
            # group is replayed request by request.
            assert await journal.append(lease, drafts("x", 1), expected_seq=1) == first

        before = journal.statistics().transactions
        async with trio.open_nursery() as nursery:
            for other in others:
                nursery.start_soon(innocent, other)
            nursery.start_soon(refused)
            if what == "replayed group":
                nursery.start_soon(retried)
        assert journal.statistics().transactions - before == 1, "not one group"
        for other in others:
            assert await read_all(journal, other.session) == results[other.session]
        assert await read_all(journal, "s") == first
        # The writer and its cache are sound: the session continues.
        more = await journal.append(lease, drafts("x", 1, start=1), expected_seq=1)
        assert await read_all(journal, "s") == first + more
        assert {i.session for i in await journal.sessions()} == {"s"} | {o.session for o in others}


async def test_a_lease_whose_session_id_is_not_unicode_is_refused_alone(tmp_path: Path) -> None:
    # open_session refuses such an id, but a lease is plain data a caller can
    # build; its session id is bound in the group's queries like any other.
    async with open_journal(url(tmp_path / "j.db")) as journal:
        assert isinstance(journal, SQLiteJournal)
        others = await _open_together(journal, [f"o{i}" for i in range(4)])
        results: dict[str, list[Record]] = {}
        forged = SessionLease(session="s-\ud800", incarnation=1, head=0)

        async def innocent(other: SessionLease) -> None:
            results[other.session] = await journal.append(other, drafts("i", 2), expected_seq=0)

        async def refused() -> None:
            with pytest.raises(ValueError, match="not valid Unicode"):
                await journal.append(forged, drafts("x", 1), expected_seq=0)

        async with trio.open_nursery() as nursery:
            for other in others:
                nursery.start_soon(innocent, other)
            nursery.start_soon(refused)
        for other in others:
            assert await read_all(journal, other.session) == results[other.session]


async def test_a_stray_checkpoint_index_entry_is_corruption_not_a_conflict(
    tmp_path: Path,
) -> None:
    # The index names seq 4, which holds no record: appending a checkpoint
    # there trips the index's key.  That is damage; a ConflictError would say
    # the head moved (it did not) and send the writer round a re-read forever.
    path = tmp_path / "j.db"
    async with open_journal(url(path)) as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, drafts("x", 2), expected_seq=0)
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO checkpoints (session, seq) VALUES ('s', 4)")
        conn.commit()
        conn.close()
        with pytest.raises(JournalCorruptError) as caught:
            await journal.append(lease, [checkpoint(0), checkpoint(1)], expected_seq=2)
        assert (caught.value.session, caught.value.seq) == ("s", 4)
        assert await journal.head("s") == 2
        # Records that are no checkpoints still append at seqs 3 and 4.
        assert [r.seq for r in await journal.append(lease, drafts("y", 2), expected_seq=2)] == [
            3,
            4,
        ]


async def test_a_new_session_is_opened_with_three_statements(tmp_path: Path) -> None:
    async with open_journal(url(tmp_path / "j.db")) as journal:
        assert isinstance(journal, SQLiteJournal) and journal._writer is not None
        statements: list[str] = []
        journal._writer.conn.set_trace_callback(statements.append)
        first = await journal.open_session("new")
        made = [s.split()[0] for s in statements if " sessions " in s or " leases " in s]
        # The lookup that misses, the session stored at its first incarnation, its lease.
        assert made == ["SELECT", "INSERT", "INSERT"], statements
        statements.clear()
        again = await journal.open_session("new")
        journal._writer.conn.set_trace_callback(None)
        assert (first.incarnation, again.incarnation) == (1, 2)
        await journal.append(again, drafts("x", 1), expected_seq=0)
        with pytest.raises(FencedError):
            await journal.append(first, drafts("y", 1), expected_seq=1)
    conn = sqlite3.connect(tmp_path / "j.db")
    try:
        assert conn.execute("SELECT incarnation FROM sessions").fetchall() == [(2,)]
        assert conn.execute("SELECT session, owner, expires_at FROM leases").fetchall() == [
            ("new", None, 0)
        ]
    finally:
        conn.close()
