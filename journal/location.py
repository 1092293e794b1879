"""Where a journal is: every rule that turns a URL or a path into a location.

* ``memory:`` (anything after the colon is ignored) is a journal kept in
  process memory.
* ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` is a
  SQLite file (the part after ``sqlite:///`` is the path, as in SQLAlchemy),
  with the query options ``synchronous=NORMAL|FULL`` and ``poll=<seconds>``.
* ``postgresql://...`` or ``postgres://...`` is a PostgreSQL database; the
  URL goes to libpq without loopruntime's own options (``conninfo``), the
  rest of its query (``sslmode``, ``options`` ...) as it is.
* Anything else without ``://`` is a filesystem path to a SQLite file.
* Every URL may carry ``blob_threshold=<size>`` (``memory:?blob_threshold=...``
  too): the bytes above which a unit is stored by reference
  (``journal.blobs``), as a number of bytes or with a unit (``512KiB``,
  ``1MiB``, ``1MB``; ``KiB``/``MiB``/``GiB`` are powers of 1024, ``KB``/``MB``/
  ``GB`` powers of 1000).  It travels with the URL, so every process given the
  URL splits records alike.
* Every URL may carry ``max_entry_bytes=<size>`` too: the most bytes one
  inbox entry's command may take (``journal.inbox.MAX_ENTRY_BYTES`` when
  absent); a larger one is refused before it is stored.

Pure: nothing here touches the disk or the network (``journal.opening`` does).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, TypedDict
from urllib.parse import parse_qs, unquote_plus

import msgspec

__all__ = ["DEFAULT_POLL", "JournalLocation", "parse_location", "parse_size"]

DEFAULT_POLL = 0.25
"""Seconds between a SQLite ``tail``'s looks for appends by other processes."""

Scheme = Literal["memory", "sqlite", "postgresql"]


class JournalLocation(msgspec.Struct, frozen=True, kw_only=True):
    """A journal URL or path, parsed and checked."""

    scheme: Scheme
    url: str
    """The URL to open (a plain path becomes ``sqlite:///<path>``)."""
    path: str | None = None
    """The SQLite file; None for the other schemes."""
    synchronous: str = "NORMAL"
    """SQLite's ``synchronous`` pragma: ``NORMAL`` or ``FULL``."""
    poll: float = DEFAULT_POLL
    """Seconds between a SQLite tail's looks for appends by other processes."""
    plain_path: bool = False
    """Given as a filesystem path rather than a URL."""
    blob_threshold: int | None = None
    """The URL's ``blob_threshold`` in bytes; None when it names none."""
    max_entry_bytes: int | None = None
    """The URL's ``max_entry_bytes``; None when it names none."""
    conninfo: str | None = None
    """The URL handed to libpq (without loopruntime's options); None but for PostgreSQL."""


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_SIZE = re.compile(r"\s*(\d+)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str) -> int | None:
    """The positive number of bytes ``text`` names (``1048576``, ``512KiB``,
    ``1MiB``, ``2MB``), or None when it names none."""
    match = _SIZE.fullmatch(text)
    if match is None or match.group(2).lower() not in _UNITS:
        return None
    size = int(match.group(1)) * _UNITS[match.group(2).lower()]
    return size if size > 0 else None


def _size_option(url: str, name: str, value: str) -> int:
    size = parse_size(value)
    if size is None:
        raise ValueError(
            f"journal URL {url!r}: {name} must be a positive number of bytes such as "
            f"1048576, 512KiB or 1MiB, not {value!r}"
        )
    return size


_SIZE_OPTIONS = ("blob_threshold", "max_entry_bytes")


class _Sizes(TypedDict, total=False):
    blob_threshold: int
    max_entry_bytes: int


def _sized(sizes: dict[str, int]) -> _Sizes:
    """The size options found, as ``JournalLocation``'s fields."""
    found = _Sizes()
    if "blob_threshold" in sizes:
        found["blob_threshold"] = sizes["blob_threshold"]
    if "max_entry_bytes" in sizes:
        found["max_entry_bytes"] = sizes["max_entry_bytes"]
    return found


def parse_location(url_or_path: str) -> JournalLocation:
    """The location named by a journal URL or a filesystem path.

    ``ValueError`` (saying which forms are accepted) for an unknown scheme, a
    SQLite URL that names no file, or an unknown or malformed option.
    """
    if url_or_path.startswith("memory:"):
        return _memory(url_or_path)
    if "://" not in url_or_path:
        path = str(Path(url_or_path))
        return _sqlite(f"sqlite:///{path}", plain_path=True)
    if url_or_path.startswith("sqlite:"):
        return _sqlite(url_or_path, plain_path=False)
    if url_or_path.startswith(("postgresql:", "postgres:")):
        return _postgresql(url_or_path)
    raise ValueError(
        f"unknown journal URL {url_or_path!r}: use 'memory:', 'sqlite:///path/to/file.db' or "
        "'postgresql://user@host/db'"
    )


def _memory(url: str) -> JournalLocation:
    _, question, query = url.partition("?")
    sizes: dict[str, int] = {}
    for key, values in parse_qs(query, keep_blank_values=True).items() if question else ():
        if key not in _SIZE_OPTIONS:
            raise ValueError(
                f"journal URL {url!r}: unknown option {key!r}; a memory journal knows only "
                "blob_threshold=<size> and max_entry_bytes=<size>"
            )
        sizes[key] = _size_option(url, key, values[-1])
    return JournalLocation(scheme="memory", url=url, **_sized(sizes))


def _postgresql(url: str) -> JournalLocation:
    base, question, query = url.partition("?")
    sizes: dict[str, int] = {}
    kept = []
    for part in query.split("&") if question else ():
        key, _, value = part.partition("=")
        if unquote_plus(key) in _SIZE_OPTIONS:
            sizes[unquote_plus(key)] = _size_option(url, unquote_plus(key), unquote_plus(value))
        elif part:
            kept.append(part)
    conninfo = f"{base}?{'&'.join(kept)}" if kept else base
    return JournalLocation(scheme="postgresql", url=url, conninfo=conninfo, **_sized(sizes))


def _sqlite(url: str, *, plain_path: bool) -> JournalLocation:
    rest, _, query = url[len("sqlite:") :].partition("?")
    if rest.startswith("///"):
        path = rest[3:]
    elif rest.startswith("//"):
        raise ValueError(
            f"journal URL {url!r} names a host; use 'sqlite:///relative/path.db' or "
            "'sqlite:////absolute/path.db'"
        )
    else:
        path = rest
    if not path or path == ":memory:" or path.startswith("file:"):
        raise ValueError(
            f"journal URL {url!r} does not name a database file; use "
            "'sqlite:///path/to/file.db' (or 'memory:' for a journal that is not kept)"
        )
    synchronous, poll = "NORMAL", DEFAULT_POLL
    sizes: dict[str, int] = {}
    for key, values in parse_qs(query, keep_blank_values=True, strict_parsing=False).items():
        value = values[-1]
        if key == "synchronous":
            synchronous = value.upper()
            if synchronous not in ("NORMAL", "FULL"):
                raise ValueError(
                    f"journal URL {url!r}: synchronous must be NORMAL or FULL, not {value!r}"
                )
        elif key == "poll":
            try:
                poll = float(value)
            except ValueError:
                poll = -1.0
            if not poll > 0:
                raise ValueError(
                    f"journal URL {url!r}: poll must be a positive number of seconds, not {value!r}"
                )
        elif key in _SIZE_OPTIONS:
            sizes[key] = _size_option(url, key, value)
        else:
            raise ValueError(
                f"journal URL {url!r}: unknown option {key!r}; known options are "
                "synchronous=NORMAL|FULL, poll=<seconds>, blob_threshold=<size> and "
                "max_entry_bytes=<size>"
            )
    return JournalLocation(
        scheme="sqlite",
        url=url,
        path=path,
        synchronous=synchronous,
        poll=poll,
        plain_path=plain_path,
        **_sized(sizes),
    )
