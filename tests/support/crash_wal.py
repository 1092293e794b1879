"""A session on a ``synchronous=FULL`` journal, SIGKILLed after an append: its WAL
holds zeros written ahead of the frames (``journal/sqlite/wal.py``), which the next
opener's WAL recovery must read past.

``crash-wal WORKDIR KILL_AFTER`` runs turns of ``tests.support.loops.counting_definition``
on ``WORKDIR/journal.db`` and kills itself right after the ``KILL_AFTER``-th append
returned (with ``KILL_AFTER`` > 1: or the first append after it that left room written
ahead, so the kill always finds zeros past the frames); ``WORKDIR/seen`` holds
``seq digest-hex`` of every record an append returned.
"""

from __future__ import annotations

from pathlib import Path

from journal import Journal, open_journal
from session import Session
from tests.support.crash_points import KillingJournal
from tests.support.loops import counting_definition

SESSION = "crash-wal"
TURNS = 60
"""Enough turns that the WAL runs past its room written ahead several times."""
FRAME = 4096 + 24
"""A WAL frame: one of the journal's 4 KiB pages and its 24-byte header."""


def journal_url(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'journal.db'}?synchronous=FULL"


def has_room(wal: Path) -> bool:
    """Whether the WAL holds zeros past its frames: SQLite's frames leave it 32 bytes
    of header and whole frames long; every room written ahead leaves it not."""
    return (wal.stat().st_size - 32) % FRAME != 0


class _KillingJournal(KillingJournal):
    """Dies at the ``kill_after``-th append, or past it at the first that left room."""

    def __init__(self, inner: Journal, workdir: Path, kill_after: int) -> None:
        super().__init__(inner, workdir, kill_after)
        self.wal = workdir / "journal.db-wal"
        self.at = kill_after

    def dies_now(self) -> bool:
        return self.appends == 1 == self.at or (1 < self.at <= self.appends and has_room(self.wal))


async def run(workdir: str, kill_after: str) -> None:
    path = Path(workdir)
    async with open_journal(journal_url(path)) as real:
        journal = _KillingJournal(real, path, int(kill_after))
        async with Session.create(journal, counting_definition(), session_id=SESSION) as s:
            for i in range(TURNS):
                await s.submit(f"count {i}")
                await s.wait_idle()
