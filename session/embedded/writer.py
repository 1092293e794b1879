"""The single writer of a session: every record is appended here.

Commits that arrive together (from any loop of the session) go into one
atomic append, with a checkpoint in front when one is due; the records are
then folded into their streams in seq order, pushed to subscribers, and only
then are the committers released.  A journal failure stops the writer: every
waiting and later commit fails with it.

A commit that gates nothing outside the process (``durability.may_pipeline``)
is pipelined: it is folded at once, under the seqs the journal will give it,
and its caller goes on without waiting; its records go to the journal with the
next commit that must be durable (their barrier), or on their own once
``LINGER`` has passed without one (one task of the trio run watches every
session's), and are published only once durable.  A pipelined commit is folded
at once only while nothing folds later ahead of it (no waiting commit is
queued or being appended); otherwise it simply waits its turn.

The module is one piece: group commit, pipelining, the writer task's comings
and goings and the failure path all work on the same queues, head and fold
mark; split, each part would need the others' private fields.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any, Protocol

import msgspec
import structlog
import trio

from journal import Draft, Journal, Record
from journal.events import Event
from journal.inbox import Consumed, InboxOutcome
from loopruntime import Loop
from loopruntime.host import NO_LIST, GuardFailedError, new_id, own_list

from .checkpoints import Checkpointer
from .commit_latency import observe_commit
from .durability import may_pipeline
from .linger import Lingering
from .subscriptions import Subscriber

__all__ = ["CommitStatistics", "Expectation", "Stream", "Writer"]

log = structlog.wrap_logger(logging.getLogger(__name__))

IDLE_EXIT = 1.0
"""Seconds the writer task stays up with nothing to do: a busy session keeps
it, an idle one lets it go (a parked task, with its nursery and cancel
scopes, is memory every idle session would hold)."""


class Stream(Protocol):
    """What records are committed for: a loop, or a collaboration's stream."""

    id: str

    def apply(self, record: Record) -> None: ...


class Expectation:
    """An inbox entry waiting for the commit that applies it (``Writer.expect``).

    ``match`` is shown each event committed for ``loop`` (any loop when None)
    and returns the entry's outcome for the one the command made; that event's
    append then consumes the entry, in its own transaction."""

    __slots__ = ("entry", "loop", "match", "outcome")

    def __init__(
        self, entry: int, loop: str | None, match: Callable[[Event], InboxOutcome | None]
    ) -> None:
        self.entry, self.loop, self.match = entry, loop, match
        self.outcome: InboxOutcome | None = None
        """Set once the append that consumed the entry is durable."""


class CommitStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A session writer's counts since it was made (``Session.commit_statistics``)."""

    waits: int
    """Commits whose caller waited until they were durable."""
    pipelined: int
    """Commits folded at once and appended behind a later one, unwaited."""
    appends: int
    """Journal appends made (each one transaction, with group commit maybe fewer)."""


class _Pending:
    """One commit on its way: its own answer (set once), and an event only
    when its caller has to wait for it (most commits are answered before
    anyone asks: pipelined, or appended from the caller's own task)."""

    __slots__ = ("_done", "consumes", "drafts", "error", "folded", "guard", "loop", "records")

    def __init__(
        self, loop: Stream | None, drafts: list[Draft], guard: Callable[[], bool] | None
    ) -> None:
        self.loop = loop
        self.drafts = drafts
        self.guard = guard
        self.consumes: list[Consumed] | None = None
        self.records: list[Record] | None = None
        self.error: BaseException | None = None
        self._done: trio.Event | None = None
        self.folded: list[Record] | None = None
        """A pipelined commit: the records it was folded as (seq and id are
        the journal's to be; a checkpoint's pending has ``loop`` None)."""

    def set(self, records: list[Record]) -> None:
        if self.records is None and self.error is None:
            self.records = records
            if self._done is not None:
                self._done.set()

    def fail(self, error: BaseException) -> None:
        if self.records is None and self.error is None:
            self.error = error
            if self._done is not None:
                self._done.set()

    def result(self) -> list[Record]:
        if self.error is not None:
            raise self.error
        assert self.records is not None, "the commit is not settled yet"
        return self.records

    async def wait(self) -> list[Record]:
        if self.records is None and self.error is None:
            self._done = trio.Event()
            await self._done.wait()
        return self.result()


class Writer:
    """Group commit for one session: ``commit`` from any task, ``run`` as the
    session's background writer task, once ``open`` gave it the lease."""

    # Slots: one writer per session, idle sessions by the hundred thousand.
    __slots__ = (
        "_durable",
        "_expecting",
        "_explicit",
        "_failed",
        "_flush_due",
        "_folded_to",
        "_lease",
        "_nursery",
        "_queue",
        "_running",
        "_staged",
        "_subscribers",
        "_taken",
        "_unfolded",
        "_wake",
        "_writing",
        "appends",
        "checkpoints",
        "head",
        "journal",
        "loops",
        "pipelined",
        "session_id",
        "waits",
    )

    def __init__(
        self,
        journal: Journal,
        session_id: str,
        loops: Mapping[str, Loop],
        subscribers: dict[Subscriber, None],
        checkpoints: Checkpointer,
    ) -> None:
        self.journal = journal
        self.loops = loops
        """The session's loops (its own dict): a checkpoint pictures them all."""
        self.checkpoints = checkpoints
        self.head = 0
        """seq of the last durable record of the session."""
        self._subscribers = subscribers
        self._queue: list[_Pending] = NO_LIST
        self._wake: trio.Event | None = None
        """What the writer task waits on between batches (made as it starts
        waiting, dropped when the task leaves: an idle session keeps none)."""
        self._nursery: trio.Nursery | None = None
        self._running = False
        """The writer task is alive (it exits after ``IDLE_EXIT`` with no work,
        so an idle session keeps no task for it)."""
        self._writing = False
        self._failed: BaseException | None = None
        self._lease: Any = None
        self._expecting: list[Expectation] = NO_LIST
        self._explicit = 0
        """``consume`` calls queued and not yet appended."""
        self._staged: list[_Pending] = NO_LIST
        """Pipelined commits, folded, not yet handed to the journal."""
        self._folded_to = 0
        """seq up to which the loops have folded (the head, plus pipelined
        records folded ahead of their durability)."""
        self._unfolded = False
        """An append under way carries commits that fold once it returns."""
        self._taken = 0
        """Appends that took pipelined commits: ``Lingering`` tells by it
        whether the commits it was asked to flush are still waiting."""
        self._flush_due = False
        """The writer task is to append the pipelined commits now."""
        self._durable: trio.lowlevel.ParkingLot | None = None
        """Made by the first ``wait_durable`` that has to wait (an idle
        session keeps none)."""
        self.waits = 0
        """Commits whose callers waited for durability (statistics)."""
        self.pipelined = 0
        """Commits folded at once and pipelined behind a later append."""
        self.appends = 0
        self.session_id = session_id

    @property
    def log(self) -> Any:
        """The module logger bound to this session, bound when something is
        logged (rarely: an idle session keeps no bound logger)."""
        return log.bind(session=self.session_id)

    def open(self, lease: Any) -> None:
        """Write under ``lease`` from its head on."""
        self._lease = lease
        self.head = self._folded_to = lease.head

    async def commit(
        self,
        loop: Stream,
        events: Sequence[Event],
        *,
        cause: str | None = None,
        causes: Sequence[str | None] | None = None,
        ids: Sequence[str | None] | None = None,
        guard: Callable[[], bool] | None = None,
    ) -> list[Record]:
        """Append durably, fold into ``loop`` in seq order, publish, return
        (``loopruntime.host.CommitOptions`` says what each option does)."""
        if not events:
            return []
        if self._failed is not None:
            raise self._failed
        if ids is None and causes is None:
            drafts = [Draft(id=new_id("ev_"), loop=loop.id, event=e, cause=cause) for e in events]
        else:
            drafts = [
                Draft(id=i or new_id("ev_"), loop=loop.id, event=e, cause=c)
                for e, i, c in zip(
                    events,
                    repeat(None) if ids is None else ids,
                    repeat(cause) if causes is None else causes,
                    strict=False,
                )
            ]
        pending = _Pending(loop, drafts, guard)
        if guard is None and not self._queue and not self._unfolded and may_pipeline(events):
            return self._stage(pending)
        self.waits += 1
        if not self._writing and not self._queue and guard is None:
            # Nothing in flight: append from this task, sparing the hop to the
            # writer.  Commits arriving meanwhile queue up and go together next.
            staged, self._staged = self._staged, NO_LIST
            if staged:
                self._took()
            group = [*staged, pending]
            self._writing = self._unfolded = True
            try:
                await self._append(group)
            except trio.Cancelled:
                # Nothing was appended (the journal's contract): the pipelined
                # commits, folded already, go with the next append.
                self._staged = staged + self._staged
                raise
            except BaseException as exc:
                self._fail(exc, group)
                raise
            finally:
                self._writing = self._unfolded = False
                self._released()
                if self._queue or self._staged:
                    self._kick()
            return pending.result()
        self._queue = own_list(self._queue)
        self._queue.append(pending)
        self._kick()
        # Shielded: once asked for, a commit runs to its end, so the caller
        # always learns exactly what became durable (and state is folded).
        with trio.CancelScope(shield=True):
            records = await pending.wait()
        return records

    def _stage(self, pending: _Pending) -> list[Record]:
        """Fold a pipelined commit now, under the seqs its append will give it,
        and leave it for the next append (see the module's docstring)."""
        first = not self._staged
        if first:
            # Every loop has folded up to ``_folded_to``: a checkpoint due now,
            # put first, is exactly the fold of the records before it.
            checkpoint = self.checkpoints.draft(self._folded_to, self.loops)
            if checkpoint is not None:
                mark = _Pending(None, [checkpoint], None)
                mark.folded = [self._provisional(checkpoint)]
                # Counted as written now, at the seq it will have: the next
                # checkpoint, even one drafted before this one is durable,
                # links to it.  (If its append fails, the session stops.)
                self.checkpoints.written(mark.folded[0])
                self._staged = own_list(self._staged)
                self._staged.append(mark)
        loop = pending.loop
        assert loop is not None
        records = [self._provisional(d) for d in pending.drafts]
        try:
            for record in records:
                loop.apply(record)
        except BaseException as exc:
            # The fold refused a record this process built: state and journal
            # can no longer be told to agree, so the session stops.
            self._fail(exc, [])
            raise
        pending.folded = records
        self._staged = own_list(self._staged)
        self._staged.append(pending)
        self.pipelined += 1
        if first:
            # Appended with the next barrier, or on their own after LINGER.
            Lingering.of_this_run().add(self, self._taken)
        return records

    def _took(self) -> None:
        """An append is taking the pipelined commits: their linger is over."""
        Lingering.of_this_run().taken(self, self._taken)
        self._taken += 1

    def lingered(self, taken: int) -> None:
        """``LINGER`` has passed since the pipelined commits for append number
        ``taken`` began to wait: append them now, unless a barrier took them."""
        if self._taken != taken or not self._staged:
            return
        try:
            self._kick()
        except RuntimeError as exc:
            # The session's task group has closed without a shutdown (it was
            # cancelled): nothing appends them any more, as after a crash.
            self.log.warning("pipelined_records_not_appended", error=str(exc))

    def _provisional(self, draft: Draft) -> Record:
        """The record ``draft`` will be once appended (its digest aside, which
        nothing folds)."""
        self._folded_to += 1
        return Record(
            seq=self._folded_to,
            id=draft.id,
            session=self.session_id,
            loop=draft.loop,
            at=time.time_ns(),
            cause=draft.cause,
            digest=b"",
            event=draft.event,
        )

    def _released(self) -> None:
        if self._durable is not None:
            self._durable.unpark_all()

    def statistics(self) -> CommitStatistics:
        return CommitStatistics(waits=self.waits, pipelined=self.pipelined, appends=self.appends)

    async def wait_durable(self, seq: int | None = None) -> None:
        """Return once the records up to ``seq`` (default: every record folded
        so far) are durable; raises the writer's failure, if any."""
        target = self._folded_to if seq is None else seq
        while self.head < target:
            if self._failed is not None:
                raise self._failed
            self._kick()
            if self._durable is None:
                self._durable = trio.lowlevel.ParkingLot()
            await self._durable.park()

    async def checkpoint_at_rest(self, after: int) -> None:
        """Append a checkpoint of the session as it stands, alone, when at
        least ``after`` records followed the last one (and checkpoints are
        on): the next restore reads it and nothing after.  For a session
        at rest (every loop quiescent) about to be unloaded; atomic like
        every append, raises the writer's failure."""
        if self._failed is not None:
            raise self._failed
        if self.checkpoints.every is None or self.head - self.checkpoints.last_seq < after:
            return
        await self.wait_durable()
        self.checkpoints.force()
        pending = _Pending(None, [], None)
        self._queue = own_list(self._queue)
        self._queue.append(pending)
        self._kick()
        with trio.CancelScope(shield=True):
            await pending.wait()

    def expect(
        self, entry: int, loop: str | None, match: Callable[[Event], InboxOutcome | None]
    ) -> Expectation:
        """Have the append carrying the first event ``match`` accepts consume
        inbox entry ``entry`` (see ``Expectation``); ``forget`` it when the
        command made no such event."""
        expectation = Expectation(entry, loop, match)
        self._expecting = own_list(self._expecting)
        self._expecting.append(expectation)
        return expectation

    def forget(self, expectation: Expectation) -> None:
        if expectation in self._expecting:
            self._expecting.remove(expectation)

    async def consume(self, consumed: Consumed) -> None:
        """Consume an inbox entry whose command made no records (refused, or
        nothing to do), in an append of its own, in commit order."""
        if self._failed is not None:
            raise self._failed
        pending = _Pending(None, [], None)
        pending.consumes = [consumed]
        self._explicit += 1
        self._queue = own_list(self._queue)
        self._queue.append(pending)
        self._kick()
        with trio.CancelScope(shield=True):
            await pending.wait()

    def _consumes(self, group: list[_Pending]) -> list[Consumed]:
        """The inbox entries ``group``'s append applies (only while any are expected)."""
        found: list[Consumed] = []
        for p in group:
            if p.consumes:
                found += p.consumes
                self._explicit -= len(p.consumes)
            if not self._expecting or p.loop is None:
                continue
            for draft in p.drafts:
                for expectation in self._expecting:
                    if expectation.loop not in (None, p.loop.id):
                        continue
                    outcome = expectation.match(draft.event)
                    if outcome is not None:
                        outcome = msgspec.structs.replace(outcome, record=draft.id)
                        expectation.outcome = outcome
                        self._expecting.remove(expectation)
                        found.append(Consumed(entry=expectation.entry, outcome=outcome))
                        break
        return found

    def _fail(self, exc: BaseException, batch: list[_Pending]) -> None:
        """A journal failure stops the session: nobody may go on believing
        something is durable that is not, and nobody waits forever on a
        commit that will never happen."""
        self._failed = exc
        for p in [*batch, *self._queue, *self._staged]:
            p.fail(exc)
        self._queue = self._staged = NO_LIST
        self._released()
        self.log.error("journal_append_failed", error=repr(exc))

    def start(self, nursery: trio.Nursery) -> None:
        """Run the writer task in ``nursery`` whenever there is work for it."""
        self._nursery = nursery

    def _kick(self) -> None:
        """Have the writer task append what is waiting, pipelined commits
        too, starting it if it is not running."""
        self._flush_due = True
        if self._running:
            if self._wake is not None:
                self._wake.set()
            # else the task has not waited yet: it sees the work before it does.
        elif self._nursery is not None:
            self._running = True
            self._nursery.start_soon(self.run)

    async def run(self) -> None:
        """Append what queued up while an append was under way, and pipelined
        commits whose ``LINGER`` passed with no barrier to ride in (or that
        ``wait_durable`` wants now), until there has been nothing to do for
        ``IDLE_EXIT`` seconds."""
        self._running = True
        try:
            await self._serve()
        finally:
            self._running = False
            self._wake = None

    def _has_work(self) -> bool:
        return not self._writing and bool(self._queue or (self._staged and self._flush_due))

    async def _serve(self) -> None:
        while True:
            if not self._has_work():
                self._wake = wake = trio.Event()
                with trio.move_on_after(IDLE_EXIT):
                    await wake.wait()
                if not wake.is_set() and not self._writing and not self._has_work():
                    return  # idle: the next append that needs a task starts one
                continue
            # In a method of its own, so nothing of the batch stays alive in
            # this frame while it waits for the next one.
            await self._write_batch()

    async def _write_batch(self) -> None:
        staged, self._staged = self._staged, NO_LIST
        if staged:
            self._took()
        self._flush_due = False
        batch, self._queue = self._queue, NO_LIST
        self._writing = True
        self._unfolded = bool(batch)
        try:
            group: list[_Pending] = own_list(staged)  # appended to below
            for pending in batch:
                if pending.guard is not None:
                    # A guard sees everything committed before it folded.
                    await self._append(group)
                    group = []
                    if not pending.guard():
                        pending.fail(GuardFailedError("the guarded commit's precondition failed"))
                        continue
                group.append(pending)
            await self._append(group)
        except BaseException as exc:
            self._fail(exc, [*staged, *batch])
            raise
        finally:
            self._writing = self._unfolded = False
            self._released()

    async def _append(self, group: list[_Pending]) -> None:
        """Append a group in one atomic append, fold, publish, release."""
        if not group:
            return
        drafts = [d for p in group for d in p.drafts]
        checkpoint = None
        if group[0].folded is None:
            # Nothing is folded ahead of the head: a checkpoint taken now, put
            # first, is exactly the fold of the records before it.  (A group
            # led by pipelined commits decided its checkpoint when they folded.)
            checkpoint = self.checkpoints.draft(self.head, self.loops)
            if checkpoint is not None:
                drafts.insert(0, checkpoint)
        # No shield needed: the journal's append is atomic under cancellation
        # (a Cancelled append wrote nothing; one under way finishes), and all
        # that follows is synchronous.
        self.appends += 1
        began = time.perf_counter()
        if self._expecting or self._explicit:
            consumes = self._consumes(group)
            records = await self.journal.append(
                self._lease, drafts, expected_seq=self.head, consumes=consumes
            )
        else:
            records = await self.journal.append(self._lease, drafts, expected_seq=self.head)
        observe_commit(time.perf_counter() - began)
        if not records:
            for p in group:
                p.set([])
            return
        self.head = records[-1].seq
        self._folded_to = max(self._folded_to, self.head)
        at = 0
        if checkpoint is not None:
            self.checkpoints.written(records[0])
            for sub in self._subscribers:
                sub.push(records[0])
            at = 1
        for p in group:
            mine = records[at : at + len(p.drafts)]
            at += len(p.drafts)
            if p.folded is not None:
                # Folded when it was committed: check the journal placed it
                # where it was folded, then publish it, now that it is durable.
                # (Seqs are contiguous: the first and the count say it all.)
                first = p.folded[0]
                if len(mine) != len(p.folded) or (mine[0].seq, mine[0].id) != (
                    first.seq,
                    first.id,
                ):
                    raise RuntimeError(
                        f"session {self.session_id}: pipelined records were folded as seqs "
                        f"{[r.seq for r in p.folded]} but the journal stored them as "
                        f"{[r.seq for r in mine]}; the session must stop"
                    )
                for record in mine:
                    for sub in self._subscribers:
                        sub.push(record)
            else:
                for record in mine:
                    assert p.loop is not None
                    p.loop.apply(record)
                    for sub in self._subscribers:
                        sub.push(record)
            p.set(mine)
