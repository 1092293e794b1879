"""Host: many sessions in one process, fed by the journal's inbox, owned by lease.

Rules (docs/host.md tells the story):

* a session runs here only under a lease this host took with
  ``Journal.acquire``; the lease is renewed every ``lease_ttl / 3``; a
  renewal or an append that finds it fenced drops the session at once;
* everything a session does runs in a cancel scope whose deadline is its
  lease's expiry as this host counts it (from when the take or renewal was
  sent) less ``lease_margin``, pushed forward only by a renewal that went
  through: a host paused past it cancels the session's work before its next
  step (the deadlines are checked before every task step, ``_Deadlines``),
  and before any other host may take it; a takeover of an expired lease
  waits ``lease_margin`` first; tools see the same rule through
  ``ToolContext.check_owner``;
* an unreachable journal (``JournalUnavailableError``) is ridden out
  (``host_outage``): nothing new is claimed, the sessions held stay loaded,
  and the renewals retry with backoff until one round goes through;
* work is found with ``Journal.claimable``: sessions with inbox entries and
  no live owner (activation), and sessions whose owner's lease expired
  (failover); each is restored under the existing restore rules;
* entries are applied in order, one at a time per session, each through the
  ``Session`` command it names; the append holding the records the command
  made consumes the entry (``Writer.expect``), and a command that made none
  consumes it in an append of its own, so an entry is applied exactly once;
* a session with nothing to do for ``idle_after`` seconds is shut down
  cleanly (open gates and questions stay open) and its lease released: the
  next entry activates it again, here or on another host;
* ``aclose`` stops claiming, shuts every session down cleanly and releases
  its lease, handing sessions with work left to the next host at once; a
  session at rest without unknown effects is checkpointed first by the rule
  passivation follows, at most ``_STOP_CHECKPOINTS`` at a time and none begun
  past ``lease_ttl / 3`` into the stop (a failed one is logged; the session
  is released all the same);
* a command the host will never apply (an unknown principal, a damaged
  entry, an error applying it again would raise again) is consumed once with
  its reason (``host_commands``); entries of a session never started are.
* the host id is registered in the journal for as long as the host runs (a
  live host's id is refused at ``open``; a registration nobody renews, left by
  a crash, is waited out); work is looked for every ``poll``
  seconds (one ``claimable`` pass, which also wakes this host's quiet
  sessions with entries) and whenever the journal's inbox wake-ups say so;
  a quiet session reads its inbox itself only every ``lease_ttl / 3``;
* at most ``max_sessions`` are loaded: past it the least recently busy idle
  session is passivated for one with work, and with none idle nothing is
  claimed until one is.

The module is one piece: the claimer, the renewals and each session's task
all work on the same table of held sessions, their leases and deadlines;
split, each part would reach into the others' private state.  What stands
apart (applying one command, principals, the outage) has its own module.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import msgspec
import structlog
import trio

from journal import (
    FencedError,
    HostIdInUseError,
    Journal,
    JournalError,
    JournalUnavailableError,
    SessionLease,
)
from journal import inbox as ib
from loopruntime import LeaseLostError, LoopDefinition
from loopruntime.host import new_id, owning
from loopruntime.models import RateLimit, RateLimitError, use_default_rate_limit

from ..embedded.checkpoints import read_restored
from ..embedded.runtime import ROOT_LOOP, Session
from .host_commands import before_start as _before_start
from .host_commands import damaged as _damaged
from .host_commands import expected as _expected
from .host_commands import refused as _refused
from .host_commands import run as _run
from .host_outage import Outage
from .host_principals import Principals, checked_principals, refusal

__all__ = ["Host", "HostStatistics"]

log = structlog.wrap_logger(logging.getLogger(__name__))

_REST_CHECKPOINT_AFTER = 100
"""Records since the last checkpoint past which a session is checkpointed
when it is passivated (a tenth of the writer's interval: below it, folding
the tail on activation costs less than the checkpoint)."""

_LEASE_MARGIN = 0.1
"""The share of ``lease_ttl`` a session's work stops before its lease expires
as this host counts it, and a takeover waits past an expiry the journal
reported (docs/host.md, "What a lease guarantees")."""

_CLAIM_GAP = 0.05
"""Seconds a pass for work waits after the one before when woken early: a
burst of wake-ups no other host's lease answers for (puts to sessions nobody
holds, hand-overs, wake-ups naming no holder) costs one pass, at most 20 a
second, not one per wake-up on each of N hosts."""

_STOP_CHECKPOINTS = 8
"""Checkpoints at rest a stopping host appends at once: enough to keep the
journal busy while the next one encodes, few enough to leave the journal's
connections and trio's worker threads to the sessions' own shutdowns."""


class HostStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What a host has done since it opened."""

    loaded: int
    """Sessions running here now."""
    claims: int
    failovers: int
    """Claims of a session whose former owner's lease had expired."""
    passivations: int
    applied: int
    """Inbox entries applied."""
    fenced: int
    """Sessions dropped because another host took them."""
    expired: int = 0
    """Sessions whose work was stopped because their lease was not renewed in time."""
    ready: bool = True
    """Taking new work: registered, not stopping, and the journal within reach."""
    outages: int = 0
    """Times the journal went out of reach (see ``session.hosting.host_outage``)."""
    refused: dict[str, int] = msgspec.field(default_factory=dict)
    """Inbox entries consumed as refused (counted in ``applied`` too), by the
    name of the error in their outcome (``UnknownPrincipalError``,
    ``InboxEntryDamaged``, ``UnknownSessionError``, or the error the command
    raised, such as ``GateMismatchError``)."""


def _expired(claim: ib.Claim) -> bool:
    """An owner's lease that expired, not one handed over or never held."""
    return claim.owner is not None and claim.expires_at > 0


class _Hosted:
    """A session this host holds; its ``scope`` holds everything the session does,
    and is the owner check its tools see (``loopruntime.host.OwnerCheck``)."""

    def __init__(self, session_id: str, host_id: str) -> None:
        self.id = session_id
        self.host_id = host_id
        self.lease: SessionLease | None = None
        self.session: Session | None = None
        self.wake = trio.Event()
        self.scope = trio.CancelScope()
        """Its deadline is the lease's expiry as this host counts it, less the
        margin: pushed forward only by a take or a renewal that went through."""
        self.owned_to = -math.inf
        """The scope's deadline once a take went through (before it: none)."""
        self.passivated: str | None = None
        """Why it was unloaded at rest ("idle", "pressure"): logged once released."""
        self.stopping = False
        self.busy = False
        """Work was left when it stopped: its lease is handed over, not just released."""
        self.done = trio.Event()
        self.quiet_since: float | None = None
        """When it last had work (trio time); None while it has some."""
        self.evict = False
        """Passivate it as soon as it is idle: another session wants its place."""
        self.rest_failed = False
        """Its checkpoint at rest failed (and stopped its writer): the session
        is released all the same, its records being durable and whole."""

    def owned_until(self, sent: float, ttl: float, margin: float) -> None:
        """A take or renewal sent at ``sent`` (trio time) went through: the
        journal counts ``ttl`` from a moment no earlier, so the work may go on
        until ``sent + ttl - margin``."""
        self.owned_to = max(self.owned_to, sent + ttl - margin)
        self.scope.deadline = self.owned_to

    def check_owner(self) -> None:
        if self.lease is None:
            raise LeaseLostError(self.id, self.host_id, "another host took it")
        if trio.current_time() >= self.owned_to:
            raise LeaseLostError(self.id, self.host_id, "its lease ran out before a renewal")

    def idle(self) -> bool:
        """Loaded, with nothing running and nothing waiting in its inbox."""
        session = self.session
        return (
            session is not None
            and self.quiet_since is not None
            and all(loop.quiescent for loop in session.loops.values())
        )


class _Deadlines(trio.abc.Instrument):
    """Cancels a held session's scope the moment trio time passes its
    deadline, checked before every task step.

    Trio itself looks at deadlines once per batch of steps: a host paused
    (SIGSTOP, a VM migration) after that look would, on waking, run the rest
    of the batch first, and a tool whose own sleep had ended just before the
    pause would take its next step (its effect) with the session's scope not
    yet cancelled.  The cost per step is one read of the run's clock and one
    comparison with the nearest deadline; a scan of the held sessions only
    once that deadline passed.  The deadlines are the scopes' own, read at
    the scan, so a renewal, a stop or a take again leaves nothing stale here."""

    def __init__(self, sessions: dict[str, _Hosted]) -> None:
        self.sessions = sessions
        self.due = math.inf
        """No held session's deadline is earlier: lowered by each take or
        renewal, recomputed by each scan."""
        self.now: Callable[[], float] = trio.current_time

    def start(self) -> None:
        """Check before every step of this trio run, until ``stop``."""
        # The run's clock itself: a step spares trio.current_time's lookups.
        self.now = trio.lowlevel.current_clock().current_time
        trio.lowlevel.add_instrument(self)

    def stop(self) -> None:
        trio.lowlevel.remove_instrument(self)

    def note(self, deadline: float) -> None:
        self.due = min(self.due, deadline)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        now = self.now()
        if now < self.due:
            return
        due = math.inf
        for hosted in self.sessions.values():
            deadline = hosted.scope.deadline
            if deadline <= now:
                hosted.scope.cancel()
            else:
                due = min(due, deadline)
        self.due = due


class Host:
    """Runs sessions for ``definitions`` (name -> definition) from the inbox.

    Open it with ``async with Host.open(journal, definitions) as host``."""

    def __init__(
        self,
        journal: Journal,
        definitions: Mapping[str, LoopDefinition],
        *,
        host_id: str | None = None,
        idle_after: float = 300.0,
        lease_ttl: float = 30.0,
        max_sessions: int = 1000,
        poll: float = 1.0,
        principals: Principals | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise RateLimitError(
                "rate_limit",
                rate_limit,
                expected="a RateLimit(requests_per_minute=..., tokens_per_minute=...) or None",
            )
        for name, value in (("idle_after", idle_after), ("lease_ttl", lease_ttl), ("poll", poll)):
            if not isinstance(value, int | float) or not value > 0 or math.isinf(value):
                raise ValueError(f"Host {name} must be a positive number of seconds, not {value!r}")
        if not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"Host max_sessions must be a positive int, not {max_sessions!r}")
        for name, definition in definitions.items():
            if name != definition.name:
                raise ValueError(
                    f"Host definitions: {name!r} maps to definition {definition.name!r}; "
                    "key each definition by its own name"
                )
        self.rate_limit = rate_limit
        """The run's default limit for the definitions' models that set none
        (``Host.open`` sets it; a model's own ``rate_limit`` wins)."""
        self.principals = checked_principals(principals)
        """Who this host takes commands from (None: anyone, named or not)."""
        self.journal = journal
        self.definitions = dict(definitions)
        self.id = host_id or new_id("host_")
        self._token = new_id("tok_")
        """Drawn per process: tells this host's registration of ``id`` from another's."""
        self.idle_after, self.lease_ttl, self.poll = idle_after, lease_ttl, poll
        self.max_sessions = max_sessions
        self.lease_margin = lease_ttl * _LEASE_MARGIN
        """A session's work stops this long before its lease expires as this
        host counts it; a takeover of an expired lease waits this long first."""
        self._quiet_poll = max(poll, lease_ttl / 3)
        """How often a quiet session reads its own inbox (for an entry past the pass's limit)."""
        self.sessions: dict[str, _Hosted] = {}
        self._claims = self._failovers = self._passivations = self._applied = 0
        self._fenced = self._expired = 0
        self._refused: Counter[str] = Counter()
        self._stopping = False
        self._registered = False
        self._stop_checkpoints = trio.CapacityLimiter(_STOP_CHECKPOINTS)
        self._stop_checkpoints_until = math.inf
        """No checkpoint at rest is begun past this (trio time): set by ``aclose``."""
        self._stop_checkpoints_skipped = 0
        self._wake = trio.Event()
        self._poked = False
        self._nursery: trio.Nursery | None = None
        self._deadlines = _Deadlines(self.sessions)
        self.log = log.bind(host=self.id)
        self._outage = Outage(self.log)

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        journal: Journal,
        definitions: Mapping[str, LoopDefinition],
        *,
        host_id: str | None = None,
        idle_after: float = 300.0,
        lease_ttl: float = 30.0,
        max_sessions: int = 1000,
        poll: float = 1.0,
        principals: Principals | None = None,
        rate_limit: RateLimit | None = None,
    ) -> AsyncIterator[Host]:
        """Run a host until the block ends; then ``aclose`` (a clean stop).
        ``principals``: take commands only from these (a collection, or a
        predicate on the principal); others are refused, with the reason in
        the entry's outcome.  Knowing a principal authorizes nothing more.
        ``rate_limit``: the shared rate limit of every model the definitions
        use that sets no ``rate_limit`` of its own, one limiter per provider
        and model for the whole trio run (``use_default_rate_limit``); a
        model's own limit wins.  None leaves the run's default as it is.

        The host id is registered in the journal first: an id a live host
        already uses is a ``HostIdInUseError`` before anything is claimed."""
        host = cls(
            journal,
            definitions,
            host_id=host_id,
            idle_after=idle_after,
            lease_ttl=lease_ttl,
            max_sessions=max_sessions,
            poll=poll,
            principals=principals,
            rate_limit=rate_limit,
        )
        if host.rate_limit is not None:
            use_default_rate_limit(host.rate_limit)
        await host._register_first()
        host._deadlines.start()
        try:
            async with trio.open_nursery() as nursery:
                host._nursery = nursery
                # Listening before the first look for work: nothing put between is missed.
                await nursery.start(host._listener)
                nursery.start_soon(host._claimer)
                nursery.start_soon(host._renewer)
                try:
                    yield host
                finally:
                    with trio.CancelScope(shield=True):
                        await host.aclose()
                        await host._deregister()
                    nursery.cancel_scope.cancel()
        finally:
            host._deadlines.stop()

    def statistics(self) -> HostStatistics:
        return HostStatistics(
            loaded=len(self.sessions),
            claims=self._claims,
            failovers=self._failovers,
            passivations=self._passivations,
            applied=self._applied,
            fenced=self._fenced,
            expired=self._expired,
            ready=self.ready,
            outages=self._outage.count,
            refused=dict(self._refused),
        )

    @property
    def ready(self) -> bool:
        """Whether the host takes new work: registered, not stopping, and its
        journal within reach (what a readiness check reports)."""
        return self._registered and not self._stopping and not self._outage.down

    def poke(self) -> None:
        """Look for work now rather than at the next poll."""
        self._poked = True
        self._wake.set()

    async def aclose(self) -> None:
        """Stop taking work, shut every session down cleanly and release its
        lease (a session with work left is handed over at once); one at rest
        is checkpointed first, as passivation does, within bounds: none is begun
        later than ``lease_ttl / 3`` into the stop (leases are no longer
        renewed; one renewed a round before has at least as long again)."""
        if self._stopping:
            return
        self._stopping = True
        self._stop_checkpoints_until = trio.current_time() + self.lease_ttl / 3
        self._wake.set()
        for hosted in list(self.sessions.values()):
            hosted.stopping = True
            hosted.wake.set()
        while self.sessions:
            hosted = next(iter(self.sessions.values()))
            await hosted.done.wait()
        if self._stop_checkpoints_skipped:
            self.log.warning(
                "stop_checkpoints_skipped",
                sessions=self._stop_checkpoints_skipped,
                budget=self.lease_ttl / 3,
            )

    # -- finding work ------------------------------------------------------------------

    async def _claimer(self) -> None:
        names = sorted(self.definitions)
        full = False
        wake_held = True
        while not self._stopping:
            # Out of reach: nothing new is taken until a renewal round reaches it.
            await self._outage.wait_over()
            self._wake = trio.Event()
            passed = trio.current_time()
            try:
                # Room for the sessions held here too: the pass wakes the quiet ones.
                claims = await self.journal.claimable(
                    definitions=names, owner=self.id, limit=self.max_sessions + len(self.sessions)
                )
            except JournalUnavailableError as exc:
                self._outage.failed("finding sessions with work", exc)
                continue
            waiting = 0
            starting: list[ib.Claim] = []
            for claim in claims:
                hosted = self.sessions.get(claim.session)
                if hosted is not None:
                    # Listed with nothing waiting: a lease still being taken
                    # over (the former owner's, expired), nothing to read.
                    if wake_held and claim.pending:
                        hosted.wake.set()
                elif self._stopping:
                    break
                elif len(self.sessions) + len(starting) < self.max_sessions:
                    starting.append(claim)
                else:
                    waiting += 1
            self._start(starting)
            if waiting and not self._make_room(waiting):
                if not full:
                    self.log.warning(
                        "host_full", loaded=len(self.sessions), max_sessions=self.max_sessions
                    )
                full = True  # claims nothing until a session is idle
            else:
                full = False
            with trio.move_on_after(self.poll) as waited:
                await self._wake.wait()
            # A pass the journal's wake-ups asked for leaves the sessions held
            # here to their own wake-ups (a put wakes its holder's session directly).
            wake_held = waited.cancelled_caught or self._poked
            self._poked = False
            await trio.sleep_until(passed + min(_CLAIM_GAP, self.poll))

    def _make_room(self, wanted: int) -> bool:
        """Passivate up to ``wanted`` loaded sessions, the least recently busy
        idle ones first, for sessions waiting to be claimed; False when none
        is idle (the host is full of work)."""
        idle = sorted(
            (h for h in self.sessions.values() if h.idle() and not (h.stopping or h.evict)),
            key=lambda h: h.quiet_since or 0.0,
        )
        evicting = sum(1 for h in self.sessions.values() if h.evict and not h.stopping)
        for hosted in idle[: max(wanted - evicting, 0)]:
            hosted.evict = True
            hosted.wake.set()
        return bool(idle) or evicting > 0

    async def _listener(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Wake on the journal's inbox wake-ups (LISTEN/NOTIFY on PostgreSQL)
        rather than wait for the next poll, except for a put to a session
        another host held; the poll stays, for wake-ups missed, for expired
        leases and for backends without wake-ups (SQLite).  Started once the
        journal says it is watching (its first wake-up, ``""``)."""
        started = False
        while True:
            try:
                async for wakeup in self.journal.inbox_wakeups():
                    if not started:
                        task_status.started()
                        started = True
                    hosted = self.sessions.get(wakeup.session)
                    if hosted is not None:
                        hosted.wake.set()
                    elif wakeup.holder is None or wakeup.holder == self.id:
                        self._wake.set()
                    # Else another host's live lease held it when the entry
                    # was put: that host wakes it, and a pass here could take
                    # nothing; were that host dead, its lease expires and the
                    # poll's pass finds it.
                break  # the journal closed
            except JournalUnavailableError as exc:
                # Listened for again once the journal is back; the poll covers the gap.
                self._outage.failed("listening for inbox wake-ups", exc)
                if not started:
                    task_status.started()
                    started = True
                await self._outage.wait_over()
            except JournalError as exc:
                self.log.warning("inbox_wakeups_lost", error=str(exc))
                break
        if not started:
            task_status.started()

    def _start(self, claims: list[ib.Claim]) -> None:
        """Hold a place for each of a pass's ``claims`` and take their leases,
        one ``acquire_all`` for those free now and one, a margin later, for
        those whose owner's lease expired (see ``_take``)."""
        assert self._nursery is not None
        expired = [c for c in claims if _expired(c)]
        free = [c for c in claims if not _expired(c)]
        for group in (free, expired):
            if group:
                places: list[tuple[_Hosted, ib.Claim]] = []
                for claim in group:
                    hosted = self.sessions[claim.session] = _Hosted(claim.session, self.id)
                    places.append((hosted, claim))
                self._nursery.start_soon(self._take, places, group is expired)

    async def _take(self, places: list[tuple[_Hosted, ib.Claim]], expired: bool) -> None:
        """Take the leases of ``places`` in one transaction and run each session
        taken; a place whose take was refused (another host was quicker, the
        session is gone, the journal out of reach) is given up."""
        if expired:
            # Expired leases, not ones handed over: a holder may be a host
            # paused past its lease, whose work stopped a margin before the
            # expiry by its own clock; a margin more covers the clocks' disagreement.
            await trio.sleep(self.lease_margin)
        wanted = [(h, c) for h, c in places if not h.stopping]  # else taken by the next host
        outcomes: list[object] = [None] * len(wanted)
        sent = trio.current_time()
        try:
            if wanted:
                names = [hosted.id for hosted, _ in wanted]
                outcomes = [*await self.journal.acquire_all(names, self.id, ttl=self.lease_ttl)]
        except JournalUnavailableError as exc:
            self._outage.failed(f"taking the leases of {len(wanted)} sessions", exc)
        except Exception as exc:
            # Their leases are left as they were: the next pass lists them again.
            self.log.error("lease_take_failed", sessions=len(wanted), error=repr(exc))
        assert self._nursery is not None
        for (hosted, claim), outcome in zip(wanted, outcomes, strict=True):
            if isinstance(outcome, SessionLease):
                hosted.lease = outcome
                hosted.owned_until(sent, self.lease_ttl, self.lease_margin)
                self._deadlines.note(hosted.owned_to)
                self._nursery.start_soon(self._host, hosted, claim)
        for hosted, _ in places:
            if hosted.lease is None:
                self._give_up(hosted)

    def _give_up(self, hosted: _Hosted) -> None:
        """Forget a place held for a session this host did not take."""
        del self.sessions[hosted.id]
        hosted.done.set()
        self._wake.set()

    async def _register(self) -> None:
        await self.journal.register_host(
            self.id, self._token, ttl=self.lease_ttl, definitions=sorted(self.definitions)
        )

    async def _register_first(self) -> None:
        """Register the id.  Another process's live registration of it is
        waited out while nobody renews it (a host restarted under its own id
        after a crash: at most that registration's TTL, logged once), and
        refused with ``HostIdInUseError`` as soon as it is renewed (a live host)."""
        seen: int | None = None
        while True:
            try:
                await self._register()
            except HostIdInUseError as exc:
                expiry = await self._registration_expiry()
                if expiry is None:
                    continue  # removed meanwhile (a clean stop): try again at once
                if seen is not None and expiry != seen:
                    raise  # renewed while this one waited: that host is alive
                if seen is None:
                    self.log.warning(
                        "host_id_waiting",
                        seconds=round(exc.left, 1),
                        detail=f"host id {self.id!r} is still registered by another process "
                        f"for {exc.left:.1f}s; waiting it out (a restart after a crash), "
                        "unless that process renews it (a live host: then refused)",
                    )
                seen = expiry
                # Looked at again within a third of a TTL: a live host renews by then.
                await trio.sleep(max(min(exc.left, self.lease_ttl / 3), 0.01))
            else:
                self._registered = True
                return

    async def _registration_expiry(self) -> int | None:
        """When the journal's registration of this host's id expires (its clock)."""
        for info in await self.journal.hosts():
            if info.host == self.id:
                return info.expires_at
        return None

    async def _deregister(self) -> None:
        try:
            await self.journal.deregister_host(self.id, self._token)
        except JournalError as exc:
            self.log.warning("host_deregistration_failed", error=str(exc))

    async def _renewer(self) -> None:
        """Every ``lease_ttl / 3``, counted from the start of the last round
        (a slow round delays the next one by nothing more): the registration,
        then every lease in one ``renew_all``, so a round costs one
        transaction however many sessions are held."""
        due = trio.current_time()
        while True:
            due += self.lease_ttl / 3
            # In an outage a round is the probe too: tried again after its backoff.
            await self._outage.sleep_until(max(due, trio.current_time()))
            due = trio.current_time()
            await self._renew_round()

    async def _renew_round(self) -> None:
        """The registration, then every lease; a round that reached the journal
        whole ends an outage."""
        try:
            await self._register()
        except HostIdInUseError as exc:
            # Paused past its registration, and the id taken since: the
            # sessions' own leases decide what this host may still write.
            self.log.error("host_id_taken", error=str(exc))
        except JournalUnavailableError as exc:
            self._outage.failed("renewing the host's registration", exc)
            return
        except JournalError as exc:
            self.log.warning("host_renewal_failed", error=str(exc))
        if await self._renew_all():
            self._outage.reached()

    async def _renew_all(self) -> bool:
        """Renew every lease held, pushing each session's deadline; False when
        the journal was out of reach."""
        held = [(h, h.lease) for h in self.sessions.values() if h.lease and not h.stopping]
        if not held:
            return True
        leases = [lease for _, lease in held]
        sent = trio.current_time()
        try:
            renewed = await self.journal.renew_all(leases, ttl=self.lease_ttl)
        except JournalUnavailableError as exc:
            self._outage.failed("renewing leases", exc)
            return False
        except JournalError as exc:
            self.log.warning("lease_renewal_failed", sessions=len(leases), error=str(exc))
            return True
        for (hosted, lease), after in zip(held, renewed, strict=True):
            if hosted.lease is not lease:
                continue  # released or dropped meanwhile: its own release fenced it
            if after is None:
                self._drop(hosted, "lease_lost")
            else:
                hosted.lease = after
                hosted.owned_until(sent, self.lease_ttl, self.lease_margin)
                self._deadlines.note(hosted.owned_to)
        return True

    def _drop(self, hosted: _Hosted, why: str) -> None:
        self._fenced += 1
        self.log.warning("session_dropped", session=hosted.id, reason=why)
        hosted.lease = None  # not ours to release
        hosted.scope.cancel()

    # -- one session ---------------------------------------------------------------------

    async def _host(self, hosted: _Hosted, claim: ib.Claim) -> None:
        try:
            with owning(hosted), hosted.scope:
                await self._claim_and_run(hosted, claim)
            if hosted.scope.cancelled_caught and hosted.lease is not None:
                # Its deadline (a dropped session has no lease): every piece
                # of its work stopped before any other host may take it.  Its
                # lease is left to expire, as a crash leaves it: the journal
                # may be what kept it from being renewed.
                hosted.lease = None
                self._expired += 1
                self.log.warning(
                    "session_stopped",
                    session=hosted.id,
                    reason="lease_deadline",
                    detail="its lease was not renewed in time; its work stopped a margin "
                    "before the lease expires, and the next host takes it over",
                )
        except FencedError:
            self._drop(hosted, "fenced")
        except JournalUnavailableError as exc:
            if hosted.rest_failed:
                return  # only its checkpoint at rest failed (logged then): released below
            # Its records are durable up to the failed commit; the next owner
            # (this host too) restores it from them once the journal is back.
            self._outage.failed(f"running session {hosted.id}", exc)
            self.log.warning("session_stopped", session=hosted.id, reason="journal_unreachable")
            hosted.busy = True  # handed over at once, not left to expire
            if hosted.lease is not None:
                with trio.move_on_at(hosted.scope.deadline):
                    await self._outage.wait_over()
        except Exception as exc:
            if not hosted.rest_failed:
                # One session's failure (a damaged journal, a definition that
                # no longer fits) must not stop the host: it is logged, and
                # the session is left for a person (its lease expires).
                self.log.error("session_failed", session=hosted.id, error=repr(exc))
                hosted.lease = None
            # Else only its checkpoint at rest failed (logged then), with
            # every record durable before it: released like any other.
        finally:
            with trio.CancelScope(shield=True):
                released = await self._release(hosted)
            if hosted.passivated is not None and released:
                self._passivations += 1
                self.log.info("session_passivated", session=hosted.id, reason=hosted.passivated)
            del self.sessions[hosted.id]
            hosted.done.set()
            self._wake.set()  # its place is free: look for work now

    async def _release(self, hosted: _Hosted, definition: str | None = None) -> bool:
        """Release the session's lease (if held); False when another host took
        the session meanwhile."""
        lease, hosted.lease = hosted.lease, None
        if lease is None:
            return True
        try:
            await self.journal.release(lease, handoff=hosted.busy, definition=definition)
        except FencedError:
            # Paused past its lease: the session went on elsewhere.
            self._fenced += 1
            self.log.warning("session_lost", session=hosted.id, detail="lost to another host")
            return False
        except JournalError as exc:
            self.log.warning("lease_release_failed", session=hosted.id, error=str(exc))
        return True

    async def _claim_and_run(self, hosted: _Hosted, claim: ib.Claim) -> None:
        """Run a session whose lease ``_take`` took."""
        lease = hosted.lease
        assert lease is not None
        self._claims += 1
        if claim.owner is not None and claim.owner != self.id:
            self._failovers += 1
            self.log.info("session_failover", session=hosted.id, former_owner=claim.owner)
        else:
            self.log.info("session_claimed", session=hosted.id, pending=claim.pending)
        opened = await self._opening(hosted, lease, claim.definition)
        if opened is None:
            return
        async with opened as session:
            hosted.session = session
            await self._serve(hosted, session, waiting=claim.pending > 0)
            if hosted.stopping and not hosted.busy:
                await self._checkpoint_at_stop(hosted, session)

    async def _opening(
        self, hosted: _Hosted, lease: SessionLease, recorded: str | None = None
    ) -> AbstractAsyncContextManager[Session] | None:
        """How to open the session under ``lease``: a create (its first entry
        is a ``Create``) or a restore; None when this host cannot run it.

        ``recorded``: the definition the journal keeps beside the lease (from
        the ``Create``, or a host's release), which saves reading the session
        once more only to learn it; without one, the fold says."""
        if lease.head == 0:
            return await self._starting(hosted, lease)
        name = recorded
        if name is None or name not in self.definitions:
            restored = await read_restored(self.journal, hosted.id)
            root = restored.states.get(ROOT_LOOP)
            name = root.definition if root is not None else None
        definition = self.definitions.get(name) if name else None
        if definition is None:
            self.log.warning("session_definition_unknown", session=hosted.id, definition=name)
            await self._release(hosted, definition=name)
            return None
        return Session.restore(self.journal, hosted.id, definition, lease=lease)

    async def _starting(
        self, hosted: _Hosted, lease: SessionLease
    ) -> AbstractAsyncContextManager[Session] | None:
        """Start a session with no records at its first ``Create`` this host
        takes, refusing the entries before it once (``before_start``); a create
        for a definition not run here waits for a host that runs it."""
        entries = await self.journal.inbox(hosted.id)
        refusals, start = _before_start(hosted.id, entries, self._refusal)
        if refusals:
            await self.journal.append(lease, [], expected_seq=0, consumes=refusals)
            self._applied += len(refusals)
            self._refused.update(c.outcome.error or "refused" for c in refusals)
        definition = self.definitions.get(start.definition) if start is not None else None
        if start is None or definition is None:
            await self._release(hosted, definition=start.definition if start else None)
            return None
        return Session.create(self.journal, definition, lease=lease, principal=start.principal)

    async def _serve(self, hosted: _Hosted, session: Session, *, waiting: bool = True) -> None:
        try:
            await self._serving(hosted, session, waiting)
        finally:
            # Seen before the session shuts down (which settles a running turn).
            hosted.busy = not all(loop.quiescent for loop in session.loops.values())

    async def _serving(self, hosted: _Hosted, session: Session, waiting: bool) -> None:
        """Apply the session's entries as they come.  Without ``waiting`` (the
        claim found none: a takeover of a session at rest) the first read
        waits for a wake-up, as after a read that found none: a put since
        the claim set the wake-up this host held the session under, and the
        claimer's pass finds what no wake-up told of."""
        last = 0
        quiet_since = trio.current_time()
        while not hosted.stopping:
            entries: list[ib.InboxEntry] = []
            if waiting:
                hosted.wake = trio.Event()
                try:
                    entries = await self.journal.inbox(hosted.id, after=last)
                except JournalUnavailableError as exc:
                    # Kept loaded: read again once the journal is back (its lease permitting).
                    self._outage.failed(f"reading the inbox of session {hosted.id}", exc)
                    await self._outage.wait_over()
                    continue
            waiting = True
            for entry in entries:
                if hosted.stopping:
                    return
                await self._apply(session, entry)
                last = entry.number
            now = trio.current_time()
            if entries or not all(loop.quiescent for loop in session.loops.values()):
                quiet_since = now
                hosted.quiet_since = None
            else:
                hosted.quiet_since = quiet_since
                if hosted.evict or now - quiet_since >= self.idle_after:
                    # Its next activation reads this checkpoint and nothing
                    # after it, rather than folding up to a thousand records.
                    await self._checkpoint_at_rest(hosted, session)
                    # Logged once released: a session lost meanwhile was not passivated.
                    hosted.passivated = "pressure" if hosted.evict else "idle"
                    return
            # Quiet: woken by a wake-up, the claimer's pass, an eviction or a stop.
            wait = self.poll
            if hosted.quiet_since is not None:
                wait = min(self.idle_after - (now - quiet_since), self._quiet_poll)
            with trio.move_on_after(max(wait, 0.0)):
                await hosted.wake.wait()

    async def _checkpoint_at_rest(self, hosted: _Hosted, session: Session) -> None:
        """Checkpoint ``session``, at rest and about to be unloaded, when
        ``_REST_CHECKPOINT_AFTER`` or more records followed its last
        checkpoint, so its next activation reads no tail.  A failure is
        logged and marked on ``hosted`` (the session is still released); a
        fenced append is not (the session is another host's)."""
        try:
            await session.checkpoint_at_rest(_REST_CHECKPOINT_AFTER)
        except FencedError:
            raise
        except Exception as exc:
            hosted.rest_failed = True
            self.log.warning("rest_checkpoint_failed", session=hosted.id, error=repr(exc))

    async def _checkpoint_at_stop(self, hosted: _Hosted, session: Session) -> None:
        """``_checkpoint_at_rest`` for a stop, within its bounds (``aclose``).
        A session with an unknown effect is left as it is: a person settles
        it first, and its next activation is not the one a stop delays."""
        if any(loop.state.unknown for loop in session.loops.values()):
            return
        async with self._stop_checkpoints:
            if trio.current_time() >= self._stop_checkpoints_until:
                self._stop_checkpoints_skipped += 1
                return
            await self._checkpoint_at_rest(hosted, session)

    # -- applying one entry ------------------------------------------------------------------

    async def _apply(self, session: Session, entry: ib.InboxEntry) -> None:
        """Apply ``entry`` through its command, exactly once (see the module's rules)."""
        command = entry.command
        refusal = None if isinstance(command, ib.Create) else self._refusal(entry)
        if refusal is not None:
            self._applied += 1
            self._refused[refusal.error or "refused"] += 1
            await session.consume_entry(ib.Consumed(entry=entry.number, outcome=refusal))
            return
        assert command is not None  # a damaged entry is refused above
        match = _expected(command, entry.key)
        expectation = session.expect_entry(entry.number, match) if match is not None else None
        outcome: ib.InboxOutcome
        try:
            value = await _run(session, command, entry.key)
        except Exception as exc:
            refused = _refused(exc)
            if refused is None:
                raise  # transient: the entry waits for the session's next owner
            self.log.info("command_refused", session=session.id, error=refused.error)
            self._refused[refused.error or "refused"] += 1
            outcome = refused
        else:
            outcome = ib.InboxOutcome(value=value)
        finally:
            if expectation is not None:
                session.forget_entry(expectation)
        self._applied += 1
        if expectation is not None and expectation.outcome is not None:
            return  # consumed by the append that holds what the command made
        await session.consume_entry(ib.Consumed(entry=entry.number, outcome=outcome))

    def _refusal(self, entry: ib.InboxEntry) -> ib.InboxOutcome | None:
        """The outcome refusing ``entry`` for its damage or its principal (None: taken)."""
        if entry.command is not None:
            return self.refusal(entry.command)
        self.log.error(
            "inbox_entry_damaged", session=entry.session, entry=entry.number, damage=entry.damage
        )
        return _damaged(entry.session, entry)

    def refusal(self, command: ib.InboxCommand) -> ib.InboxOutcome | None:
        """The outcome refusing ``command`` for its principal (None: taken)."""
        return refusal(self.principals, self.id, command, self.log)
