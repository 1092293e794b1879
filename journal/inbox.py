"""The inbox's vocabulary: commands waiting for a session's owner, and their outcomes.

Any process that can open the journal may ``put`` a command for a session,
under an idempotency key; the session's owner takes the entries in order and
applies each exactly once (``Journal.append(..., consumes=...)`` marks an
entry applied in the transaction that stores the records it made).  These are
data only, encoded like events; what a command *does* is the session's
business (``session.hosting.host``).  Every command may name its ``principal`` (who
gave it): recorded on the records it makes, never a proof of anything.

Schema rules as for events: new fields get defaults; a field never changes
its type; a tag is never reused or renamed.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .content import Message, ResultBlock, Text
from .errors import InboxEntryTooLargeError, InvalidEventError
from .events import GateScope
from .location import parse_location

__all__ = [
    "MAX_ENTRY_BYTES",
    "Answer",
    "CancelQueued",
    "ChangeMode",
    "Claim",
    "Compact",
    "Consumed",
    "Create",
    "Decide",
    "InboxCommand",
    "InboxEntry",
    "InboxOutcome",
    "Interrupt",
    "Pause",
    "Resolve",
    "Resume",
    "Steer",
    "Submit",
    "Wakeup",
    "command_name",
    "decode_command",
    "decode_entry",
    "decode_outcome",
    "encode_command",
    "encode_outcome",
    "entry_limit",
    "wakeup_of",
    "wakeup_payload",
]

_opts: dict[str, Any] = {"frozen": True, "kw_only": True}


class Create(msgspec.Struct, tag="create", **_opts):
    """Start the session with one loop running the named definition."""

    definition: str
    principal: str | None = None


class Submit(msgspec.Struct, tag="submit", **_opts):
    message: Message
    loop: str | None = None
    principal: str | None = None


class Steer(msgspec.Struct, tag="steer", **_opts):
    text: str
    loop: str | None = None
    principal: str | None = None


class Answer(msgspec.Struct, tag="answer", **_opts):
    gate_id: str
    text: str
    principal: str | None = None


class Decide(msgspec.Struct, tag="decide", **_opts):
    gate_id: str
    allow: bool
    scope: GateScope = "once"
    principal: str | None = None


class Resolve(msgspec.Struct, tag="resolve", **_opts):
    execution_id: str
    content: tuple[ResultBlock, ...]
    is_error: bool = False
    principal: str | None = None


class Interrupt(msgspec.Struct, tag="interrupt", **_opts):
    loop: str | None = None
    principal: str | None = None


class Pause(msgspec.Struct, tag="pause", **_opts):
    """Pause the loop (the root loop when None): ``Session.pause``."""

    loop: str | None = None
    principal: str | None = None


class Resume(msgspec.Struct, tag="resume", **_opts):
    """End the loop's pause: ``Session.resume``."""

    loop: str | None = None
    principal: str | None = None


class CancelQueued(msgspec.Struct, tag="cancel_queued", **_opts):
    input_id: str
    loop: str | None = None
    principal: str | None = None


class Compact(msgspec.Struct, tag="compact", **_opts):
    loop: str | None = None
    principal: str | None = None


class ChangeMode(msgspec.Struct, tag="change_mode", **_opts):
    mode: str | None
    loop: str | None = None
    principal: str | None = None


InboxCommand = (
    Create
    | Submit
    | Steer
    | Answer
    | Decide
    | Resolve
    | Interrupt
    | Pause
    | Resume
    | CancelQueued
    | Compact
    | ChangeMode
)


class InboxOutcome(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What applying an entry came to, stored with the entry when it is consumed."""

    record: str | None = None
    """Id of the first record the command made (None: it made none)."""
    value: str | bool | None = None
    """What the command returned: an input, steer or attempt id, a flag."""
    error: str | None = None
    """The name of the error the command was refused with (nothing was applied)."""
    message: str | None = None
    """The refusal's message."""


class Consumed(msgspec.Struct, frozen=True, kw_only=True):
    """An inbox entry an append applies: stored in the same transaction."""

    entry: int
    outcome: InboxOutcome


class InboxEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One command in a session's inbox."""

    session: str
    number: int
    """Its place in the session's inbox: 1, 2, ... in the order entries were put."""
    key: str
    command: InboxCommand | None
    """None when the stored bytes do not decode (``damage`` says why)."""
    created_at: int
    consumed_at: int | None = None
    outcome: InboxOutcome | None = None
    damage: str | None = None

    @property
    def consumed(self) -> bool:
        return self.consumed_at is not None


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """A session with work a host may take, as ``Journal.claimable`` found it."""

    session: str
    owner: str | None
    """The owner of an expired lease (a host that went away), or None."""
    expires_at: int
    pending: int
    """Inbox entries not yet applied."""
    definition: str | None


class Wakeup(msgspec.Struct, frozen=True, kw_only=True):
    """A session was given an inbox entry or handed over (``Journal.inbox_wakeups``)."""

    session: str
    """``""``: the journal watches now, and wake-ups before may have been missed."""
    holder: str | None = None
    """The host whose lease on the session was live when the entry was put
    (the journal's clock): that host wakes the session itself, and no other
    host could take it then.  None: no live lease held it, or not known."""


_wakeup_payload = msgspec.json.Encoder()
_wakeup_decoder = msgspec.json.Decoder(tuple[str, str | None])


def wakeup_payload(session: str, holder: str | None) -> str:
    """The text a backend's notification carries for a wake-up (``wakeup_of``)."""
    return _wakeup_payload.encode((session, holder)).decode()


def wakeup_of(payload: str) -> Wakeup:
    """The wake-up ``payload`` names; a payload not of ``wakeup_payload``'s
    making (a bare session id, sent by a host of an earlier version) names
    its session with no holder known."""
    if payload.startswith("["):
        try:
            session, holder = _wakeup_decoder.decode(payload)
        except msgspec.DecodeError:
            pass
        else:
            return Wakeup(session=session, holder=holder)
    return Wakeup(session=payload)


_encoder = msgspec.msgpack.Encoder()
_command_decoder = msgspec.msgpack.Decoder(InboxCommand)
_outcome_decoder = msgspec.msgpack.Decoder(InboxOutcome)


def command_name(command: InboxCommand) -> str:
    """The command's tag (``"submit"``)."""
    return str(type(command).__struct_config__.tag)


MAX_ENTRY_BYTES = 16 * 1024 * 1024
"""Bytes one inbox entry's command may take, unless the journal's URL sets
``max_entry_bytes``: room for the largest input ``Limits`` allow by default
(``max_input_bytes``, 8 MiB) twice over, so the inbox refuses only what no
loop would take, before any of it is stored."""


def entry_limit(url: str) -> int:
    """The most bytes the journal at ``url`` takes in one inbox entry."""
    return parse_location(url).max_entry_bytes or MAX_ENTRY_BYTES


def encode_command(command: InboxCommand, session: str = "", limit: int = MAX_ENTRY_BYTES) -> bytes:
    """The stored bytes of ``command``, proven to decode back
    (``InvalidEventError`` naming the field otherwise): an entry that does
    not decode is refused when it is put, never stored.  More than ``limit``
    bytes raise ``InboxEntryTooLargeError`` (measured before decoding)."""
    if not isinstance(command, InboxCommand):
        raise InvalidEventError(command, "it is not an inbox command (journal.inbox)")
    blank = _blank_input(command)
    if blank is not None:
        raise InvalidEventError(command, blank)
    try:
        body = _encoder.encode(command)
        if len(body) > limit:
            raise InboxEntryTooLargeError(session, command_name(command), len(body), limit)
        _command_decoder.decode(body)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidEventError(command, str(exc)) from exc
    return body


def _blank_input(command: InboxCommand) -> str | None:
    """Why ``command`` carries input with nothing to say (None: it does not).
    The model API refuses an empty message and a text block of whitespace
    only, so such input could only fail its turn: it is never stored."""
    # Values of the wrong type pass here: the round trip below names them.
    match command:
        case Submit(message=Message(blocks=[*blocks])):
            if not blocks:
                return "its message has no content block; give it some text"
            if any(_blank(b.text) for b in blocks if isinstance(b, Text)):
                return "its message holds a text block that is empty or only whitespace"
        case Steer(text=text) if _blank(text):
            return "its steering text is empty or only whitespace"
    return None


def _blank(text: object) -> bool:
    return isinstance(text, str) and not text.strip()


def decode_command(body: bytes) -> InboxCommand:
    """Raises ``msgspec.DecodeError`` (a ``ValueError``) for damaged bytes."""
    return _command_decoder.decode(body)


def encode_outcome(outcome: InboxOutcome) -> bytes:
    return _encoder.encode(outcome)


def decode_outcome(body: bytes) -> InboxOutcome:
    return _outcome_decoder.decode(body)


def decode_entry(body: bytes) -> tuple[InboxCommand | None, str | None]:
    """A stored command, or None and why it does not decode (damage)."""
    try:
        return decode_command(body), None
    except ValueError as exc:
        return None, f"its stored command does not decode ({exc})"
