"""Host: many sessions in one process, fed by the journal's inbox, owned by lease.

Rules (docs/host.md tells the story):

* a session runs here only under a lease this host took with
  ``Journal.acquire``; the lease is renewed every ``lease_ttl / 3``; a
  renewal or an append that finds it fenced drops the session at once;
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
* with ``principals``, an entry whose principal the host does not know is
  consumed with the error ``UnknownPrincipalError`` and applies nothing (a
  ``Create`` so refused starts no session).
* the host id is registered in the journal for as long as the host runs (a
  live host's id is refused at ``open``); work is looked for every ``poll``
  seconds (one ``claimable`` pass, which also wakes this host's quiet
  sessions with entries) and whenever the journal's inbox wake-ups say so;
  a quiet session reads its inbox itself only every ``lease_ttl / 3``;
* at most ``max_sessions`` are loaded: past it the least recently busy idle
  session is passivated for one with work, and with none idle nothing is
  claimed until one is.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import msgspec
import structlog
import trio

from journal import (
    FencedError,
    HostIdInUseError,
    Journal,
    JournalError,
    LeaseHeldError,
    SessionLease,
)
from journal import inbox as ib
from loopruntime import LoopClosedError, LoopDefinition, LoopError
from loopruntime.host import new_id

from .checkpoints import read_restored
from .host_commands import expected as _expected
from .host_commands import run as _run
from .host_principals import Principals, checked_principals, refusal
from .runtime import ROOT_LOOP, Session

__all__ = ["Host", "HostStatistics"]

log = structlog.wrap_logger(logging.getLogger(__name__))

_REST_CHECKPOINT_AFTER = 100
"""Records since the last checkpoint past which a session is checkpointed
when it is passivated (a tenth of the writer's interval: below it, folding
the tail on activation costs less than the checkpoint)."""

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


class _Hosted:
    """A session this host holds."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.lease: SessionLease | None = None
        self.session: Session | None = None
        self.wake = trio.Event()
        self.scope = trio.CancelScope()
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

    def idle(self) -> bool:
        """Loaded, with nothing running and nothing waiting in its inbox."""
        session = self.session
        return (
            session is not None
            and self.quiet_since is not None
            and all(loop.quiescent for loop in session.loops.values())
        )


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
    ) -> None:
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
        self.principals = checked_principals(principals)
        """Who this host takes commands from (None: anyone, named or not)."""
        self.journal = journal
        self.definitions = dict(definitions)
        self.id = host_id or new_id("host_")
        self._token = new_id("tok_")
        """Drawn per process: tells this host's registration of ``id`` from another's."""
        self.idle_after, self.lease_ttl, self.poll = idle_after, lease_ttl, poll
        self.max_sessions = max_sessions
        self._quiet_poll = max(poll, lease_ttl / 3)
        """How often a quiet session reads its own inbox (for an entry past the pass's limit)."""
        self.sessions: dict[str, _Hosted] = {}
        self._claims = self._failovers = self._passivations = self._applied = 0
        self._fenced = 0
        self._stopping = False
        self._stop_checkpoints = trio.CapacityLimiter(_STOP_CHECKPOINTS)
        self._stop_checkpoints_until = math.inf
        """No checkpoint at rest is begun past this (trio time): set by ``aclose``."""
        self._stop_checkpoints_skipped = 0
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.log = log.bind(host=self.id)

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
    ) -> AsyncIterator[Host]:
        """Run a host until the block ends; then ``aclose`` (a clean stop).
        ``principals``: take commands only from these (a collection, or a
        predicate on the principal); others are refused, with the reason in
        the entry's outcome.  Knowing a principal authorizes nothing more.

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
        )
        await host._register()
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

    def statistics(self) -> HostStatistics:
        return HostStatistics(
            loaded=len(self.sessions),
            claims=self._claims,
            failovers=self._failovers,
            passivations=self._passivations,
            applied=self._applied,
            fenced=self._fenced,
        )

    def poke(self) -> None:
        """Look for work now rather than at the next poll."""
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
        while not self._stopping:
            self._wake = trio.Event()
            # Room for the sessions held here too: the pass wakes the quiet ones.
            claims = await self.journal.claimable(
                definitions=names, owner=self.id, limit=self.max_sessions + len(self.sessions)
            )
            waiting = 0
            for claim in claims:
                hosted = self.sessions.get(claim.session)
                if hosted is not None:
                    hosted.wake.set()
                elif self._stopping:
                    break
                elif len(self.sessions) < self.max_sessions:
                    self._start(claim)
                else:
                    waiting += 1
            if waiting and not self._make_room(waiting):
                if not full:
                    self.log.warning(
                        "host_full", loaded=len(self.sessions), max_sessions=self.max_sessions
                    )
                full = True  # claims nothing until a session is idle
            else:
                full = False
            with trio.move_on_after(self.poll):
                await self._wake.wait()

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
        rather than wait for the next poll; the poll stays, for wake-ups
        missed and for backends without them (SQLite).  Started once the
        journal says it is watching (its first wake-up, ``""``)."""
        started = False
        try:
            async for session in self.journal.inbox_wakeups():
                if not started:
                    task_status.started()
                    started = True
                hosted = self.sessions.get(session)
                if hosted is not None:
                    hosted.wake.set()
                else:
                    self._wake.set()
        except JournalError as exc:
            self.log.warning("inbox_wakeups_lost", error=str(exc))
        if not started:
            task_status.started()

    def _start(self, claim: ib.Claim) -> None:
        hosted = _Hosted(claim.session)
        self.sessions[claim.session] = hosted
        assert self._nursery is not None
        self._nursery.start_soon(self._host, hosted, claim)

    async def _register(self) -> None:
        await self.journal.register_host(
            self.id, self._token, ttl=self.lease_ttl, definitions=sorted(self.definitions)
        )

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
            await trio.sleep_until(max(due, trio.current_time()))
            due = trio.current_time()
            try:
                await self._register()
            except HostIdInUseError as exc:
                # Paused past its registration, and the id taken since: the
                # sessions' own leases decide what this host may still write.
                self.log.error("host_id_taken", error=str(exc))
            except JournalError as exc:
                self.log.warning("host_renewal_failed", error=str(exc))
            await self._renew_all()

    async def _renew_all(self) -> None:
        held = [(h, h.lease) for h in self.sessions.values() if h.lease and not h.stopping]
        if not held:
            return
        leases = [lease for _, lease in held]
        try:
            renewed = await self.journal.renew_all(leases, ttl=self.lease_ttl)
        except JournalError as exc:
            self.log.warning("lease_renewal_failed", sessions=len(leases), error=str(exc))
            return
        for (hosted, lease), after in zip(held, renewed, strict=True):
            if hosted.lease is not lease:
                continue  # released or dropped meanwhile: its own release fenced it
            if after is None:
                self._drop(hosted, "lease_lost")
            else:
                hosted.lease = after

    def _drop(self, hosted: _Hosted, why: str) -> None:
        self._fenced += 1
        self.log.warning("session_dropped", session=hosted.id, reason=why)
        hosted.lease = None  # not ours to release
        hosted.scope.cancel()

    # -- one session ---------------------------------------------------------------------

    async def _host(self, hosted: _Hosted, claim: ib.Claim) -> None:
        try:
            with hosted.scope:
                await self._claim_and_run(hosted, claim)
        except FencedError:
            self._drop(hosted, "fenced")
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
                await self._release(hosted)
            del self.sessions[hosted.id]
            hosted.done.set()
            self._wake.set()  # its place is free: look for work now

    async def _release(self, hosted: _Hosted, definition: str | None = None) -> None:
        lease, hosted.lease = hosted.lease, None
        if lease is None:
            return
        try:
            await self.journal.release(lease, handoff=hosted.busy, definition=definition)
        except JournalError as exc:
            self.log.warning("lease_release_failed", session=hosted.id, error=str(exc))

    async def _claim_and_run(self, hosted: _Hosted, claim: ib.Claim) -> None:
        try:
            lease = await self.journal.acquire(hosted.id, self.id, ttl=self.lease_ttl)
        except LeaseHeldError:
            return  # another host was quicker
        hosted.lease = lease
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
            await self._serve(hosted, session)
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
            entries = await self.journal.inbox(hosted.id)
            first = entries[0].command if entries else None
            if not isinstance(first, ib.Create):
                return None  # nothing to start it with: the entries wait
            refusal = self.refusal(first)
            if refusal is not None:
                # Consumed with its reason: no session is started for it.
                consumed = ib.Consumed(entry=entries[0].number, outcome=refusal)
                await self.journal.append(lease, [], expected_seq=0, consumes=[consumed])
                self._applied += 1
                return None
            definition = self.definitions.get(first.definition)
            if definition is None:
                await self._release(hosted, definition=first.definition)
                return None
            return Session.create(self.journal, definition, lease=lease, principal=first.principal)
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

    async def _serve(self, hosted: _Hosted, session: Session) -> None:
        try:
            await self._serving(hosted, session)
        finally:
            # Seen before the session shuts down (which settles a running turn).
            hosted.busy = not all(loop.quiescent for loop in session.loops.values())

    async def _serving(self, hosted: _Hosted, session: Session) -> None:
        last = 0
        quiet_since = trio.current_time()
        while not hosted.stopping:
            hosted.wake = trio.Event()
            entries = await self.journal.inbox(hosted.id, after=last)
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
                    self._passivations += 1
                    why = "pressure" if hosted.evict else "idle"
                    self.log.info("session_passivated", session=hosted.id, reason=why)
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
        if command is None:
            self.log.error(
                "inbox_entry_damaged", session=session.id, entry=entry.number, damage=entry.damage
            )
            message = (
                f"inbox entry {entry.number} (key {entry.key!r}) of session {session.id}: "
                f"{entry.damage}; it was skipped and the session went on: send the command "
                "again under a new key"
            )
            await session.consume_entry(
                ib.Consumed(
                    entry=entry.number,
                    outcome=ib.InboxOutcome(error="InboxEntryDamaged", message=message),
                )
            )
            return
        refusal = None if isinstance(command, ib.Create) else self.refusal(command)
        if refusal is not None:
            self._applied += 1
            await session.consume_entry(ib.Consumed(entry=entry.number, outcome=refusal))
            return
        match = _expected(command, entry.key)
        expectation = session.expect_entry(entry.number, match) if match is not None else None
        outcome: ib.InboxOutcome
        try:
            value = await _run(session, command, entry.key)
            outcome = ib.InboxOutcome(value=value)
        except LoopClosedError:
            raise  # the session is closing: the entry waits for the next owner
        except (LoopError, ValueError) as exc:
            outcome = ib.InboxOutcome(error=type(exc).__name__, message=str(exc))
        finally:
            if expectation is not None:
                session.forget_entry(expectation)
        self._applied += 1
        if expectation is not None and expectation.outcome is not None:
            return  # consumed by the append that holds what the command made
        await session.consume_entry(ib.Consumed(entry=entry.number, outcome=outcome))

    def refusal(self, command: ib.InboxCommand) -> ib.InboxOutcome | None:
        """The outcome refusing ``command`` for its principal (None: taken)."""
        return refusal(self.principals, self.id, command, self.log)
