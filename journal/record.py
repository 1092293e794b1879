"""The Record envelope: one committed event with its place in the session."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from .events import Event

__all__ = ["Draft", "Record", "check_drafts", "check_text"]


class Record(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A durable event.

    ``seq`` is session-wide, gap-free and starts at 1.  ``at`` (unix ns) is
    informational only: nothing folds it.  ``digest`` chains this record to the
    previous one (see ``codec.chain``).

    Not tracked by the cyclic garbage collector (``gc=False``), nor are
    drafts: both are immutable envelopes around an event, which is data and
    cannot refer back to them, so they can be in no cycle.  With a thousand
    loops busy, every append's drafts and records outlive a scheduling round
    and would be promoted to the oldest generation, whose full passes over
    every live object they would bring on.
    """

    seq: int
    id: str
    session: str
    loop: str
    at: int
    cause: str | None
    digest: bytes
    event: Event


class Draft(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An event on its way into the journal, with its attribution.

    ``id`` makes the append idempotent: appending a draft whose id is already
    stored, with the same loop and event, returns the stored record.
    """

    id: str
    loop: str
    event: Event
    cause: str | None = None


def check_text(what: str, value: str | None) -> None:
    """Refuse text that cannot be stored as UTF-8 (a lone surrogate), naming it.

    Every backend calls this on session ids and on each draft's id, loop and
    cause before anything is queued, so bad text fails only its own call and
    never a group commit it would have shared with other sessions.
    """
    if value is None or value.isascii():  # the usual case, checked in C
        return
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} {value!r} is not valid Unicode text ({exc.reason} at position "
            f"{exc.start}); fix the string"
        ) from exc


def check_drafts(drafts: Sequence[Draft]) -> None:
    """``check_text`` on each draft's id, loop and cause."""
    for d in drafts:
        cause = d.cause
        if d.id.isascii() and d.loop.isascii() and (cause is None or cause.isascii()):
            continue  # the usual case: three checks in C, no call per field
        check_text("event id", d.id)
        check_text("loop id", d.loop)
        check_text("cause", d.cause)
