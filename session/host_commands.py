"""How a host applies one inbox command to a ``Session`` (``session.host``).

Rules: each command goes through the ``Session`` method it names, under the
entry's idempotency key; the commit that applies it holds the
``command.keyed`` record carrying that key, which ``expected`` recognises.
"""

from __future__ import annotations

from collections.abc import Callable

from journal import inbox as ib
from journal.events import CommandKeyed, Event

from .errors import SessionExistsError
from .runtime import Session

__all__ = ["Match", "expected", "run"]

Match = Callable[[Event], ib.InboxOutcome | None]


async def run(session: Session, command: ib.InboxCommand, key: str) -> str | bool | None:
    """Send ``command`` to ``session`` under the entry's idempotency ``key``;
    what it returns (a repeat of the key is answered from the fold and
    commits nothing)."""
    who = command.principal
    match command:
        case ib.Create(definition=name):
            if name != session.definition.name:
                # Two creates of one new id raced past the clients' check.
                raise SessionExistsError(
                    f"session {session.id} already exists with definition "
                    f"{session.definition.name!r}, not {name!r}; nothing was applied",
                    session=session.id,
                    definition=session.definition.name,
                    requested=name,
                )
            return session.id  # made by the host as it opened the session
        case ib.Submit(message=message, loop=loop):
            return await session.submit(message, loop=loop, key=key, principal=who)
        case ib.Steer(text=text, loop=loop):
            return await session.steer(text, loop=loop, key=key, principal=who)
        case ib.Answer(gate_id=gate_id, text=text):
            await session.answer(gate_id, text, key=key, principal=who)
            return None
        case ib.Decide(gate_id=gate_id, allow=allow, scope=scope):
            await session.decide(gate_id, allow, scope, key=key, principal=who)
            return None
        case ib.Resolve(execution_id=execution_id, content=content, is_error=is_error):
            await session.resolve(execution_id, content, is_error, key=key, principal=who)
            return None
        case ib.Interrupt(loop=loop):
            return await session.interrupt(loop=loop, key=key, principal=who)
        case ib.CancelQueued(input_id=input_id, loop=loop):
            await session.cancel_queued(input_id, loop=loop, key=key, principal=who)
            return None
        case ib.Compact(loop=loop):
            return await session.compact(loop=loop, key=key, principal=who)
        case ib.ChangeMode(mode=mode, loop=loop):
            await session.change_mode(mode, loop=loop, key=key, principal=who)
            return None


def expected(command: ib.InboxCommand, key: str) -> Match | None:
    """What the commit applying ``command`` holds: the ``command.keyed``
    record carrying the entry's ``key``, which every keyed command commits
    first, in the append holding what it made (one rule for every command).
    None for ``Create``, which the host's opening of the session applies."""
    if isinstance(command, ib.Create):
        return None

    def match(event: Event) -> ib.InboxOutcome | None:
        if isinstance(event, CommandKeyed) and event.key == key:
            return ib.InboxOutcome(value=event.result)
        return None

    return match
