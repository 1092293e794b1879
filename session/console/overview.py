"""The session list, kept current: each session's status from a few counts
(``Summary``) kept for every session, computed by folding only the records a
session gained since it was last seen.  The folded states themselves are kept
for the sessions that changed most recently only (``keep``); a session that
changes after its states were let go is read again from its last checkpoint.
One per console, shared by every page that shows the list."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import structlog
import trio

from journal import Journal, JournalError, SessionInfo
from loopruntime.host import FoldError

from ..embedded.checkpoints import SessionFolder, read_restored
from .views import SessionRow, Summary, session_row, sorted_rows, summary_of

__all__ = ["Overview"]

log = structlog.get_logger(__name__)


class Overview:
    """Rows of the session list from ``Journal.sessions`` and each session's
    states.  ``rows`` is safe to call from many tasks: one refresh at a time,
    and a refresh younger than ``fresh`` seconds is shared.  Memory: a
    ``Summary`` per session, and the states of at most ``keep`` sessions."""

    def __init__(
        self,
        journal: Journal,
        *,
        fresh: float = 0.2,
        clock: Callable[[], int] = time.time_ns,
        keep: int = 256,
    ) -> None:
        self.journal = journal
        self.clock = clock
        """The journal's clock (unix ns), against which leases expire."""
        self.fresh = fresh
        self.keep = keep
        self._summaries: dict[str, Summary] = {}
        self._folders: OrderedDict[str, SessionFolder] = OrderedDict()
        """The most recently changed sessions' states, oldest first."""
        self._lock = trio.Lock()
        self._rows: list[SessionRow] = []
        self._at: float | None = None

    @property
    def folded(self) -> int:
        """Sessions whose states are held now (at most ``keep``)."""
        return len(self._folders)

    async def rows(self) -> list[SessionRow]:
        async with self._lock:
            now = trio.current_time()
            if self._at is None or now - self._at >= self.fresh:
                self._rows = await self._refresh()
                self._at = trio.current_time()
            return self._rows

    async def _refresh(self) -> list[SessionRow]:
        infos = await self.journal.sessions()
        hosts = await self.journal.hosts()
        now_ns = self.clock()
        rows = []
        for info in infos:
            try:
                summary = await self._summary(info)
            except (JournalError, FoldError) as exc:
                # One damaged session must not hide the others from the list.
                log.warning("console_session_unreadable", session=info.session, error=str(exc))
                self._summaries.pop(info.session, None)
                self._folders.pop(info.session, None)
                rows.append(session_row(info, None, now_ns=now_ns, problem=str(exc)))
                continue
            rows.append(session_row(info, summary, now_ns=now_ns, hosts=hosts))
        gone = self._summaries.keys() - {i.session for i in infos}
        for session in gone:
            del self._summaries[session]
            self._folders.pop(session, None)
        return sorted_rows(rows)

    async def _summary(self, info: SessionInfo) -> Summary:
        known = self._summaries.get(info.session)
        if known is not None and known.head >= info.head:
            return known
        folder = self._folders.pop(info.session, None)
        if folder is None:
            restored = await read_restored(self.journal, info.session)
            folder = SessionFolder(restored.states)
            folder.head = restored.head
        async for record in self.journal.read(info.session, after=folder.head):
            folder.feed(record)
        self._folders[info.session] = folder
        while len(self._folders) > self.keep:
            self._folders.popitem(last=False)
        summary = self._summaries[info.session] = summary_of(folder.states, folder.head)
        return summary
