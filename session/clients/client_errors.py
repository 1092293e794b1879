"""The errors a client raises itself (the journal's are ``JournalError``), and
what ``wait``'s timeout says about the session it waited on."""

from __future__ import annotations

import time
from collections.abc import Sequence

from journal import HostInfo, InboxEntryTooLargeError, SessionInfo
from journal import inbox as ib
from loopruntime import PayloadTooLargeError

__all__ = [
    "ClientClosedError",
    "ClientError",
    "ClientForkedError",
    "ClientNotOpenError",
    "CommandRefusedError",
    "WaitTimeoutError",
    "entry_too_large",
    "timeout_error",
]


class ClientError(Exception):
    """Base of the errors a client raises itself (the journal's are ``JournalError``)."""


class ClientNotOpenError(ClientError):
    """A client made by ``open_client`` / ``open_sync_client`` used before its block opened it."""

    def __init__(self, url: str, opener: str) -> None:
        self.url = url
        super().__init__(
            f"the client of {url} is not open: use it inside `{opener}` "
            "(the block opens the journal and closes it at the end)"
        )


class ClientClosedError(ClientError):
    """A client used after it was closed (its ``with`` block ended); nothing was sent."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(
            f"the client of {url} is closed (its `with` block has ended); nothing was sent: "
            "open a new client to go on"
        )


class ClientForkedError(ClientError):
    """A ``SyncClient`` used in a process forked after it was opened (a
    pre-forking server, a worker pool): its event loop's thread was not
    copied into the child; nothing was sent."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(
            f"the client of {url} was opened in another process, before this one was forked; "
            "nothing was sent: open a client in each process (after the fork)"
        )


class CommandRefusedError(ClientError):
    """The session's owner refused the command (nothing was applied)."""

    def __init__(self, session: str, key: str, outcome: ib.InboxOutcome) -> None:
        self.session, self.key, self.outcome = session, key, outcome
        super().__init__(
            f"session {session}: the command with key {key!r} was refused: "
            f"{outcome.error}: {outcome.message}"
        )


class WaitTimeoutError(ClientError, TimeoutError):
    """``wait`` gave up: the command was not applied in time (it stays in the inbox).

    ``owner`` is the host holding the session's lease (None: no host took
    it), ``definition`` what a host must offer to take it, ``serving`` the
    live hosts that offer it (a host full, or slow to look, has not taken
    the session yet: starting another is not what the wait needs)."""

    def __init__(
        self,
        session: str,
        key: str,
        timeout: float,
        *,
        owner: str | None,
        live: bool,
        definition: str | None,
        serving: Sequence[str] = (),
    ) -> None:
        self.session, self.key, self.timeout = session, key, timeout
        self.owner, self.definition, self.serving = owner, definition, tuple(serving)
        wanted = f"definition {definition!r}" if definition else "its definition"
        start = (
            f"start one offering {wanted} (`loopruntime host --journal URL "
            "--definitions module:NAME`)"
        )
        if owner is None and serving:
            why = (
                f"no host has taken the session yet, though {', '.join(serving)} "
                f"{'serves' if len(serving) == 1 else 'serve'} {wanted} (full, or not looked "
                "yet: `loopruntime sessions` shows what each host holds)"
            )
        elif owner is None:
            why = f"no host has taken the session: {start}"
        elif not live:
            why = (
                f"its host {owner} stopped renewing its lease (the host is gone or stuck); "
                f"a host offering {wanted} takes it over, or {start}"
            )
        else:
            why = f"its host {owner} holds it but has not applied the command yet"
        super().__init__(
            f"session {session}: the command with key {key!r} was not applied within "
            f"{timeout} s; it waits in the inbox and is applied once a host runs the "
            f"session: {why}"
        )


def timeout_error(
    session: str,
    key: str,
    timeout: float,
    infos: Sequence[SessionInfo],
    hosts: Sequence[HostInfo] = (),
) -> WaitTimeoutError:
    """The ``WaitTimeoutError`` of a wait on ``session``, from the sessions'
    and the hosts' listings."""
    info = next((i for i in infos if i.session == session), None)
    owner = info.owner if info is not None else None
    live = info is not None and info.expires_at > time.time_ns()
    definition = info.definition if info is not None else None
    serving = [h.host for h in hosts if h.live and definition in h.definitions]
    return WaitTimeoutError(
        session, key, timeout, owner=owner, live=live, definition=definition, serving=serving
    )


def entry_too_large(exc: InboxEntryTooLargeError) -> PayloadTooLargeError:
    """The journal's refusal of an inbox entry, as the client's callers see
    every payload refused: a ``PayloadTooLargeError`` naming size and limit."""
    return PayloadTooLargeError(
        f"the {exc.what} command",
        size=exc.size,
        limit=exc.limit,
        field="the journal's max_entry_bytes",
    )
