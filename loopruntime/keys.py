"""Idempotency keys: what a key may be, and the digest of a command's content.

A keyed command is accepted once: its ``command.keyed`` record stores the
key, the digest of what was asked and what was answered, and the fold
(``LoopState.keys``) remembers it.  A repeat with the same digest is answered
from the fold; another digest is an ``IdempotencyKeyError``.  Pure.
"""

from __future__ import annotations

import hashlib

import msgspec

from .commands import (
    AnswerGate,
    CancelQueuedInput,
    ChangeInference,
    ChangeMode,
    Command,
    Compact,
    DecideGate,
    Interrupt,
    Pause,
    ReplaceTools,
    ResolveToolCall,
    Resume,
    Steer,
    UserInput,
)
from .errors import IdempotencyKeyError
from .state import KeyUse

__all__ = ["MAX_KEY_LENGTH", "check_key", "command_digest", "command_name", "repeat_of"]

MAX_KEY_LENGTH = 200
"""The longest key, in characters."""

_encoder = msgspec.msgpack.Encoder()


def check_key(key: object) -> str | None:
    """``key`` as given when it is a usable key (or None); else ``TypeError``
    or ``ValueError`` naming it.  Called before anything is sent."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise TypeError(f"key must be text (a str) or None, not {type(key).__name__}")
    if not key:
        raise ValueError("key must not be empty; pass None for a command without a key")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"key is {len(key)} characters long; a key holds at most {MAX_KEY_LENGTH}")
    try:
        key.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"key {key!r} is not valid Unicode text ({exc.reason} at position {exc.start})"
        ) from exc
    return key


def command_name(command: Command) -> str:
    """The name a keyed command is recorded under (the ``Session`` method's)."""
    match command:
        case UserInput():
            return "submit"
        case Steer():
            return "steer"
        case CancelQueuedInput():
            return "cancel_queued"
        case AnswerGate():
            return "answer"
        case DecideGate():
            return "decide"
        case ResolveToolCall():
            return "resolve"
        case Interrupt():
            return "interrupt"
        case Pause():
            return "pause"
        case Resume():
            return "resume"
        case Compact():
            return "compact"
        case ChangeMode():
            return "change_mode"
        case ChangeInference():
            return "change_inference"
        case ReplaceTools():
            return "replace_tools"
        case _:
            raise TypeError(f"{type(command).__name__} takes no idempotency key")


def command_digest(command: Command, loop: str) -> str:
    """blake2b of what ``command`` asks of loop ``loop``: its name and content,
    never the ids minted for it (a retry mints new ones)."""
    content: object
    match command:
        case UserInput():
            content = (loop, command.messages, command.trigger)
        case Steer():
            content = (loop, command.text)
        case CancelQueuedInput():
            content = (loop, command.input_id)
        case AnswerGate():
            content = (command.gate_id, command.answer)
        case DecideGate():
            content = (command.gate_id, command.allow, command.scope)
        case ResolveToolCall():
            content = (command.execution_id, command.content, command.is_error)
        case ChangeMode():
            content = (loop, command.mode)
        case ChangeInference():
            content = (loop, command.model, command.max_tokens, command.reset)
        case ReplaceTools():
            content = (loop, command.tools)
        case _:
            content = (loop,)
    data = _encoder.encode((command_name(command), content))
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def repeat_of(used: KeyUse, key: str, name: str, digest: str) -> str | bool | None:
    """What a repeat of ``key`` answers: the first use's result when it asked
    the same, else ``IdempotencyKeyError``."""
    if used.command != name or used.digest != digest:
        what = (
            f"for {used.command} with other content"
            if used.command == name
            else f"for {used.command}, not {name}"
        )
        raise IdempotencyKeyError(
            f"key {key!r} was first used at seq {used.seq} {what}; nothing was committed: "
            "use a new key for a new command",
            key=key,
            seq=used.seq,
        )
    return used.result
