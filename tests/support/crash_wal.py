"""A session on a ``synchronous=FULL`` journal, SIGKILLed after its k-th append:
its WAL holds zeros written ahead of the frames (``journal/sqlite/wal.py``), which
the next opener's WAL recovery must read past.

``crash-wal WORKDIR KILL_AFTER`` runs turns of ``tests.support.loops.counting_definition``
on ``WORKDIR/journal.db`` and kills itself right after the ``KILL_AFTER``-th append
returned; ``WORKDIR/seen`` holds ``seq digest-hex`` of every record an append returned.
"""

from __future__ import annotations

from pathlib import Path

from journal import open_journal
from session import Session
from tests.support.crash_points import KillingJournal
from tests.support.loops import counting_definition

SESSION = "crash-wal"
TURNS = 60
"""Enough turns that the WAL runs past its room written ahead several times."""


def journal_url(workdir: Path) -> str:
    return f"sqlite:///{workdir / 'journal.db'}?synchronous=FULL"


async def run(workdir: str, kill_after: str) -> None:
    path = Path(workdir)
    async with open_journal(journal_url(path)) as real:
        journal = KillingJournal(real, path, int(kill_after))
        async with Session.create(journal, counting_definition(), session_id=SESSION) as s:
            for i in range(TURNS):
                await s.submit(f"count {i}")
                await s.wait_idle()
