"""Principals: who gave a command, recorded on the records it made.

A principal is text the caller chooses (a user id, a service name), 1 to
``MAX_PRINCIPAL_LENGTH`` characters of valid Unicode.  It is recorded, never
checked: the runtime implies no authorization by it (a host may refuse
principals it does not know, ``session.Host(principals=...)``).  It takes no
part in an idempotency key's digest: a key names a command, whoever repeats
it.  Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from journal.events import Event, TurnEnded

__all__ = ["MAX_PRINCIPAL_LENGTH", "check_principal", "stamped", "stamped_end"]

MAX_PRINCIPAL_LENGTH = 200
"""The longest principal, in characters."""


def check_principal(principal: object) -> str | None:
    """``principal`` as given when it is usable (or None); else ``TypeError``
    or ``ValueError`` naming it.  Called before anything is sent."""
    if principal is None:
        return None
    if not isinstance(principal, str):
        raise TypeError(
            f"principal must be text (a str: a user id, a service name) or None, "
            f"not {type(principal).__name__}"
        )
    if not principal or principal.isspace():
        raise ValueError("principal must not be empty; pass None to say nobody in particular")
    if len(principal) > MAX_PRINCIPAL_LENGTH:
        raise ValueError(
            f"principal is {len(principal)} characters long; a principal holds at most "
            f"{MAX_PRINCIPAL_LENGTH}"
        )
    try:
        principal.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"principal {principal!r} is not valid Unicode text ({exc.reason} at position "
            f"{exc.start})"
        ) from exc
    return principal


def stamped(events: Sequence[Event], principal: str | None) -> list[Event]:
    """``events`` with ``principal`` set on each that records one (None:
    unchanged, at no cost)."""
    if principal is None:
        return list(events)
    return [
        msgspec.structs.replace(e, principal=principal) if "principal" in e.__struct_fields__ else e
        for e in events
    ]


def stamped_end(events: list[Event], principal: str | None) -> list[Event]:
    """A settlement's records with ``principal`` (who interrupted) on its
    ``turn.ended`` only: the other records are the turn's own."""
    if principal is None:
        return events
    return [
        msgspec.structs.replace(e, principal=principal) if isinstance(e, TurnEnded) else e
        for e in events
    ]
