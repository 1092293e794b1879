"""``journal.open_blocking``: the blocking access clients use, on SQLite and
PostgreSQL.  It reads back exactly what the trio journal reads (from any
seq, the chain verified), refuses damage by seq, and puts inbox entries by
the same rules as ``Journal.put``."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from journal import (
    InboxKeyError,
    JournalClosedError,
    JournalCorruptError,
    SessionNotFoundError,
    open_blocking,
    open_journal,
)
from journal import inbox as ib
from journal.sqlite import SQLiteJournal
from tests.support.damage import (
    damage_postgres_record,
    damage_record,
    edit_postgres_record,
    edit_record,
)
from tests.support.loops import run_turns
from tests.support.pgserver import isolated_schema


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgres":
        with isolated_schema(request.getfixturevalue("postgres_dsn")) as found:
            yield found
    else:
        yield f"sqlite:///{tmp_path / 'journal.db'}"


async def test_reads_what_the_journal_reads_from_any_seq(url: str) -> None:
    async with open_journal(url) as journal:
        await run_turns(journal, "s1", 3)
        stored = [r async for r in journal.read("s1")]
    blocking = await trio.to_thread.run_sync(open_blocking, url)
    try:
        assert await trio.to_thread.run_sync(lambda: blocking.read("s1", limit=10_000)) == stored
        for after in (1, 5, len(stored) - 1, len(stored), len(stored) + 3):
            got = await trio.to_thread.run_sync(partial(blocking.read, "s1", after=after))
            assert got == stored[after:]
        with pytest.raises(SessionNotFoundError):
            blocking.read("nope")
    finally:
        blocking.close()
    with pytest.raises(JournalClosedError):
        blocking.read("s1")


async def test_a_client_takes_the_url_a_journal_with_a_blob_threshold_was_opened_at(
    url: str,
) -> None:
    """The threshold rides in the URL: a client given it opens (PostgreSQL's
    libpq never sees the option) and reads the split records back whole."""
    url += ("&" if "?" in url else "?") + "blob_threshold=64"
    async with open_journal(url) as journal:
        assert journal.blob_threshold == 64
        await run_turns(journal, "s1", 2)
        stored = [r async for r in journal.read("s1")]
    blocking = await trio.to_thread.run_sync(open_blocking, url)
    try:
        assert await trio.to_thread.run_sync(blocking.read, "s1") == stored
    finally:
        blocking.close()


async def test_a_damaged_record_is_refused_by_its_seq(url: str) -> None:
    async with open_journal(url) as journal:
        await run_turns(journal, "s1", 2)
        if isinstance(journal, SQLiteJournal):
            damage_record(journal, "s1", 4, b"\x81\xa4type\xa3bad")
            edit_record(journal, "s1", 7, "loop", "elsewhere")
        else:
            await trio.to_thread.run_sync(damage_postgres_record, url, "s1", 4, b"\x81")
            await trio.to_thread.run_sync(edit_postgres_record, url, "s1", 7, "loop", "elsewhere")
    blocking = await trio.to_thread.run_sync(open_blocking, url)
    try:
        # Every good record before the damage, then the damage named by its seq.
        assert [r.seq for r in blocking.read("s1")] == [1, 2, 3]
        with pytest.raises(JournalCorruptError) as caught:
            blocking.read("s1", after=3)
        assert caught.value.seq == 4
        assert [r.seq for r in blocking.read("s1", after=4)] == [5, 6]
        with pytest.raises(JournalCorruptError) as caught:
            blocking.read("s1", after=6)
        assert caught.value.seq == 7
    finally:
        blocking.close()


def test_puts_by_key_as_the_journal_does(url: str) -> None:
    blocking = open_blocking(url)
    try:
        with pytest.raises(SessionNotFoundError):
            blocking.put("s1", "k0", ib.Interrupt())
        first = blocking.put("s1", "k1", ib.Create(definition="d"), definition="d")
        assert (first.number, first.key, first.consumed) == (1, "k1", False)
        assert blocking.put("s1", "k1", ib.Create(definition="d"), definition="d") == first
        with pytest.raises(InboxKeyError):
            blocking.put("s1", "k1", ib.Interrupt())
        second = blocking.put("s1", "k2", ib.Interrupt())
        assert second.number == 2
        assert blocking.entry("s1", "k2") == second and blocking.entry("s1", "k3") is None
        [info] = blocking.sessions()
        assert (info.session, info.pending, info.definition, info.owner) == ("s1", 2, "d", None)
        assert blocking.read("s1") == []
    finally:
        blocking.close()


async def test_lists_the_hosts_and_the_definitions_each_serves(url: str) -> None:
    async with open_journal(url) as journal:
        await journal.register_host("h1", "token-1", ttl=60, definitions=["echo", "asker"])
        await journal.register_host("h2", "token-2", ttl=1e-6, definitions=["gone"])
        expected = await journal.hosts()
        blocking = await trio.to_thread.run_sync(open_blocking, url)
        try:
            listed = await trio.to_thread.run_sync(blocking.hosts)
        finally:
            blocking.close()
    assert [(h.host, h.definitions, h.live) for h in listed] == [
        ("h1", ("echo", "asker"), True),
        ("h2", ("gone",), False),
    ]
    assert [(h.host, h.definitions, h.expires_at) for h in listed] == [
        (h.host, h.definitions, h.expires_at) for h in expected
    ]
    with pytest.raises(JournalClosedError):
        blocking.hosts()
