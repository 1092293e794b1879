"""Helpers for loop and session tests."""

from __future__ import annotations

from typing import Any

from journal import Journal, Record


async def records(journal: Journal, session_id: str) -> list[Record]:
    return [r async for r in journal.read(session_id)]


async def tags(journal: Journal, session_id: str, *, loop: str | None = None) -> list[str]:
    """The event tags of a session, in seq order (one loop's with ``loop``)."""
    return [
        r.event.__struct_config__.tag  # type: ignore[attr-defined]
        for r in await records(journal, session_id)
        if loop is None or r.loop == loop
    ]


async def events_of(journal: Journal, session_id: str, kind: type[Any]) -> list[Any]:
    return [r.event for r in await records(journal, session_id) if isinstance(r.event, kind)]


def squash(seq: list[str], tag: str = "model.output") -> list[str]:
    """Collapse runs of ``tag`` into one (how many chunks arrive is pacing)."""
    out: list[str] = []
    for t in seq:
        if t == tag and out and out[-1] == tag:
            continue
        out.append(t)
    return out
