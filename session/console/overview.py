"""The session list, kept current: each session's loop states folded
incrementally (restore's read the first time, then only the records after
the last one folded), so refreshing the list reads what changed, not every
journal again.  One per console, shared by every page that shows the list."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
import trio

from journal import Journal, JournalError, SessionInfo
from loopruntime.host import FoldError

from ..checkpoints import SessionFolder, read_restored
from .views import SessionRow, session_row, sorted_rows

__all__ = ["Overview"]

log = structlog.get_logger(__name__)


class Overview:
    """Rows of the session list from ``Journal.sessions`` and each session's
    states.  ``rows`` is safe to call from many tasks: one refresh at a time,
    and a refresh younger than ``fresh`` seconds is shared."""

    def __init__(
        self, journal: Journal, *, fresh: float = 0.2, clock: Callable[[], int] = time.time_ns
    ) -> None:
        self.journal = journal
        self.clock = clock
        """The journal's clock (unix ns), against which leases expire."""
        self.fresh = fresh
        self._folders: dict[str, SessionFolder] = {}
        self._problems: dict[str, str] = {}
        self._lock = trio.Lock()
        self._rows: list[SessionRow] = []
        self._at: float | None = None

    async def rows(self) -> list[SessionRow]:
        async with self._lock:
            now = trio.current_time()
            if self._at is None or now - self._at >= self.fresh:
                self._rows = await self._refresh()
                self._at = trio.current_time()
            return self._rows

    async def _refresh(self) -> list[SessionRow]:
        infos = await self.journal.sessions()
        now_ns = self.clock()
        rows = []
        for info in infos:
            try:
                folder = await self._folded(info)
            except (JournalError, FoldError) as exc:
                # One damaged session must not hide the others from the list.
                log.warning("console_session_unreadable", session=info.session, error=str(exc))
                self._folders.pop(info.session, None)
                rows.append(session_row(info, None, now_ns=now_ns, problem=str(exc)))
                continue
            rows.append(session_row(info, folder.states, now_ns=now_ns))
        gone = self._folders.keys() - {i.session for i in infos}
        for session in gone:
            del self._folders[session]
        return sorted_rows(rows)

    async def _folded(self, info: SessionInfo) -> SessionFolder:
        folder = self._folders.get(info.session)
        if folder is None:
            restored = await read_restored(self.journal, info.session)
            folder = SessionFolder(restored.states)
            folder.head = restored.head
            self._folders[info.session] = folder
        if info.head > folder.head:
            async for record in self.journal.read(info.session, after=folder.head):
                folder.feed(record)
        return folder
