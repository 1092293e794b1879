"""The append rules every backend applies, as pure functions over plain data.

A backend looks things up (the session's incarnation, head and head digest,
the stored rows of the drafts' ids) and writes what these functions plan;
the decisions are made here and nowhere else:

* fencing: a lease of another incarnation is a ``FencedError``;
* one id twice in an append is a ``DuplicateEventError`` (never a retry);
* idempotency: drafts whose ids are all stored with the same loop and bytes
  return the stored records; some stored and some not, or one stored with
  other content, is a ``DuplicateEventError``;
* a stale ``expected_seq`` is a ``ConflictError``, decided after idempotency
  (a retry after a lost reply carries a stale one);
* new records take the seqs after the head, chain their digests from the
  head's over the whole record (``codec.chain``: every new record, whatever
  rule older records of the session were written under), and each
  ``session.checkpoint`` gets an index mark.

Leases and the inbox (``journal.store`` states the contract):

* ``decide_open``, ``decide_acquire``, ``decide_renew`` and ``decide_release``
  turn a session's lease state ``(incarnation, owner, expires_at)`` into the
  next one, or refuse;
* ``decide_put`` says whether a put is a new entry or returns a stored one;
* ``decide_consumes`` says which entries an append marks applied;
* ``decide_register`` says whether a host id may be registered for a token.

Writers: ``starts_span`` says whether an append begins a new writer span.

No I/O, no clock: ``now`` is passed in.  ``plan_append`` runs once per append
on every backend's commit path, so its loop stays inlined.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from .errors import (
    ConflictError,
    DuplicateEventError,
    FencedError,
    HostIdInUseError,
    InboxConsumedError,
    InboxError,
    InboxKeyError,
    LeaseHeldError,
)
from .events import EVENT_TYPES, Event, SessionCheckpoint
from .record import Record

__all__ = [
    "LeaseState",
    "Mark",
    "Pending",
    "Row",
    "check_expected_seq",
    "check_lease",
    "decide_acquire",
    "decide_append",
    "decide_consumes",
    "decide_open",
    "decide_put",
    "decide_register",
    "decide_release",
    "decide_renew",
    "lease_live",
    "live_holder",
    "ttl_ns",
    "plan_append",
    "repeated_id",
    "starts_span",
    "stored_records",
]

Pending = tuple[str, str, str | None, Event, bytes]
"""A draft encoded once: ``(id, loop, cause, event, body)``.  A plain tuple:
one is built per appended event, and a tuple costs a tenth of an instance."""

Row = tuple[str, int, str, str, int, str | None, bytes, bytes]
"""A stored record as every backend writes it:
``(session, seq, id, loop, at, cause, digest, body)``."""

Mark = tuple[str, int]
"""An entry of the checkpoint index: ``(session, seq)``."""

_EXACT = frozenset(EVENT_TYPES)
"""The event classes themselves: an event of one of them is a checkpoint
exactly when its class is ``SessionCheckpoint`` (a subclass's instance is
asked with ``isinstance``)."""

# codec.chain, inlined in plan_append: copying a fresh blake2b-128 state is
# cheaper than constructing one, and the call itself costs as much again.
_new_hash = hashlib.blake2b(digest_size=16).copy
_pack = msgspec.msgpack.Encoder().encode


def check_lease(session: str, incarnation: int, current: int) -> None:
    """Fencing: only a lease of the session's current incarnation may append."""
    if incarnation != current:
        raise FencedError(session, incarnation, current)


def starts_span(last_incarnation: int | None, incarnation: int) -> bool:
    """Whether an append under ``incarnation`` starts a writer span: it does
    when the session's last span (None: it has none) names another one."""
    return last_incarnation != incarnation


def repeated_id(ids: Sequence[str]) -> str | None:
    """The first id that appears more than once in one append, or None."""
    if len(set(ids)) == len(ids):
        return None
    return next(i for i in ids if ids.count(i) > 1)


def check_expected_seq(session: str, expected_seq: int, head: int) -> None:
    """An append continues from the head it names, or it is a conflict."""
    if expected_seq != head:
        raise ConflictError(session, expected_seq, head)


def stored_records(
    session: str, pending: Sequence[Pending], hits: Sequence[Row | None]
) -> list[Record] | None:
    """The stored records when every draft's id is stored with identical content.

    ``hits`` holds the stored row of each draft's id (None where the id is not
    stored).  None when no id is stored; ``DuplicateEventError`` when some are
    stored and some not (naming the first stored one), or when one is stored
    with another loop or other bytes.
    """
    if all(hit is None for hit in hits):
        return None
    records = []
    for (id, loop, _, event, body), hit in zip(pending, hits, strict=True):
        if hit is None:
            # Not a retry of one append: name an id that is stored.
            stored_id = next(h[2] for h in hits if h is not None)
            raise DuplicateEventError(session, stored_id)
        _, seq, _, stored_loop, at, cause, digest, stored_body = hit
        if stored_loop != loop or stored_body != body:
            raise DuplicateEventError(session, id)
        records.append(
            Record(
                seq=seq,
                id=id,
                session=session,
                loop=stored_loop,
                at=at,
                cause=cause,
                digest=digest,
                event=event,
            )
        )
    return records


def plan_append(
    session: str,
    head: int,
    digest: bytes,
    pending: Sequence[Pending],
    now: int,
    rows: list[Row],
    marks: list[Mark],
) -> list[Record]:
    """The records of ``pending`` after ``head``, chained from ``digest``.

    Adds their rows to ``rows`` and the index marks of their checkpoints to
    ``marks``; the new head and digest are the last record's (unchanged when
    ``pending`` is empty).
    """
    seq = head
    records: list[Record] = []
    add_row, add_record, new_hash, pack = rows.append, records.append, _new_hash, _pack
    for id, loop, cause, event, body in pending:
        seq += 1
        h = new_hash()
        h.update(pack((digest, seq, id, session, loop, now, cause)))
        h.update(body)
        digest = h.digest()
        add_row((session, seq, id, loop, now, cause, digest, body))
        # Exact classes first: ``isinstance`` against a Struct class takes a
        # slow path through its metaclass, dearer than the rest of the test.
        kind = type(event)
        if kind is SessionCheckpoint or (
            kind not in _EXACT and isinstance(event, SessionCheckpoint)
        ):
            marks.append((session, seq))
        add_record(
            Record(
                seq=seq,
                id=id,
                session=session,
                loop=loop,
                at=now,
                cause=cause,
                digest=digest,
                event=event,
            )
        )
    return records


def decide_append(
    session: str,
    expected_seq: int,
    head: int,
    digest: bytes,
    pending: Sequence[Pending],
    hits: Sequence[Row | None],
    now: int,
    rows: list[Row],
    marks: list[Mark],
) -> tuple[list[Record], bool]:
    """One append of a fenced lease, checked in full: idempotency, then
    ``expected_seq``, then the plan.

    Returns the records and whether they are new (planned into ``rows``)
    rather than already stored.
    """
    stored = stored_records(session, pending, hits)
    if stored is not None:
        return stored, False
    check_expected_seq(session, expected_seq, head)
    return plan_append(session, head, digest, pending, now, rows, marks), True


# -- leases ------------------------------------------------------------------------

LeaseState = tuple[int, str | None, int]
"""A session's lease: ``(incarnation, owner, expires_at)``; ``owner`` None
and ``expires_at`` 0 when nobody holds it."""

UNOWNED: LeaseState = (0, None, 0)
"""The lease state of a session that has none yet (incarnation 0)."""


def ttl_ns(ttl: float) -> int:
    """A lease's duration in ns; a ``ValueError`` unless it is a positive number of seconds."""
    if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not ttl > 0:
        raise ValueError(f"a lease's ttl must be a positive number of seconds, not {ttl!r}")
    return int(ttl * 1e9)


def lease_live(state: LeaseState, now: int) -> bool:
    """Whether an owner holds the lease and it has not expired."""
    return state[1] is not None and state[2] > now


def live_holder(state: LeaseState, now: int) -> str | None:
    """The owner of a live lease, or None (the holder an inbox wake-up names)."""
    return state[1] if lease_live(state, now) else None


def decide_open(session: str, state: LeaseState, now: int) -> LeaseState:
    """``open_session``: a new incarnation with no owner, unless an owner's
    lease is live (``LeaseHeldError``)."""
    incarnation, owner, expires_at = state
    if owner is not None and expires_at > now:
        raise LeaseHeldError(session, owner, expires_at)
    return (incarnation + 1, None, 0)


def decide_acquire(session: str, owner: str, state: LeaseState, now: int, ttl: int) -> LeaseState:
    """``acquire``: ``owner`` takes the session with a new incarnation, unless
    another owner's lease is live.  Its own live lease it may take again (a
    restarted host with the same id): the new incarnation fences the old one."""
    incarnation, held_by, expires_at = state
    if held_by is not None and held_by != owner and expires_at > now:
        raise LeaseHeldError(session, held_by, expires_at)
    return (incarnation + 1, owner, now + ttl)


def decide_renew(
    session: str, incarnation: int, owner: str | None, state: LeaseState, now: int, ttl: int
) -> LeaseState:
    """``renew``: the lease is still the session's current one (``FencedError``
    otherwise), expired or not: while the incarnation has not moved, nobody
    else has written."""
    check_lease(session, incarnation, state[0])
    if owner is None or state[1] != owner:
        raise FencedError(session, incarnation, state[0])
    return (state[0], owner, now + ttl)


def decide_release(session: str, incarnation: int, state: LeaseState, handoff: bool) -> LeaseState:
    """``release``: the lease ends and its incarnation with it (it can write
    nothing more).  With ``handoff`` the owner stays named on an expired
    lease, which makes the session claimable at once (it has work left)."""
    check_lease(session, incarnation, state[0])
    return (state[0] + 1, state[1] if handoff else None, 0)


# -- the inbox ------------------------------------------------------------------------


def decide_put(session: str, key: str, body: bytes, stored: tuple[int, bytes] | None) -> int | None:
    """A put's key against the entry stored under it (``(number, body)``):
    None when the key is new, the stored entry's number when it holds the same
    command, ``InboxKeyError`` when it holds another."""
    if stored is None:
        return None
    number, stored_body = stored
    if stored_body != body:
        raise InboxKeyError(session, key, number)
    return number


def decide_consumes(
    session: str,
    consumes: Sequence[tuple[int, bytes]],
    found: Sequence[tuple[bool, bytes | None] | None],
) -> list[tuple[int, bytes]]:
    """The entries an append marks applied, each ``(number, outcome bytes)``.

    ``found`` holds each entry's stored state ``(consumed, outcome)``, None
    where the session has no such entry (``InboxError``).  An entry already
    applied with the same outcome is a retry of this append and is left as it
    is; with another outcome it is an ``InboxConsumedError``.  One entry
    twice in one append is an ``InboxError``.
    """
    numbers = [n for n, _ in consumes]
    if len(set(numbers)) != len(numbers):
        raise InboxError(f"session {session}: one append names an inbox entry twice")
    marks: list[tuple[int, bytes]] = []
    for (number, outcome), stored in zip(consumes, found, strict=True):
        if stored is None:
            raise InboxError(f"session {session} has no inbox entry {number}; nothing was appended")
        consumed, stored_outcome = stored
        if not consumed:
            marks.append((number, outcome))
        elif stored_outcome != outcome:
            raise InboxConsumedError(session, number)
    return marks


# -- hosts --------------------------------------------------------------------------


def decide_register(
    host: str, token: str, stored: tuple[str, int] | None, now: int, ttl: int
) -> int:
    """A registration of ``host`` for ``token`` against the one stored
    (``(token, expires_at)``): its new expiry, or ``HostIdInUseError`` while
    another token's registration is live."""
    if stored is not None and stored[0] != token and stored[1] > now:
        raise HostIdInUseError(host, (stored[1] - now) / 1e9)
    return now + ttl
