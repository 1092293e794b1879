"""Large records by reference: content stored once, by digest, beside the records.

Rules (the story is in ``docs/journal.md``, "Large records by reference"):

* A *unit* is a content block (text, thinking, redacted thinking, image), a
  tool's input (``tool.started``'s and a ``tool_use`` block's) or a tool's
  result (the content of ``tool.completed``, ``tool.resolved`` and a
  ``tool_result`` block, and ``tool.completed``'s structured value).  A unit
  whose msgpack bytes are longer than the journal's threshold is a *blob*:
  stored once in the backend's blob table under ``blake2b-256`` of its bytes,
  in the transaction that appends the record, and replaced in the record by a
  reference (a msgpack extension holding the digest).
* A record holding references is stored as ``MARK`` followed by the msgpack
  pair ``[digests, body]``; ``MARK`` (0xC1) is the one byte msgpack never
  uses, so no event's bytes start with it and a decoder meeting it fails at
  once: that failure is the only moment a reader looks for blobs.
* The digest chain covers the stored bytes, references included; each blob
  is verified against its digest when it is read, so the chain covers the
  content through the digests (a Merkle link), and a damaged or missing blob
  is a ``JournalCorruptError`` naming the record that refers to it.
* Splitting a record is a pure function of its bytes and the threshold: the
  same event under the same threshold is stored as the same bytes, so an
  idempotent re-append compares equal.

Pure: no I/O.  The backends store and fetch the blobs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from .codec import encode_checked, encode_event
from .errors import JournalCorruptError
from .events import Event
from .record import Draft
from .rules import Pending

__all__ = [
    "DEFAULT_BLOB_THRESHOLD",
    "MARK",
    "Blob",
    "blob_digest",
    "check_threshold",
    "choose_threshold",
    "encode_pending",
    "is_split",
    "join",
    "references",
    "split",
    "verify_blob",
    "wanted",
]

DEFAULT_BLOB_THRESHOLD = 256 * 1024
"""Bytes above which a unit is stored by reference (256 KiB)."""

# A decoder of our own so encode_pending calls it directly (codec.encode_checked's check).
_check = msgspec.msgpack.Decoder(Event).decode

MARK = 0xC1
"""The first byte of a record stored with references."""

_EXT = 1
"""The msgpack extension code of a reference (its data: the 32-byte digest)."""

Blob = tuple[bytes, bytes]
"""A blob to store: ``(digest, bytes)``."""

_BLOCKS = frozenset({"text", "thinking", "redacted_thinking", "image"})
"""Block tags whose whole block is a unit."""

_FIELDS: dict[str, tuple[str, ...]] = {
    "tool.started": ("input",),
    "tool.completed": ("content", "structured"),
    "tool.resolved": ("content",),
    "tool_use": ("input",),
    "tool_result": ("content",),
}
"""Tags whose named fields are units (a tool's input, a tool's result)."""

_encode = msgspec.msgpack.Encoder().encode
_decode_raw = msgspec.msgpack.Decoder().decode
_decode_split = msgspec.msgpack.Decoder(tuple[list[bytes], msgspec.Raw]).decode
_new_hash = hashlib.blake2b(digest_size=32).copy


def check_threshold(value: object) -> int:
    """The blob threshold ``value`` names, or ``ValueError`` saying what is allowed."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"a blob threshold must be a positive number of bytes (an int), not {value!r}; "
            f"the default is {DEFAULT_BLOB_THRESHOLD}"
        )
    return value


def choose_threshold(given: object, from_url: int | None, url: str) -> int:
    """The threshold a journal opened at ``url`` uses: ``given`` (an argument),
    else the URL's ``blob_threshold`` (``from_url``), else the default.
    ``ValueError`` when both are given and differ: neither silently wins."""
    if given is None:
        return DEFAULT_BLOB_THRESHOLD if from_url is None else from_url
    threshold = check_threshold(given)
    if from_url is not None and from_url != threshold:
        raise ValueError(
            f"journal URL {url!r} sets blob_threshold={from_url} but blob_threshold={threshold} "
            "was also passed; give it in one place"
        )
    return threshold


def blob_digest(data: bytes) -> bytes:
    """The address of a blob: blake2b-256 of its bytes."""
    h = _new_hash()
    h.update(data)
    return h.digest()


def is_split(body: bytes) -> bool:
    """Whether ``body`` is stored with references (and needs its blobs to decode)."""
    return body[:1] == b"\xc1"


def encode_pending(drafts: Sequence[Draft], threshold: int) -> tuple[list[Pending], list[Blob]]:
    """Each draft encoded (``codec.encode_checked``), split when it is larger than
    ``threshold``; the blobs the split records refer to, each digest once."""
    pending: list[Pending] = []
    blobs: dict[bytes, bytes] = {}
    encode, check = encode_event, _check
    for d in drafts:
        event = d.event
        try:
            # encode_checked's steps inline (this runs once per appended
            # event); any failure is left to it to name.
            body = encode(event)
            check(body)
        except (TypeError, ValueError, OverflowError):  # msgspec's errors are ValueErrors
            body = encode_checked(event)  # raises the named error
        if len(body) > threshold:
            body = split(body, threshold, blobs)
        pending.append((d.id, d.loop, d.cause, event, body))
    return pending, list(blobs.items()) if blobs else []


def split(body: bytes, threshold: int, blobs: dict[bytes, bytes]) -> bytes:
    """``body`` with each unit longer than ``threshold`` replaced by a reference,
    the units added to ``blobs``; ``body`` itself when no unit is that long."""
    tree = _decode_raw(body)
    found: list[bytes] = []
    tree = _walk(tree, threshold, blobs, found)
    if not found:
        return body
    return bytes((MARK,)) + _encode((found, msgspec.Raw(_encode(tree))))


def _unit(value: Any, threshold: int, blobs: dict[bytes, bytes], found: list[bytes]) -> Any:
    data = _encode(value)
    if len(data) <= threshold:
        return _walk(value, threshold, blobs, found)
    digest = blob_digest(data)
    blobs[digest] = data
    if digest not in found:
        found.append(digest)
    return msgspec.msgpack.Ext(_EXT, digest)


def _walk(value: Any, threshold: int, blobs: dict[bytes, bytes], found: list[bytes]) -> Any:
    if isinstance(value, dict):
        tag = value.get("type")
        if tag == "session.checkpoint":
            return _checkpoint(value, threshold, blobs, found)
        if tag in _BLOCKS:
            # Checked by the caller's size test when it is a unit; here it
            # is small, or a part of a unit's parent that is walked through.
            return value
        fields = _FIELDS.get(tag, ()) if isinstance(tag, str) else ()
        out = {}
        for key, item in value.items():
            if key in fields:
                out[key] = _unit(item, threshold, blobs, found)
            elif isinstance(item, dict) and item.get("type") in _BLOCKS:
                out[key] = _unit(item, threshold, blobs, found)
            else:
                out[key] = _walk(item, threshold, blobs, found)
        return out
    if isinstance(value, list):
        return [
            _unit(item, threshold, blobs, found)
            if isinstance(item, dict) and item.get("type") in _BLOCKS
            else _walk(item, threshold, blobs, found)
            for item in value
        ]
    return value


def _checkpoint(
    value: dict[str, Any], threshold: int, blobs: dict[bytes, bytes], found: list[bytes]
) -> dict[str, Any]:
    """A checkpoint's images: their messages as any, and the fold's other state
    (opaque bytes to this layer, msgpack all the same: the calls of an open
    batch, queued input) split in place, so a checkpoint copies no large unit.
    The references inside a split state are listed in the record's own list."""
    out = dict(value)
    images = []
    for image in value.get("loops") or ():
        image = _walk(image, threshold, blobs, found)
        state = image.get("state") if isinstance(image, dict) else None
        if isinstance(state, bytes) and len(state) > threshold and not is_split(state):
            inner: list[bytes] = []
            tree = _walk(_decode_raw(state), threshold, blobs, inner)
            if inner:
                found.extend(d for d in inner if d not in found)
                image["state"] = bytes((MARK,)) + _encode((inner, msgspec.Raw(_encode(tree))))
        images.append(image)
    out["loops"] = images
    return out


def references(body: bytes) -> list[bytes]:
    """The digests a split ``body`` refers to, in order of first use (none when
    the body is damaged: ``join`` then names the record)."""
    try:
        digests, _ = _decode_split(memoryview(body)[1:])
    except msgspec.DecodeError:
        return []
    return digests


def verify_blob(session: str, seq: int, digest: bytes, data: bytes | None) -> bytes:
    """``data``, once it is known to be the blob ``digest``; ``JournalCorruptError``
    naming the record at ``seq`` when it is missing or damaged."""
    if data is None:
        raise JournalCorruptError(
            session, seq, f"the blob {digest.hex()} it refers to is missing from the blob table"
        )
    if blob_digest(data) != digest:
        raise JournalCorruptError(
            session, seq, f"the blob {digest.hex()} it refers to is damaged (digest mismatch)"
        )
    return data


def join(session: str, seq: int, body: bytes, found: Mapping[bytes, bytes | None]) -> bytes:
    """The event bytes of a split ``body``, its references replaced by the
    blobs in ``found`` (each verified against its digest)."""
    try:
        digests, tree = _decode_split(memoryview(body)[1:])
    except msgspec.DecodeError as exc:
        raise JournalCorruptError(session, seq, f"undecodable bytes ({exc})") from exc
    blobs = {d: verify_blob(session, seq, d, found.get(d)) for d in digests}

    def resolve(code: int, data: memoryview) -> msgspec.Raw:
        blob = blobs.get(bytes(data)) if code == _EXT else None
        if blob is None:
            raise JournalCorruptError(session, seq, "it holds a reference it does not list")
        return msgspec.Raw(blob)

    try:
        whole = msgspec.msgpack.decode(tree, ext_hook=resolve)
    except msgspec.DecodeError as exc:
        raise JournalCorruptError(session, seq, f"undecodable bytes ({exc})") from exc
    if isinstance(whole, dict) and whole.get("type") == "session.checkpoint":
        for image in whole.get("loops") or ():
            state = image.get("state") if isinstance(image, dict) else None
            if isinstance(state, bytes) and is_split(state):
                image["state"] = join(session, seq, state, blobs)
    return _encode(whole)


def wanted(bodies: Iterable[bytes]) -> set[bytes]:
    """The digests every split body among ``bodies`` refers to."""
    digests: set[bytes] = set()
    for body in bodies:
        if is_split(body):
            digests.update(references(body))
    return digests
