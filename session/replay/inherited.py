"""What a fork inherited: its source's conversation up to the fork's seq,
shown before the fork's own records and marked as not the fork's.

Only reads.  A fork's own records begin with ``session.forked`` and a base
checkpoint; the conversation it goes on from lives in its source (and, when
the source is a fork too, in the source's source).
"""

from __future__ import annotations

from journal import Journal, JournalError, Record, SessionNotFoundError
from journal.events import SessionForked

from .text import painted
from .transcript import render_transcript

__all__ = ["MARK", "inherited_lines"]

MARK = "│ "
"""Begins every inherited line, so none reads as one of the fork's own records."""


async def inherited_lines(journal: Journal, first: Record, *, color: bool = False) -> list[str]:
    """The transcript lines ``first``'s session inherited, outermost source
    first, each source under a heading; none when ``first`` is not a
    ``session.forked`` record.  A source that is gone or damaged is named in
    its place: what the fork holds itself is still shown."""
    chain: list[tuple[str, int, list[Record], str | None]] = []
    seen: set[str] = set()
    opening: Record | None = first
    while opening is not None:
        event = opening.event
        if not isinstance(event, SessionForked) or event.source in seen:
            break
        seen.add(event.source)
        records, problem = await _read_up_to(journal, event.source, event.seq)
        chain.append((event.source, event.seq, records, problem))
        opening = records[0] if records else None
    lines: list[str] = []
    for source, seq, records, problem in reversed(chain):
        heading = f"inherited from session {source}, seq 1 to {seq} (--no-inherited hides it)"
        lines.append(painted("dim", MARK + heading, color=color))
        if problem is not None:
            lines.append(painted("notice", f"{MARK}{problem}", color=color))
        text = render_transcript(records, color=color)
        lines.extend(MARK + line for line in text.splitlines())
    return lines


async def _read_up_to(journal: Journal, session: str, seq: int) -> tuple[list[Record], str | None]:
    records: list[Record] = []
    try:
        async for record in journal.read(session):
            if record.seq > seq:
                break
            records.append(record)
    except SessionNotFoundError:
        return [], f"session {session} is not in this journal: its conversation cannot be shown"
    except JournalError as exc:
        last = records[-1].seq if records else 0
        return records, f"session {session} cannot be read past seq {last}: {exc}"
    return records, None
