"""A journal's limit on one inbox entry, set by its URL (``max_entry_bytes``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import InboxEntryTooLargeError, open_blocking, open_journal, parse_location
from journal.inbox import Create, encode_command

from .contract import submit, submit_of_size

LIMIT = 100_000


def _urls(tmp_path: Path) -> list[str]:
    return [
        f"memory:?max_entry_bytes={LIMIT}",
        f"sqlite:///{tmp_path / 'journal.db'}?max_entry_bytes={LIMIT}",
    ]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_the_url_sets_the_limit_of_an_entry(backend: str, tmp_path: Path) -> None:
    url = dict(zip(["memory", "sqlite"], _urls(tmp_path), strict=True))[backend]
    async with open_journal(url) as journal:
        await journal.put("s1", "k1", Create(definition="agent"), definition="agent")
        await journal.put("s1", "k2", submit_of_size(LIMIT))
        before = (await journal.head("s1"), await journal.inbox("s1"))
        with pytest.raises(InboxEntryTooLargeError) as caught:
            await journal.put("s1", "k3", submit_of_size(LIMIT + 1))
        assert (caught.value.size, caught.value.limit) == (LIMIT + 1, LIMIT)
        assert (await journal.head("s1"), await journal.inbox("s1")) == before


def test_a_blocking_journal_keeps_the_urls_limit(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}?max_entry_bytes={LIMIT}"
    trio.run(_create, url)
    blocking = open_blocking(url)
    try:
        blocking.put("s1", "k2", submit_of_size(LIMIT))
        with pytest.raises(InboxEntryTooLargeError):
            blocking.put("s1", "k3", submit_of_size(LIMIT + 1))
        assert blocking.entry("s1", "k2") is not None
        assert blocking.entry("s1", "k3") is None
    finally:
        blocking.close()


async def _create(url: str) -> None:
    async with open_journal(url) as journal:
        await journal.put("s1", "k1", Create(definition="agent"), definition="agent")


def test_the_option_is_a_size_and_postgres_does_not_see_it() -> None:
    assert parse_location("memory:?max_entry_bytes=1MiB").max_entry_bytes == 1024 * 1024
    assert parse_location("memory:").max_entry_bytes is None
    pg = parse_location("postgresql://u@h/db?max_entry_bytes=2MB&sslmode=disable")
    assert (pg.max_entry_bytes, pg.conninfo) == (2_000_000, "postgresql://u@h/db?sslmode=disable")
    with pytest.raises(ValueError, match="max_entry_bytes must be a positive number of bytes"):
        parse_location("sqlite:///x.db?max_entry_bytes=lots")


def test_a_refused_entry_names_its_command_and_session() -> None:
    with pytest.raises(InboxEntryTooLargeError, match="session s9: the submit command is"):
        encode_command(submit("x" * 200), "s9", limit=100)
