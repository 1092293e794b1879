"""Where a journal is: every rule that turns a URL or a path into a location.

* ``memory:`` (anything after the colon is ignored) is a journal kept in
  process memory.
* ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` is a
  SQLite file (the part after ``sqlite:///`` is the path, as in SQLAlchemy),
  with the query options ``synchronous=NORMAL|FULL`` and ``poll=<seconds>``.
* ``postgresql://...`` or ``postgres://...`` is a PostgreSQL database; the
  URL goes to libpq as it is.
* Anything else without ``://`` is a filesystem path to a SQLite file.

Pure: nothing here touches the disk or the network (``journal.opening`` does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs

import msgspec

__all__ = ["DEFAULT_POLL", "JournalLocation", "parse_location"]

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


def parse_location(url_or_path: str) -> JournalLocation:
    """The location named by a journal URL or a filesystem path.

    ``ValueError`` (saying which forms are accepted) for an unknown scheme, a
    SQLite URL that names no file, or an unknown or malformed option.
    """
    if url_or_path.startswith("memory:"):
        return JournalLocation(scheme="memory", url=url_or_path)
    if "://" not in url_or_path:
        path = str(Path(url_or_path))
        return _sqlite(f"sqlite:///{path}", plain_path=True)
    if url_or_path.startswith("sqlite:"):
        return _sqlite(url_or_path, plain_path=False)
    if url_or_path.startswith(("postgresql:", "postgres:")):
        return JournalLocation(scheme="postgresql", url=url_or_path)
    raise ValueError(
        f"unknown journal URL {url_or_path!r}: use 'memory:', 'sqlite:///path/to/file.db' or "
        "'postgresql://user@host/db'"
    )


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
        else:
            raise ValueError(
                f"journal URL {url!r}: unknown option {key!r}; known options are "
                "synchronous=NORMAL|FULL and poll=<seconds>"
            )
    return JournalLocation(
        scheme="sqlite",
        url=url,
        path=path,
        synchronous=synchronous,
        poll=poll,
        plain_path=plain_path,
    )
