"""Every argument of a client's methods, checked before anything is written,
and the inbox command each method puts, checked as ``Session`` checks it
(``validation``).  ``Client`` calls these, and ``SyncClient`` runs ``Client``:
both refuse the same input with the same errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec

from journal import SessionInfo
from journal import inbox as ib
from journal.content import Block, Message, ResultBlock
from loopruntime.host import check_principal

from ..embedded.errors import SessionExistsError
from ..embedded.validation import (
    answer_text,
    check_decision,
    steering_text,
    tool_result,
    user_message,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "answer_command",
    "check_after",
    "check_creation",
    "check_id",
    "check_key",
    "check_poll",
    "check_timeout",
    "check_thread_wait",
    "create_command",
    "decide_command",
    "resolve_command",
    "steer_command",
    "submit_command",
    "with_principal",
]

C = TypeVar("C", bound=ib.InboxCommand)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > 200:
        raise ValueError(
            f"an inbox command needs an idempotency key (a non-empty string of at most 200 "
            f"characters), not {key!r}: the same key makes a retry safe"
        )
    return key


DEFAULT_TIMEOUT = 30.0
"""Seconds ``wait`` waits unless told: nothing waits unbounded by accident."""


def check_timeout(timeout: object) -> float:
    """``timeout`` as a number of seconds (None: forever); ``ValueError`` otherwise."""
    if timeout is None:
        return float("inf")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"a wait's timeout is a number of seconds >= 0 or None, not {timeout!r}")
    return float(timeout)


def check_after(after: object) -> int:
    """A stream's starting point: the seq of the last record seen, 0 for all."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(
            f"subscribe(after=...) takes the seq of the last record seen (0 for all), not {after!r}"
        )
    return after


def check_thread_wait(timeout: object) -> float:
    """A blocking wait's bound: ``check_timeout``, None refused.  A task's
    caller can cancel its wait; nothing can get a blocked thread back, so a
    thread waits without a bound only when told ``math.inf``."""
    if timeout is None:
        raise ValueError(
            "SyncClient.wait needs a timeout in seconds (math.inf to wait without a bound, "
            "on purpose): a thread must never wait unbounded by accident"
        )
    return check_timeout(timeout)


# The inbox command of each client method, checked as ``Session`` checks it:
# shared by ``Client`` and ``SyncClient`` so both refuse the same input.


def submit_command(content: str | Message | Sequence[Block], loop: str | None) -> ib.Submit:
    return ib.Submit(message=user_message(content), loop=loop)


def steer_command(text: str, loop: str | None) -> ib.Steer:
    return ib.Steer(text=steering_text(text), loop=loop)


def answer_command(gate_id: str, text: str | Any) -> ib.Answer:
    """A question's answer; a form's may be given as data, sent as its JSON
    text and checked by the session's owner."""
    return ib.Answer(gate_id=gate_id, text=answer_text(gate_id, text, data=True))


def with_principal(command: C, principal: str | None) -> C:
    """``command`` carrying who sent it (checked: text of at most 200 characters)."""
    principal = check_principal(principal)
    return command if principal is None else msgspec.structs.replace(command, principal=principal)


def decide_command(gate_id: str, allow: bool, scope: str) -> ib.Decide:
    checked = check_decision(gate_id, allow, scope)
    return ib.Decide(gate_id=gate_id, allow=allow, scope=checked)


def resolve_command(
    execution_id: str, result: str | Sequence[ResultBlock], is_error: bool
) -> ib.Resolve:
    content = tool_result(execution_id, result, is_error)
    return ib.Resolve(execution_id=execution_id, content=content, is_error=is_error)


def check_id(what: str, value: object) -> str:
    """A session, gate, execution or definition name: non-empty text that can
    be stored (``ValueError`` otherwise), checked before anything is sent."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"the {what} must be a non-empty string, not {value!r}")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"the {what} {value!a} is not valid Unicode text ({exc.reason}); fix the string"
        ) from exc
    return value


def create_command(definition_name: object) -> ib.Create:
    return ib.Create(definition=check_id("definition name", definition_name))


def check_creation(session_id: str, definition_name: str, existing: SessionInfo | None) -> None:
    """Refuse to create ``session_id`` when it exists running another
    definition: the id is taken, and the command would be applied to a
    session that is not what the caller asked for."""
    recorded = existing.definition if existing is not None else None
    if recorded is not None and recorded != definition_name:
        raise SessionExistsError(
            f"session {session_id} already exists with definition {recorded!r}, not "
            f"{definition_name!r}; nothing was sent: choose another session id, or send "
            f"commands to the existing session",
            session=session_id,
            definition=recorded,
            requested=definition_name,
        )


def check_poll(poll: object) -> float:
    if isinstance(poll, bool) or not isinstance(poll, int | float) or not 0 < poll < float("inf"):
        raise ValueError(f"poll is a number of seconds > 0, not {poll!r}")
    return float(poll)
