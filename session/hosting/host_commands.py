"""How a host applies one inbox command to a ``Session`` (``session.hosting.host``).

Rules: each command goes through the ``Session`` method it names, under the
entry's idempotency key; the commit that applies it holds the
``command.keyed`` record carrying that key, which ``expected`` recognises.
A command that fails is either refused for good (``refused``: applying it
again would fail again, so its entry is consumed once with the reason) or met
a transient failure (the entry waits for the session's next owner); the two
are told apart here, and only here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from journal import InvalidEventError, JournalError
from journal import inbox as ib
from journal.events import CommandKeyed, Event
from loopruntime import LeaseLostError, LoopClosedError, LoopError

from ..embedded.errors import SessionExistsError
from ..embedded.runtime import Session

__all__ = ["Match", "before_start", "damaged", "expected", "not_started", "refused", "run"]

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
        case ib.Pause(loop=loop):
            return await session.pause(loop, key=key, principal=who)
        case ib.Resume(loop=loop):
            return await session.resume(loop, key=key, principal=who)
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


def refused(exc: Exception) -> ib.InboxOutcome | None:
    """The outcome consuming an entry whose command raised ``exc``, when the
    refusal is deterministic: the command does not fit the session as it is
    (an unknown loop or gate, a reused key, a full queue) or fails
    validation, so applying it again would raise the same error, and a host
    retrying it would only spin.  None for a transient failure (the session
    closing, the journal unreachable or fencing this writer): the entry stays
    in the inbox for the session's next owner.  A lost lease is transient too:
    the next owner applies the entry."""
    if isinstance(exc, LoopClosedError | LeaseLostError):
        return None
    if isinstance(exc, JournalError) and not isinstance(exc, InvalidEventError):
        return None
    if isinstance(exc, LoopError | ValueError):
        return ib.InboxOutcome(error=type(exc).__name__, message=str(exc))
    return None


def not_started(
    session: str, entry: ib.InboxEntry, refused_create: tuple[str, ib.InboxOutcome] | None
) -> ib.InboxOutcome:
    """The outcome refusing ``entry``, a command for ``session`` that no
    ``Create`` precedes, so there is no session to apply it to (a
    deterministic refusal: the entries after it may start the session, never
    this one).  ``refused_create``: the key and outcome of the create refused
    before it, if one was."""
    why = "no create for it came before this command"
    if refused_create is not None:
        key, outcome = refused_create
        why = f"its create (key {key!r}) was refused with {outcome.error}"
    message = (
        f"session {session} was never started ({why}); inbox entry {entry.number} "
        f"(key {entry.key!r}) was not applied: create the session first (`loopruntime "
        "submit --create DEFINITION`, Client.create), then send the command again under a new key"
    )
    return ib.InboxOutcome(error="UnknownSessionError", message=message)


def damaged(session: str, entry: ib.InboxEntry) -> ib.InboxOutcome:
    """The outcome refusing ``entry``, whose stored command does not decode
    (a deterministic refusal: the bytes will not mend)."""
    message = (
        f"inbox entry {entry.number} (key {entry.key!r}) of session {session}: "
        f"{entry.damage}; it was skipped and the session went on: send the command "
        "again under a new key"
    )
    return ib.InboxOutcome(error="InboxEntryDamaged", message=message)


def before_start(
    session: str,
    entries: Sequence[ib.InboxEntry],
    refusal: Callable[[ib.InboxEntry], ib.InboxOutcome | None],
) -> tuple[list[ib.Consumed], ib.Create | None]:
    """What a host does with the pending ``entries`` of ``session``, which has
    no records yet: the entries to consume as refused (each before the first
    ``Create`` it takes: one ``refusal`` refuses, for its principal or its
    damage, or a command for the session never started), and that ``Create``
    (None: there is none, and nothing is left to start it with)."""
    refusals: list[ib.Consumed] = []
    refused_create: tuple[str, ib.InboxOutcome] | None = None
    for entry in entries:
        command = entry.command
        why = refusal(entry)
        if why is None:
            if isinstance(command, ib.Create):
                return refusals, command
            why = not_started(session, entry, refused_create)
        elif isinstance(command, ib.Create):
            refused_create = (entry.key, why)
        refusals.append(ib.Consumed(entry=entry.number, outcome=why))
    return refusals, None
