"""msgpack encoding of events, the schema version and the digest chain.

The chain rule: a record's digest is blake2b-128 over the msgpack array
``[previous digest, seq, id, session, loop, at, cause]`` followed by the
event bytes, so editing any column of a stored record breaks the chain.
Records a session held before its journal was upgraded to schema 3 keep the
rule they were written under, the event bytes alone (``chain_body``); each
backend remembers, per session, the first seq of the whole-record rule.

One encoder and one decoder for the whole process, never re-created per
call.  Decoding failures are translated here, at the one place that decodes:
an unknown tag or a newer schema is a ``JournalSchemaError``; bytes that are
not an event at all are a ``JournalCorruptError`` naming the seq.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator

import msgspec

from .errors import InvalidEventError, JournalCorruptError, JournalSchemaError
from .events import EVENT_TYPES, Event, SessionCheckpoint
from .record import Record

__all__ = [
    "GENESIS",
    "SCHEMA_VERSION",
    "RecordRow",
    "chain",
    "chain_body",
    "chained_records",
    "check_schema_version",
    "checkpoint_records",
    "decode_event",
    "encode_checked",
    "encode_event",
    "verified_records",
]

SCHEMA_VERSION = 5
"""Version of the record format this code writes and reads.

2 added ``session.checkpoint`` records and each backend's index of them; a
version-1 journal is upgraded in place when opened (it holds no checkpoints,
so the upgrade only creates the empty index).  3 chains the whole record
(``chain``) instead of the event bytes alone (``chain_body``); upgrading a
version-2 journal records, per session, the seq from which the new rule
applies (one past the session's head at the upgrade).  4 stores large
units by reference (``journal.blobs``): each backend gains a blob table, and
a record may start with ``blobs.MARK``; an older journal is upgraded by
creating the empty table (its records stay as they are).  5 records who
appended (``Journal.writers``): each backend gains a table of writer spans,
created empty, so the records written before stay unattributed; code of
version 4 would append without a span, so it is refused."""

GENESIS = bytes(16)
"""The digest that the first record of every session chains from."""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Event)
_KNOWN_TAGS = frozenset(t.__struct_config__.tag for t in EVENT_TYPES)

encode_event = _encoder.encode


def encode_checked(event: Event) -> bytes:
    """``encode_event``, proven to decode back before anything is stored.

    msgspec checks types when it decodes, not when a Struct is built, so an
    event holding a value its field does not allow (a list where a tuple of
    blocks belongs, a number for a string) would encode and then make the
    session unreadable from its seq on.  Every backend's ``append`` encodes
    through here: such an event is refused, naming the field, and nothing of
    the append is written."""
    try:
        body = _encoder.encode(event)
    except (TypeError, ValueError, OverflowError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidEventError(event, str(exc)) from exc
    try:
        _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise InvalidEventError(event, str(exc)) from exc
    return body


_new_hash = hashlib.blake2b(digest_size=16).copy
"""A fresh blake2b-128 state: copying one is cheaper than constructing one,
which parses its keyword arguments on every call."""


_pack = msgspec.msgpack.Encoder().encode


def chain(
    previous: bytes,
    seq: int,
    id: str,
    session: str,
    loop: str,
    at: int,
    cause: str | None,
    body: bytes,
) -> bytes:
    """The digest of a record (schema 3 on): blake2b-128 of the msgpack array
    ``[previous, seq, id, session, loop, at, cause]`` followed by ``body``.

    msgpack makes the envelope self-delimiting (no two records share its
    bytes), and one ``encode`` of a tuple is the cheapest way to feed six
    values to the hash.  The hot loops (``rules.plan_append``, the readers)
    inline this; ``tests/journal/test_codec.py`` pins them to it."""
    h = _new_hash()
    h.update(_pack((previous, seq, id, session, loop, at, cause)))
    h.update(body)
    return h.digest()


def chain_body(previous: bytes, body: bytes) -> bytes:
    """The digest of a record written before schema 3: blake2b-128 of the
    previous digest followed by the event bytes (the other columns are not
    covered)."""
    h = _new_hash()
    h.update(previous)
    h.update(body)
    return h.digest()


def decode_event(body: bytes, *, session: str = "?", seq: int = 0) -> Event:
    """Decode one stored event, translating every failure to a journal error."""
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise _explain(body, session, seq, exc) from exc


def _explain(body: bytes, session: str, seq: int, exc: Exception) -> Exception:
    try:
        raw = msgspec.msgpack.decode(body)
    except msgspec.DecodeError:
        return JournalCorruptError(session, seq, f"undecodable bytes ({exc})")
    tag = raw.get("type") if isinstance(raw, dict) else None
    if isinstance(tag, str) and tag not in _KNOWN_TAGS:
        return JournalSchemaError(
            f"session {session} seq {seq} holds an event of unknown kind {tag!r}; "
            "it was written by a newer loopruntime: upgrade to read this journal"
        )
    return JournalCorruptError(session, seq, f"not a valid event ({exc})")


def check_schema_version(found: int, *, where: str) -> None:
    """Fail clearly when a journal was written by a newer (or unknown) schema."""
    if found > SCHEMA_VERSION:
        raise JournalSchemaError(
            f"{where} uses journal schema {found}, newer than {SCHEMA_VERSION} which this "
            "loopruntime reads; upgrade loopruntime to open it"
        )
    if found < 1:
        raise JournalSchemaError(f"{where} has an invalid journal schema version {found}")


RecordRow = tuple[int, str, str, int, str | None, bytes, bytes]
"""A stored record as the readers fetch it: ``seq, id, loop, at, cause, digest, body``."""


def chained_records(
    session: str,
    rows: Iterable[RecordRow],
    *,
    after: int,
    previous: bytes,
    whole_from: int = 1,
) -> list[Record]:
    """The records of ``rows`` (the ones after seq ``after``, in order), each
    verified against the chain from ``previous`` (the digest of the record at
    ``after``; ``GENESIS`` for 0) and decoded.  Damage (a gap, a broken
    digest, bytes that do not decode) ends the list before the damaged record,
    so every good record before it is returned; a list that would start with
    damage is a ``JournalCorruptError`` naming its seq instead.  The blocking
    readers' loop; the trio readers inline the same steps for speed."""
    found: list[Record] = []
    try:
        for record in verified_records(
            session, rows, after=after, previous=previous, whole_from=whole_from
        ):
            found.append(record)
    except (JournalCorruptError, JournalSchemaError):
        if not found:
            raise
    return found


def _checked_body(
    session: str,
    previous: bytes,
    row: RecordRow,
    whole_from: int,
    resolve: Callable[[int, bytes], bytes] | None,
) -> bytes:
    """The event bytes of ``row``, once its digest is proven to follow
    ``previous`` (the whole-record rule from seq ``whole_from`` on, the
    body-only rule before it); a body stored with references to blobs is
    joined by ``resolve``."""
    seq, id, loop, at, cause, digest, body = row
    if seq >= whole_from:
        computed = chain(previous, seq, id, session, loop, at, cause, body)
    else:
        computed = chain_body(previous, body)
    if computed != digest:
        raise JournalCorruptError(session, seq, "digest chain broken")
    if resolve is not None and body[:1] == b"\xc1":
        body = resolve(seq, body)
    return body


def verified_records(
    session: str,
    rows: Iterable[RecordRow],
    *,
    after: int,
    previous: bytes,
    whole_from: int = 1,
    resolve: Callable[[int, bytes], bytes] | None = None,
) -> Iterator[Record]:
    """The records of ``rows`` (the ones after seq ``after``, in order), each
    verified against the chain from ``previous`` (the digest of the record at
    ``after``; ``GENESIS`` for 0) and decoded; the first damage (a gap, a
    broken digest, bytes that do not decode) raises, naming its seq.
    ``resolve`` as for ``checkpoint_records``."""
    expected = after + 1
    for seq, id, loop, at, cause, digest, body in rows:
        if seq != expected:
            raise JournalCorruptError(session, expected, "it is missing")
        body = _checked_body(
            session, previous, (seq, id, loop, at, cause, digest, body), whole_from, resolve
        )
        yield Record(
            seq=seq,
            id=id,
            session=session,
            loop=loop,
            at=at,
            cause=cause,
            digest=digest,
            event=decode_event(body, session=session, seq=seq),
        )
        previous = digest
        expected += 1


CheckpointRow = tuple[int, str | None, str, int, str | None, bytes, bytes | None, bytes | None]
"""A stored checkpoint as every backend reads it: ``seq, id, loop, at, cause,
digest, body`` of the indexed record (``body`` None when that record is gone)
and the digest of the record before it (None when that one is gone)."""


def checkpoint_records(
    session: str,
    rows: Iterable[CheckpointRow],
    whole_from: int = 1,
    *,
    resolve: Callable[[int, bytes], bytes] | None = None,
) -> list[Record]:
    """The records of a session's indexed checkpoints, each verified against
    the stored digest of the record before it (``GENESIS`` for seq 1), by the
    whole-record rule from seq ``whole_from`` on and the body-only rule
    before it.  ``resolve(seq, body)`` gives the event bytes of a body stored
    with references to blobs (``journal.blobs``: it starts with ``0xC1``)."""
    found = []
    for seq, id, loop, at, cause, digest, body, previous in rows:
        if body is None or id is None:
            raise JournalCorruptError(session, seq, "it is indexed as a checkpoint but missing")
        if previous is None:
            if seq != 1:
                raise JournalCorruptError(session, seq - 1, "it is missing")
            previous = GENESIS
        body = _checked_body(
            session, previous, (seq, id, loop, at, cause, digest, body), whole_from, resolve
        )
        event = decode_event(body, session=session, seq=seq)
        if not isinstance(event, SessionCheckpoint):
            raise JournalCorruptError(
                session, seq, f"it is indexed as a checkpoint but holds {type(event).__name__}"
            )
        found.append(
            Record(
                seq=seq,
                id=id,
                session=session,
                loop=loop,
                at=at,
                cause=cause,
                digest=digest,
                event=event,
            )
        )
    return found
