"""The SQLite WAL at ``synchronous=FULL``: room written ahead of the commits
(``journal/sqlite/wal.py``), so a commit's sync does not also sync the file's growth."""

from __future__ import annotations

import errno
import itertools
from pathlib import Path

import pytest

from journal import open_journal
from journal.sqlite import SQLiteJournal
from journal.sqlite import wal as sqlite_wal

from .contract import drafts, read_all

_FRAME = 4096 + 24
"""A WAL frame: a page of the journal's 4 KiB pages and its 24-byte header."""
_HEADER = 32


def _wal(database: Path) -> Path:
    return database.with_name(database.name + "-wal")


def url(path: Path, synchronous: str) -> str:
    return f"sqlite:///{path}?synchronous={synchronous}"


async def _wal_sizes(path: Path, synchronous: str, appends: int) -> list[int]:
    """The WAL file's size after each of ``appends`` single-record appends."""
    sizes = []
    async with open_journal(url(path, synchronous)) as journal:
        lease = await journal.open_session("s")
        for i in range(appends):
            await journal.append(lease, drafts("x", 1, start=i), expected_seq=i)
            sizes.append(_wal(path).stat().st_size)
        assert [r.seq for r in await read_all(journal, "s")] == list(range(1, appends + 1))
    return sizes


async def test_commits_at_full_overwrite_room_written_ahead(tmp_path: Path) -> None:
    sizes = await _wal_sizes(tmp_path / "j.db", "FULL", 150)
    # Each append writes a few frames.  Without room written ahead the file
    # grows with every commit; with it, only the commits that run past the room
    # grow it (1 MiB each, so a few in 150).
    growing = sum(1 for a, b in itertools.pairwise(sizes) if b != a)
    assert growing <= 4, sizes
    # The room is not frames: the file's size is not SQLite's header and frames.
    assert any((size - _HEADER) % _FRAME != 0 for size in sizes), sizes
    # The journal opens again and reads every record back (its chain verified).
    async with open_journal(url(tmp_path / "j.db", "FULL")) as journal:
        records = await read_all(journal, "s")
        assert [r.seq for r in records] == list(range(1, 151))
        assert (await journal.check_storage()).ok


async def test_the_whole_room_is_written_at_once(tmp_path: Path) -> None:
    # The room is written whole as the journal's WAL begins (in its second
    # commit: the first writes SQLite's header), not grown with it: the
    # commits of a short turn (here 50 appends of a few frames each, the
    # frames of about 15 tool steps) all overwrite it, so none of them writes
    # and syncs zeros too.
    path = tmp_path / "j.db"
    async with open_journal(url(path, "FULL")) as journal:
        lease = await journal.open_session("s")
        assert _wal(path).stat().st_size < sqlite_wal.RESERVE
        await journal.append(lease, drafts("x", 1), expected_seq=0)
        assert _wal(path).stat().st_size > sqlite_wal.RESERVE
    sizes = await _wal_sizes(tmp_path / "k.db", "FULL", 50)
    assert len(set(sizes)) == 1, sizes


async def test_normal_writes_nothing_ahead(tmp_path: Path) -> None:
    # At NORMAL a commit does not sync, so growth costs it nothing: the WAL is
    # exactly SQLite's header and frames after every append.
    sizes = await _wal_sizes(tmp_path / "j.db", "NORMAL", 40)
    assert all((size - _HEADER) % _FRAME == 0 for size in sizes), sizes
    assert len(set(sizes)) > 30


async def test_room_that_cannot_be_written_leaves_the_commit_to_grow_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sqlite_wal.os, "pwrite", full_disk)
    path = tmp_path / "j.db"
    async with open_journal(url(path, "FULL")) as journal:
        assert isinstance(journal, SQLiteJournal)
        lease = await journal.open_session("s")
        for i in range(20):
            await journal.append(lease, drafts("x", 1, start=i), expected_seq=i)
        assert len(await read_all(journal, "s")) == 20
        assert (_wal(path).stat().st_size - _HEADER) % _FRAME == 0


def test_zeros_are_written_only_past_the_end_and_once_a_header_exists(tmp_path: Path) -> None:
    database = str(tmp_path / "j.db")
    reserve = sqlite_wal.WalReserve(database)
    reserve.extend()  # no WAL file yet: nothing, and no file made
    assert not Path(reserve.path).exists()
    wal = Path(reserve.path)
    wal.write_bytes(b"")
    reserve.extend()  # no header yet: SQLite has not started this WAL
    assert wal.stat().st_size == 0
    frames = b"h" * _HEADER + b"f" * (3 * _FRAME)
    wal.write_bytes(frames)
    reserve.extend()
    assert wal.read_bytes() == frames + bytes(sqlite_wal.RESERVE)
    reserve.extend()  # the frames are still inside the room: nothing more
    assert wal.stat().st_size == len(frames) + sqlite_wal.RESERVE
    with wal.open("ab") as f:  # SQLite ran past the room
        f.write(b"g" * _FRAME)
    grown = wal.stat().st_size
    reserve.extend()
    assert wal.stat().st_size == grown + sqlite_wal.RESERVE
    assert wal.read_bytes()[:grown] == frames + bytes(sqlite_wal.RESERVE) + b"g" * _FRAME
    reserve.close()


def test_room_is_kept_only_at_full_and_where_writes_at_an_offset_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = str(tmp_path / "j.db")
    assert isinstance(sqlite_wal.reserve_for(database, "FULL"), sqlite_wal.WalReserve)
    assert sqlite_wal.reserve_for(database, "NORMAL") is None
    monkeypatch.delattr(sqlite_wal.os, "pwrite")  # as on Windows
    assert sqlite_wal.reserve_for(database, "FULL") is None
