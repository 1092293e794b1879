"""Client: commands into a session's inbox from any process; outcomes read back.

A client never runs loops.  Each command is checked as ``Session`` checks it
(``validation``) and written with ``Journal.put`` under the caller's
idempotency key: sending the same command with the same key again is
harmless (the stored entry is returned, the command is applied once);
another command under a used key is an ``InboxKeyError``.  The host that
owns the session applies it; ``wait`` reads its outcome back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from journal import Journal, Record, open_journal
from journal import inbox as ib
from journal.content import Block, Message, ResultBlock
from loopruntime.host import new_id

from .status import SessionStatus, statuses
from .validation import answer_text, check_decision, steering_text, tool_result, user_message

__all__ = ["Client", "CommandRefusedError", "open_client"]


class CommandRefusedError(Exception):
    """The session's owner refused the command (nothing was applied)."""

    def __init__(self, session: str, key: str, outcome: ib.InboxOutcome) -> None:
        self.session, self.key, self.outcome = session, key, outcome
        super().__init__(
            f"session {session}: the command with key {key!r} was refused: "
            f"{outcome.error}: {outcome.message}"
        )


def _key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > 200:
        raise ValueError(
            f"an inbox command needs an idempotency key (a non-empty string of at most 200 "
            f"characters), not {key!r}: the same key makes a retry safe"
        )
    return key


class Client:
    """Writes commands into sessions' inboxes (``open_client(url)``)."""

    def __init__(self, journal: Journal, *, poll: float = 0.05) -> None:
        self.journal = journal
        self.poll = poll

    async def create(self, definition_name: str, *, session_id: str | None = None, key: str) -> str:
        """Ask for a new session running ``definition_name``; returns its id.
        A host offering that definition starts it."""
        session_id = session_id or new_id("ses_")
        await self.journal.put(
            session_id,
            _key(key),
            ib.Create(definition=definition_name),
            definition=definition_name,
        )
        return session_id

    async def _put(self, session_id: str, key: str, command: ib.InboxCommand) -> ib.InboxEntry:
        return await self.journal.put(session_id, _key(key), command)

    async def submit(
        self,
        session_id: str,
        content: str | Message | Sequence[Block],
        *,
        key: str,
        loop: str | None = None,
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, ib.Submit(message=user_message(content), loop=loop))

    async def steer(
        self, session_id: str, text: str, *, key: str, loop: str | None = None
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, ib.Steer(text=steering_text(text), loop=loop))

    async def answer(self, session_id: str, gate_id: str, text: str, *, key: str) -> ib.InboxEntry:
        command = ib.Answer(gate_id=gate_id, text=answer_text(gate_id, text))
        return await self._put(session_id, key, command)

    async def decide(
        self, session_id: str, gate_id: str, allow: bool, scope: str = "once", *, key: str
    ) -> ib.InboxEntry:
        check_decision(gate_id, allow, scope)
        command = ib.Decide(gate_id=gate_id, allow=allow, scope=scope)  # type: ignore[arg-type]
        return await self._put(session_id, key, command)

    async def resolve(
        self,
        session_id: str,
        execution_id: str,
        result: str | Sequence[ResultBlock],
        is_error: bool = False,
        *,
        key: str,
    ) -> ib.InboxEntry:
        content = tool_result(execution_id, result, is_error)
        command = ib.Resolve(execution_id=execution_id, content=content, is_error=is_error)
        return await self._put(session_id, key, command)

    async def interrupt(
        self, session_id: str, *, key: str, loop: str | None = None
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, ib.Interrupt(loop=loop))

    async def cancel_queued(
        self, session_id: str, input_id: str, *, key: str, loop: str | None = None
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, ib.CancelQueued(input_id=input_id, loop=loop))

    async def compact(self, session_id: str, *, key: str, loop: str | None = None) -> ib.InboxEntry:
        return await self._put(session_id, key, ib.Compact(loop=loop))

    async def change_mode(
        self, session_id: str, mode: str | None, *, key: str, loop: str | None = None
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, ib.ChangeMode(mode=mode, loop=loop))

    async def wait(
        self,
        session_id: str,
        key: str,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait's own bound, as the issue asks
    ) -> ib.InboxOutcome:
        """The outcome of the command sent with ``key`` once its session's
        owner applied it: the input or steer id, the record it made.  A refusal
        is a ``CommandRefusedError``; ``TimeoutError`` after ``timeout`` seconds
        (the command stays in the inbox); ``KeyError`` for a key never sent."""
        with trio.move_on_after(math_inf(timeout)) as scope:
            # Polled: the owner may be another process, with no event to wait on.
            while True:
                entry = await self.journal.entry(session_id, key)
                if entry is None:
                    raise KeyError(f"session {session_id} has no command with key {key!r}")
                if entry.outcome is not None:
                    if entry.outcome.error is not None:
                        raise CommandRefusedError(session_id, key, entry.outcome)
                    return entry.outcome
                await trio.sleep(self.poll)
        assert scope.cancelled_caught
        raise TimeoutError(
            f"session {session_id}: the command with key {key!r} was not applied within "
            f"{timeout} s; it waits in the inbox (`loopruntime sessions` shows whether a host "
            "owns the session)"
        )

    def subscribe(self, session_id: str, after: int = 0) -> AsyncIterator[Record]:
        """The session's records after ``after``, then those committed later."""
        return self.journal.tail(session_id, after=after)

    async def sessions(self) -> list[SessionStatus]:
        """Every session with its owner, lease expiry, waiting entries and
        status (``session.status``: "running" only under a live lease)."""
        return await statuses(self.journal)


def math_inf(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout


@asynccontextmanager
async def open_client(url: str) -> AsyncIterator[Client]:
    """A client of the journal at ``url``, closed on exit."""
    async with open_journal(url) as journal:
        yield Client(journal)
