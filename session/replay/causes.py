"""Causes: which record made each record happen, and the chains they form.

A record's ``cause`` is the id of an earlier record of the same session (or
None: it came from outside the journal — a command without a key, a loop's
start, a restore).  Pure over records already read.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

__all__ = ["CAUSE_COLUMNS", "Cause", "cause_rows", "causes_of", "chain_of", "render_causes"]

from journal import Record

from .text import painted


class Cause(msgspec.Struct, frozen=True, kw_only=True):
    """One record and the record that caused it (``tree_json``'s ``causes``)."""

    seq: int
    id: str
    kind: str
    cause: str
    cause_seq: int | None
    """seq of the record ``cause`` names (None: no earlier record has that id)."""


def _kind(record: Record) -> str:
    return record.event.__struct_config__.tag  # type: ignore[return-value]


def causes_of(records: Iterable[Record]) -> list[Cause]:
    """Every record that has a cause, with the seq of the record it names."""
    seqs: dict[str, int] = {}
    out: list[Cause] = []
    for r in records:
        if r.cause is not None:
            out.append(
                Cause(seq=r.seq, id=r.id, kind=_kind(r), cause=r.cause, cause_seq=seqs.get(r.cause))
            )
        seqs[r.id] = r.seq
    return out


def chain_of(records: list[Record], seq: int) -> list[Record]:
    """The record at ``seq`` and its causes, newest first, up to a record
    without one."""
    by_id = {r.id: r for r in records}
    found = next((r for r in records if r.seq == seq), None)
    chain: list[Record] = []
    while found is not None and found not in chain:
        chain.append(found)
        found = by_id.get(found.cause) if found.cause is not None else None
    return chain


CAUSE_COLUMNS = ("seq", "loop", "kind", "id", "caused by")


def cause_rows(records: list[Record]) -> list[tuple[str, ...]]:
    """``render_causes`` as rows of ``CAUSE_COLUMNS`` (a table on a terminal)."""
    by_id = {r.id: r for r in records}
    rows: list[tuple[str, ...]] = []
    for r in records:
        caused = ""
        if r.cause is not None:
            cause = by_id.get(r.cause)
            named = f"{cause.seq} {_kind(cause)}" if cause is not None else "?"
            caused = f"{named} ({r.cause})"
        rows.append((str(r.seq), r.loop, _kind(r), r.id, caused))
    return rows


def render_causes(records: list[Record], *, color: bool = False) -> str:
    """One line per record: its seq, loop, kind and id, then ``⟵`` the seq and
    kind of the record that caused it."""
    by_id = {r.id: r for r in records}
    lines = []
    for r in records:
        line = f"{r.seq:>5} {r.loop} {_kind(r)} {r.id}"
        if r.cause is not None:
            cause = by_id.get(r.cause)
            named = f"{cause.seq} {_kind(cause)}" if cause is not None else "?"
            line += painted("dim", f"  ⟵ {named} ({r.cause})", color=color)
        lines.append(line)
    return "\n".join(lines)
