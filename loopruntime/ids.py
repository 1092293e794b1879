"""Ids of the loop's records, calls, gates and inputs."""

import itertools
import os

__all__ = ["RECORD_PREFIXES", "new_id"]

RECORD_PREFIXES = frozenset({"ev_", "cp_", "exe_"})
"""Prefixes of the ids of journal records: a loop's, a checkpoint's, and a
tool call's execution id (which names its ``tool.started`` record)."""


def _counter() -> "itertools.count[int]":
    # A random start below 2**31: two processes rarely count through the same
    # values, and one process makes 2**31 ids before its digits wrap.
    return itertools.count(int.from_bytes(os.urandom(4)) >> 1)


_records = _counter()


def _recount() -> None:
    # A forked child must not count through its parent's values.
    global _records
    _records = _counter()


os.register_at_fork(after_in_child=_recount)


def new_id(prefix: str) -> str:
    """A fresh id: ``prefix`` + 16 hex digits.

    Every other id is 16 random digits.  A record id (``RECORD_PREFIXES``) is
    8 digits that count up within the process, from a random start, then 8
    random ones: still unique (the count within a process, the random half
    between processes), and a session's records made one after another get
    increasing ids, so the journal's index of record ids grows at its end
    instead of changing a page at random for every record (with random ids a
    step wrote more pages the longer the history was)."""
    if prefix in RECORD_PREFIXES:
        return f"{prefix}{next(_records) & 0xFFFFFFFF:08x}{os.urandom(4).hex()}"
    return prefix + os.urandom(8).hex()
