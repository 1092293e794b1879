"""PostgreSQL binary arrays, encoded here for the writer's fast path.

The fast path sends its columns as arrays in PostgreSQL's binary array
format.  psycopg's list dumper is Python that looks up a dumper for every
element, a large share of a group commit; these know their element types
beforehand (the figures: ``benchmarks/README.md``, "Figures behind the
code's reasons").  The checked path, which runs far less often, keeps
psycopg's.  A connection that
sends them registers ``ArrayDumper`` for ``Array``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, ClassVar

from psycopg import postgres, pq
from psycopg.adapt import Dumper

__all__ = ["Array", "ArrayDumper", "bytea_array", "int8_array", "text_array"]


class Array(bytes):
    """A one-dimensional array already in PostgreSQL's binary format, for a ``%b``."""

    __slots__ = ()
    oid: ClassVar[int]


class _TextArray(Array):
    __slots__ = ()
    oid = postgres.types["text"].array_oid


class _Int8Array(Array):
    __slots__ = ()
    oid = postgres.types["int8"].array_oid


class _ByteaArray(Array):
    __slots__ = ()
    oid = postgres.types["bytea"].array_oid


class ArrayDumper(Dumper):
    """Passes an ``Array`` through as it is, typed by its class."""

    format = pq.Format.BINARY

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        assert issubclass(cls, Array)
        self.oid = cls.oid

    def dump(self, obj: Any) -> bytes:
        return obj


_ARRAY_HEADER = struct.Struct("!iiIii")
"""Dimensions (1), whether any element is NULL, element type, length, lower bound (1)."""

_INT8_ELEMENT = struct.Struct("!iq")
"""An int8 element: its length (8) and value."""

_NULL_ELEMENT = struct.pack("!i", -1)

_TEXT_OID = postgres.types["text"].oid
_BYTEA_OID = postgres.types["bytea"].oid
_INT8_OID = postgres.types["int8"].oid


def _varlena_array(element: int, values: Sequence[bytes | None]) -> bytes:
    """The binary array of ``values``: elements of type ``element`` already encoded, None NULL."""
    if not values:
        return struct.pack("!iiI", 0, 0, element)
    parts = [_ARRAY_HEADER.pack(1, None in values, element, len(values), 1)]
    for value in values:
        if value is None:
            parts.append(_NULL_ELEMENT)
        else:
            parts.append(len(value).to_bytes(4, "big"))
            parts.append(value)
    return b"".join(parts)


def text_array(values: Sequence[str | None], encoding: str) -> _TextArray:
    """A ``text[]`` parameter; ``encoding`` is the connection's (``conn.info.encoding``)."""
    encoded = [None if v is None else v.encode(encoding) for v in values]
    return _TextArray(_varlena_array(_TEXT_OID, encoded))


def bytea_array(values: Sequence[bytes]) -> _ByteaArray:
    return _ByteaArray(_varlena_array(_BYTEA_OID, values))


def int8_array(values: Sequence[int]) -> _Int8Array:
    if not values:
        return _Int8Array(struct.pack("!iiI", 0, 0, _INT8_OID))
    header = _ARRAY_HEADER.pack(1, 0, _INT8_OID, len(values), 1)
    return _Int8Array(header + b"".join([_INT8_ELEMENT.pack(8, v) for v in values]))
