"""What every request to the console shares (the journal, the client, the
token) and the guards on it: the token for every request; for a request that
changes anything, the token in a header, the same site, and a console that
is not read-only.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.requests import Request

from journal import Journal, Record, RetryingJournal, SessionNotFoundError
from loopruntime.host import check_principal

from ..clients.client import Client
from .overview import Overview

__all__ = ["Console", "ConsoleError"]


class ConsoleError(Exception):
    """A request the console refuses: an HTTP status and a reason for a person."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class Console:
    """What every request shares: the journal, the client, the token."""

    def __init__(
        self,
        journal: Journal,
        *,
        token: str,
        read_only: bool,
        wait: float,
        list_poll: float,
        clock: Callable[[], int],
        principal: str | None = None,
    ) -> None:
        # Pages ride out a briefly unreachable journal (journal.retry).
        self.journal = journal = RetryingJournal(journal)
        self.principal = check_principal(principal)
        """Who the console's commands are from (recorded on what they make)."""
        self.client = Client(journal)
        self.token = token
        self.read_only = read_only
        self.wait = wait
        self.list_poll = list_poll
        self.overview = Overview(journal, fresh=list_poll / 2, clock=clock)

    # -- the guards --------------------------------------------------------------

    def cookie_name(self, request: Request) -> str:
        # One cookie per port: two consoles on one machine keep their own.
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        return f"loopruntime_console_{port}"

    def _matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def check_read(self, request: Request) -> None:
        given = (
            request.headers.get("x-console-token")
            or request.cookies.get(self.cookie_name(request))
            or request.query_params.get("token")
        )
        if given is None:
            raise ConsoleError(
                401,
                "this console needs its token: open the address the console printed when it "
                "started (it ends with ?token=...)",
            )
        if not self._matches(given):
            raise ConsoleError(
                403, "the token is not this console's: open the address it printed at start"
            )

    def check_write(self, request: Request) -> None:
        """A state-changing request: same origin, token in the header, not read-only."""
        if self.read_only:
            raise ConsoleError(403, "this console is read-only (--read-only): it sends no commands")
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin is not None and origin != own:
            raise ConsoleError(
                403, f"cross-site request refused: it comes from {origin}, not from {own}"
            )
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise ConsoleError(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
        given = request.headers.get("x-console-token")
        if given is None:
            raise ConsoleError(
                401,
                "a request that changes a session needs the console's token in the "
                "X-Console-Token header (the console's own page sends it)",
            )
        if not self._matches(given):
            raise ConsoleError(403, "the X-Console-Token header does not hold this console's token")

    async def head(self, session: str) -> int:
        try:
            return await self.journal.head(session)
        except SessionNotFoundError:
            raise ConsoleError(
                404,
                f"there is no session {session} in this journal; the list shows those there are",
            ) from None

    async def records(self, session: str) -> list[Record]:
        try:
            return [r async for r in self.journal.read(session)]
        except SessionNotFoundError:
            await self.head(session)
            raise
