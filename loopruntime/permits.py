"""How many loops of one trio run do the runtime's work at once.

Every loop of a run shares one trio thread: a loop whose commit became durable
runs again only after trio has run every other runnable task, so with many
busy loops a commit waits for all of their steps.  A loop therefore works
under a *permit*, one of ``limit`` per run.  Its tasks (the actor, the turn, a
parallel tool call, a compaction) enter before they work and leave when they
end; around a wait on something outside the runtime (the model's stream, a
tool's run, an idle mailbox, a person's answer at a permission gate) they step
*outside*.  A loop waiting on its own commit keeps its permit, so the loops
that step between a commit and its answer are at most ``limit``.

Stepping outside keeps the permit for up to ``HOLD`` seconds of the wait: a
wait that ends sooner (a fast tool, a model that answers at once, the turn's
next input already queued) goes on with no hand-over, so a loop's turn runs
through and its pipelined records ride with its next durable commit.  A wait
still going at ``HOLD`` gives the permit up (one system task per run watches
the deadlines, as a ``timers.RunTimer`` does flushes): a loop waiting on a slow model,
a tool or a person stops nobody for longer than that.

The permit is the loop's, not a task's: while one of its tasks holds it, its
other tasks enter at once (a loop never waits on itself).  Permits go to the
waiting loops in order, a loop coming back from a wait ahead of loops that
have not started (it finishes the turn it began first).  Entering is no
checkpoint when a permit is free.  A task cancelled while it waits takes a
permit over the limit and raises: the cleanup that follows (settling a turn)
runs, and commits, as a holder, and the overdraft is paid back before anyone
else is let in.  ``docs/guide.md`` ("Many sessions in one process") tells the
application's side.
"""

from __future__ import annotations

import collections
import math
from types import TracebackType

import trio

__all__ = [
    "DEFAULT_LIMIT",
    "HOLD",
    "Admission",
    "Outside",
    "Permit",
    "Permits",
    "Working",
    "limit_working_loops",
]

DEFAULT_LIMIT = 32
"""Permits per trio run unless the application sets another
(``limit_working_loops``); ``docs/decisions.md`` says why this many."""

HOLD = 0.05
"""Seconds a wait outside the runtime keeps its loop's permit before giving it up."""


class Permit:
    """One loop's part in its run's ``Permits``: the loop owns it (``Loop.permit``)
    and hands it to every call here; only this module reads or changes it."""

    __slots__ = ("admission", "holding")

    def __init__(self) -> None:
        self.holding = 0
        """The loop's tasks inside the permitted section (0: it holds no permit)."""
        self.admission: Admission | None = None
        """Its place in the queue while some of its tasks wait (None: none wait)."""


class Admission:
    """A loop's place in the queue: its waiting tasks wake together."""

    __slots__ = ("admitted", "waiters")

    def __init__(self) -> None:
        self.admitted = trio.Event()
        self.waiters = 0


class Permits:
    """The permits of one trio run (``of_this_run``)."""

    __slots__ = ("_free", "_kept", "_queue", "_sleep", "_watching", "hold", "limit")

    def __init__(self, limit: int, hold: float = HOLD) -> None:
        if limit < 1:
            raise ValueError(
                f"a run needs at least one permit for its loops to work, not {limit}; "
                "pass 1 or more to limit_working_loops"
            )
        if not hold >= 0:
            raise ValueError(
                f"hold is the seconds a wait keeps its permit, 0 or more, not {hold!r}"
            )
        self.limit = limit
        self.hold = hold
        self._free = limit
        """Permits nobody holds; below zero while cancelled waiters overdraw."""
        self._queue: collections.deque[Permit] = collections.deque()
        self._kept: dict[Outside, float] = {}
        """Waits outside still keeping their permit, oldest first: when each began."""
        self._sleep: trio.CancelScope | None = None
        self._watching = False

    @staticmethod
    def of_this_run() -> Permits:
        try:
            return _PERMITS.get()
        except LookupError:
            permits = Permits(DEFAULT_LIMIT)
            _PERMITS.set(permits)
            return permits

    @property
    def holders(self) -> int:
        """Loops holding a permit now (over ``limit`` only while overdrawn)."""
        return self.limit - self._free

    @property
    def waiting(self) -> int:
        """Loops waiting for a permit."""
        return len(self._queue)

    async def enter(self, permit: Permit, *, back: bool = False) -> None:
        """Enter the permitted section for ``permit``'s loop; pair it with ``leave``.
        No checkpoint when the loop already holds its permit or one is free and
        nobody waits; otherwise queue (``back``: ahead of loops that have not
        started).  Cancelled while waiting, it takes a permit over the limit
        (the caller's cleanup runs as a holder; its ``leave`` pays it back)
        and raises."""
        if permit.holding:
            permit.holding += 1
            return
        if self._free > 0 and not self._queue:
            self._free -= 1
            permit.holding = 1
            return
        admission = permit.admission
        if admission is None:
            admission = permit.admission = Admission()
            if back:
                self._queue.appendleft(permit)
            else:
                self._queue.append(permit)
            if len(self._queue) == 1:
                self._arm()
        admission.waiters += 1
        try:
            await admission.admitted.wait()
        except BaseException:
            if not admission.admitted.is_set():
                admission.waiters -= 1
                if not admission.waiters:
                    permit.admission = None
                    self._queue.remove(permit)
                # Over the limit: see the docstring.
                if permit.holding:
                    permit.holding += 1
                else:
                    self._free -= 1
                    permit.holding = 1
            raise
        # Admitted: ``_admit`` counted this task among the loop's holders.

    def join(self, permit: Permit) -> None:
        """A task of ``permit``'s loop starts under the permit its starter holds
        (the actor starting the turn); pair it with ``leave``.  Taken at once:
        the new task never queues for a permit its loop already has."""
        assert permit.holding, "join is for a task started by a holder of its loop's permit"
        permit.holding += 1

    def leave(self, permit: Permit) -> None:
        """One of the tasks of ``permit``'s loop leaves; its last gives the
        permit to the first loop waiting."""
        permit.holding -= 1
        if permit.holding:
            return
        if self._free < 0 or not self._queue:
            self._free += 1
            return
        self._admit(self._queue.popleft())

    def _admit(self, permit: Permit) -> None:
        admission = permit.admission
        assert admission is not None
        permit.admission = None
        permit.holding = admission.waiters
        admission.admitted.set()

    def working(self, permit: Permit) -> Working:
        """``async with permits.working(permit):`` around a task's work: entered
        on entry, left on exit."""
        return Working(self, permit)

    def outside(self, permit: Permit) -> Outside:
        """``async with permits.outside(permit):`` around a wait outside the
        runtime: the permit is kept for ``hold`` seconds of it, then left
        (and entered again after the wait)."""
        return Outside(self, permit)

    def _keep(self, outside: Outside) -> None:
        """``outside``'s wait keeps its permit, until ``hold`` has passed
        while another permit waits for one."""
        self._kept[outside] = trio.current_time()
        if self._queue:
            self._arm()

    def _arm(self) -> None:
        """Someone waits: the watcher wakes when the oldest kept wait is due."""
        if not self._kept:
            return
        due = next(iter(self._kept.values())) + self.hold
        if not self._watching:
            self._watching = True
            trio.lowlevel.spawn_system_task(self._watch, name="loops' permits kept by waits")
        sleep = self._sleep
        if sleep is not None and due < sleep.deadline:
            sleep.deadline = due

    async def _watch(self) -> None:
        # A system task: it must never raise (that would crash the run).
        while True:
            due = math.inf
            if self._queue and self._kept:
                due = next(iter(self._kept.values())) + self.hold
            with trio.CancelScope(deadline=due) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            self._give_up(trio.current_time())

    def _give_up(self, now: float) -> None:
        # Apart from ``_watch`` so that no wait stays referenced from its frame.
        # Oldest first (the dict keeps the order the waits began in).
        kept = self._kept
        while kept and self._queue:
            outside, since = next(iter(kept.items()))
            if since + self.hold > now:
                break
            del kept[outside]
            outside.state = _LEFT
            self.leave(outside.permit)


_KEPT, _LEFT, _OVER = "kept", "left", "over"
"""An ``Outside``'s wait: still keeping its permit, gave it up, ended."""


class Outside:
    """A wait of ``Permits.outside``."""

    __slots__ = ("permit", "permits", "state")

    def __init__(self, permits: Permits, permit: Permit) -> None:
        self.permits = permits
        self.permit = permit
        self.state = _KEPT

    async def __aenter__(self) -> None:
        if self.permits.hold > 0:
            self.permits._keep(self)
        else:
            self.state = _LEFT
            self.permits.leave(self.permit)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.state is _LEFT:
            await self.permits.enter(self.permit, back=True)
        else:
            del self.permits._kept[self]
        self.state = _OVER


class Working:
    """The work of ``Permits.working``."""

    __slots__ = ("permit", "permits")

    def __init__(self, permits: Permits, permit: Permit) -> None:
        self.permits = permits
        self.permit = permit

    async def __aenter__(self) -> None:
        await self.permits.enter(self.permit)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.permits.leave(self.permit)


def limit_working_loops(limit: int, *, hold: float = HOLD) -> None:
    """Let at most ``limit`` loops of this trio run do the runtime's work at
    once (``DEFAULT_LIMIT`` unless called), a wait outside the runtime keeping
    its loop's permit for ``hold`` seconds.  Call it inside the run before
    its first loop starts (it refuses once a loop holds or waits for a permit);
    bad values raise ``ValueError``."""
    permits = Permits.of_this_run()
    if permits.holders or permits.waiting:
        raise RuntimeError(
            f"limit_working_loops({limit}) was called while {permits.holders} loop(s) "
            f"worked and {permits.waiting} waited; call it before the run's first loop starts"
        )
    _PERMITS.set(Permits(limit, hold))


_PERMITS: trio.lowlevel.RunVar[Permits] = trio.lowlevel.RunVar("loops_permits")
