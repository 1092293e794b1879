"""The Record envelope: one committed event with its place in the session."""

from __future__ import annotations

import msgspec

from .events import Event

__all__ = ["Draft", "Record"]


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """A durable event.

    ``seq`` is session-wide, gap-free and starts at 1.  ``at`` (unix ns) is
    informational only: nothing folds it.  ``digest`` chains this record to the
    previous one (see ``codec.chain``).
    """

    seq: int
    id: str
    session: str
    loop: str
    at: int
    cause: str | None
    digest: bytes
    event: Event


class Draft(msgspec.Struct, frozen=True, kw_only=True):
    """An event on its way into the journal, with its attribution.

    ``id`` makes the append idempotent: appending a draft whose id is already
    stored, with the same loop and event, returns the stored record.
    """

    id: str
    loop: str
    event: Event
    cause: str | None = None
