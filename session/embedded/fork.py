"""Forking a session: a new session that starts where another stood at a seq.

* The source is only read, never written.
* The fork's seq 1 is ``session.forked`` (source, seq, the source's digest
  there), its seq 2 a checkpoint with ``previous=0`` picturing every loop of
  the source at that seq; both go in one append, so a fork is never seen
  half-written.
* Everything is checked before that append (the seq, the source and its
  check, the new id): a refused fork writes nothing.
* What was open at the seq is settled when the fork is first opened, by the
  same rules as a restore after a crash (``settle_restored``).

docs/restore.md ("Fork") tells the story.
"""

from __future__ import annotations

from journal import Draft, Journal, Record, SessionNotFoundError
from journal.events import (
    CHECKPOINT_STREAM,
    CollabStarted,
    LoopImage,
    SessionCheckpoint,
    SessionForked,
)
from loopruntime import LoopState
from loopruntime.host import image_bytes, new_id

from .check.checker import check_read
from .checkpoints import SessionFolder
from .errors import ForkError, SessionExistsError, UnknownSessionError

__all__ = ["inherited_records", "lineage", "plan_fork", "write_fork"]


class ForkPlan:
    """What a fork will hold, worked out (and checked) before anything is written."""

    __slots__ = ("at", "digest", "new_session_id", "root", "source", "states")

    def __init__(
        self,
        source: str,
        at: int,
        digest: bytes,
        new_session_id: str,
        states: dict[str, LoopState],
        root: str = "",
    ) -> None:
        self.source, self.at, self.digest = source, at, digest
        self.new_session_id = new_session_id
        self.states = states
        self.root = root or source


async def lineage(journal: Journal, session_id: str) -> SessionForked | None:
    """The ``session.forked`` marker of a fork (None for a session that is not one)."""
    async for record in journal.read(session_id):
        event = record.event
        return event if isinstance(event, SessionForked) and record.seq == 1 else None
    return None


async def inherited_records(journal: Journal, session_id: str) -> list[Record]:
    """The records a fork inherits, oldest first: its source's up to the seq it
    was cut at (with, for a fork of a fork, what that source inherited).
    Empty for a session that is not a fork, or whose source is not in
    ``journal``.  Their seqs are their own session's."""
    forked = await lineage(journal, session_id)
    if forked is None:
        return []
    try:
        found = await inherited_records(journal, forked.source)
        found += await _read_until(journal, forked.source, forked.seq)
    except SessionNotFoundError:
        return []
    return found


async def plan_fork(
    journal: Journal, session_id: str, at: int, new_session_id: str | None = None
) -> ForkPlan:
    """Read the source up to ``at``, check it, and fold it: everything a fork
    needs, or a named error (``ForkError``, ``UnknownSessionError``,
    ``SessionExistsError``).  Never writes."""
    if isinstance(at, bool) or not isinstance(at, int):
        raise ForkError(f"a fork is cut at a seq (a whole number), not {at!r}")
    try:
        head = await journal.head(session_id)
    except SessionNotFoundError:
        head = 0
    if head == 0:
        raise UnknownSessionError(
            f"there is no session {session_id} in journal {journal.url} to fork; "
            "`loopruntime sessions` lists the ones there are"
        )
    if not 1 <= at <= head:
        raise ForkError(
            f"cannot fork session {session_id} at seq {at}: its records are seq 1..{head}; "
            "`loopruntime replay SESSION` shows each record's seq"
        )
    new_session_id = new_session_id or new_id("ses_")
    try:
        taken = await journal.head(new_session_id)
    except SessionNotFoundError:
        taken = 0
    if taken or new_session_id == session_id:
        raise SessionExistsError(
            f"session {new_session_id} already exists in journal {journal.url}; "
            "name a new session id for the fork, or leave it out to get a fresh one"
        )
    # A fork's state at seq 1 is its base, pictured at seq 2: read that far.
    records = await _read_until(journal, session_id, max(at, 2))
    report = await check_read(journal, session_id, records)
    if not report.ok:
        raise ForkError(
            f"cannot fork session {session_id}: its journal fails its check up to seq {at} "
            f"({report.summary()}); `loopruntime replay {session_id} --check` lists the problems"
        )
    folder = SessionFolder()
    for record in records:
        if record.seq > at and not (record.seq == 2 and folder.forked is not None):
            break
        if isinstance(record.event, CollabStarted):
            raise ForkError(
                f"cannot fork session {session_id}: it runs a collaboration (seq {record.seq}), "
                "and a fork does not carry a collaboration's own stream"
            )
        folder.feed(record)
    states = {loop_id: state for loop_id, state in folder.states.items() if state.loop}
    if not states:
        raise ForkError(
            f"cannot fork session {session_id} at seq {at}: no loop has started by then; "
            "fork at a later seq"
        )
    digest = records[at - 1].digest
    # A fork of a fork belongs to the conversation its source belongs to.
    source_fork = folder.forked
    root = (source_fork.root or source_fork.source) if source_fork is not None else session_id
    return ForkPlan(session_id, at, digest, new_session_id, states, root)


async def _read_until(journal: Journal, session_id: str, seq: int) -> list[Record]:
    found: list[Record] = []
    async for record in journal.read(session_id):
        found.append(record)
        if record.seq >= seq:
            break
    return found


async def write_fork(journal: Journal, plan: ForkPlan) -> list[Record]:
    """Append the fork's first two records (one atomic append): the marker
    and the full checkpoint of every loop at the fork's seq."""
    images = tuple(
        LoopImage(loop=loop_id, state=image_bytes(state), messages=tuple(state.messages))
        for loop_id, state in plan.states.items()
    )
    drafts = [
        Draft(
            id=new_id("ev_"),
            loop=CHECKPOINT_STREAM,
            event=SessionForked(
                source=plan.source, seq=plan.at, digest=plan.digest, root=plan.root
            ),
        ),
        Draft(
            id=new_id("cp_"),
            loop=CHECKPOINT_STREAM,
            event=SessionCheckpoint(previous=0, loops=images),
        ),
    ]
    lease = await journal.open_session(plan.new_session_id, create=True)
    if lease.head:
        raise SessionExistsError(
            f"session {plan.new_session_id} was created by someone else while the fork "
            "was prepared; fork again with another id"
        )
    return await journal.append(lease, drafts, expected_seq=0)
