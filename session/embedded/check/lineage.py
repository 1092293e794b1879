"""A fork's lineage checked: its starting state against its source.

Only reads.  The checker's ``check`` calls it for a session whose seq 1 is
``session.forked``; the rules over the fork's own records are the checker's.
"""

from __future__ import annotations

from journal import Journal, JournalError, Record, SessionNotFoundError
from journal.events import SessionForked

from ..checkpoints import SessionFolder, fork_base

__all__ = ["fork_source_problem"]


async def fork_source_problem(
    journal: Journal, forked: SessionForked, base: Record
) -> tuple[str | None, str | None]:
    """``(problem, note)``: what is wrong with the fork's base (seq 2) as a
    picture of ``forked.source`` at ``forked.seq``, and what could not be
    compared (a source that is not in ``journal``).  The source must still
    hold the history the fork was cut from (the same digest at that seq) and
    its fold there must equal the base, loop by loop."""
    try:
        pictured = fork_base(base)
    except JournalError:
        return None, None  # reported by the rules over the fork's own records
    folder = SessionFolder()
    digest: bytes | None = None
    try:
        async for record in journal.read(forked.source):
            if record.seq > forked.seq and not (record.seq == 2 and folder.forked):
                break
            if record.seq == forked.seq:
                digest = record.digest
            folder.feed(record)
    except SessionNotFoundError:
        return None, (
            f"the source session {forked.source} is not in this journal: the fork's starting "
            "state was not compared with it"
        )
    except JournalError as exc:
        return f"the source {forked.source} cannot be read: {exc}", None
    if digest is None:
        return f"the source {forked.source} has no seq {forked.seq}", None
    if digest != forked.digest:
        return (
            f"the digest of {forked.source} at seq {forked.seq} is not the one the fork names: "
            "the source's history changed since the fork",
            None,
        )
    source = {loop_id: st for loop_id, st in folder.states.items() if st.loop}
    differ = sorted(
        loop_id
        for loop_id in source.keys() | pictured.keys()
        if source.get(loop_id) != pictured.get(loop_id)
    )
    if differ:
        return (
            f"loop(s) {', '.join(differ)} differ from the fold of {forked.source} "
            f"up to seq {forked.seq}",
            None,
        )
    return None, None
