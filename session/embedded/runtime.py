"""Session: many loops on one journal — lifecycle and the command facade.

A session holds the journal's lease for its id, runs its loops in one
nursery, and is their ``LoopHost``.  Every record goes through its single
``Writer``; subscribers read through ``Subscriptions``.  Commands check their
arguments before anything is sent (``validation``), and each goes to the one
loop it is for.

The module is one piece on purpose: ``Session`` is the public facade, one
short method per command plus the lifecycle (create, restore, fork); the work
lives in the writer, subscriptions, keys, restore and fork modules it calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import trio

from journal import Journal, JournalError, Record, SessionLease, SessionNotFoundError
from journal.content import Block, Message, ResultBlock
from journal.events import Event, Provenance, TurnRejected
from journal.inbox import Consumed, InboxOutcome
from loopruntime import (
    DefinitionError,
    GateMismatchError,
    Limits,
    Loop,
    LoopClosedError,
    LoopDefinition,
    LoopError,
    LoopState,
    LoopStoppedError,
    ModeNotFoundError,
    NotUnknownEffectError,
    Tool,
    UnknownLoopError,
    fold,
)
from loopruntime.host import (
    AnswerGate,
    CancelQueuedInput,
    ChangeMode,
    Command,
    Compact,
    DecideGate,
    Interrupt,
    Pause,
    ResolveToolCall,
    Resume,
    Shutdown,
    Snapshot,
    Steer,
    SubagentResult,
    UserInput,
    check_key,
    check_principal,
    child_outcome,
    copy_state,
    find_definition,
    new_id,
    tokens_spent,
)
from loopruntime.models import Waiting, waiting_of

from .checkpoints import DEFAULT_EVERY, Checkpointer, SessionFolder, read_restored
from .collaboration import Collaboration, CollabStatus
from .collaboration.driver import collaborate, resume
from .collaboration.driver import status as collaboration_status
from .drift import Drift, check_choice, check_drift, reopening
from .errors import SessionExistsError, UnknownSessionError, VerifyError
from .fork import inherited_records, plan_fork, write_fork
from .keys import Route, send_keyed
from .results import turn_result
from .subscriptions import StreamDelta, Subscriptions
from .validation import (
    answer_text,
    check_decision,
    inference_command,
    steering_text,
    tool_result,
    tools_command,
    user_message,
)
from .writer import CommitStatistics, Expectation, Writer

__all__ = ["ROOT_LOOP", "Session", "StreamDelta"]


def _routed() -> Loop:
    raise AssertionError("a loop-addressed command is sent to the loop it names")


ROOT_LOOP = "main"
"""Loop id of a session's first loop."""


class Session:
    """Many loops, one journal.  Use ``Session.create`` or ``Session.restore``."""

    def __init__(
        self,
        journal: Journal,
        session_id: str,
        definition: LoopDefinition,
        *,
        checkpoint_every: int | None = DEFAULT_EVERY,
    ) -> None:
        self.journal = journal
        self.id = session_id
        self.definition = definition
        self.loops: dict[str, Loop] = {}
        self._closed = False
        self._watching: dict[str, None] = {}
        """Background children whose result is being delivered (a dict as an
        ordered set: empty, it is a quarter of an empty set's size and the
        collector does not track it)."""
        self._also: list[LoopDefinition] = []
        self.collab_streams: dict[str, None] = {}
        """Stream ids of the collaborations started by this session object (a
        dict as an ordered set, like ``_watching``)."""
        self._delivered: trio.lowlevel.ParkingLot | None = None
        """Where ``wait_idle`` waits for a background child's delivery (made then)."""
        self._key_flights: dict[str, trio.Event] = {}
        """Keyed commands on their way to a loop, by key."""
        self._prompts: set[str] = set()
        """Digests of the system prompts whose text the journal holds."""
        self._creator: str | None = None
        """Who created the session (``create(principal=)``), for its first loop's start."""
        self._nursery: trio.Nursery
        """Where the loops run (set when the session starts running)."""
        # Bound methods, not lambdas: no closure cells per session.
        self._subscriptions = Subscriptions(
            journal, session_id, head=self._head, closed=self._is_closed
        )
        self._writer = Writer(
            journal,
            session_id,
            self.loops,
            self._subscriptions.subscribers,
            Checkpointer(checkpoint_every),
        )
        # The loops' side of LoopHost: they commit to the writer and publish
        # deltas to the subscriptions directly, so the hot paths take no
        # extra hop through the session.
        self.commit = self._writer.commit
        self.publish_delta = self._subscriptions.publish_delta

    def _head(self) -> int:
        return self._writer.head

    def _is_closed(self) -> bool:
        return self._closed

    # -- lifecycle ---------------------------------------------------------------

    @classmethod
    def create(
        cls,
        journal: Journal,
        definition: LoopDefinition,
        *,
        session_id: str | None = None,
        checkpoint_every: int | None = DEFAULT_EVERY,
        lease: SessionLease | None = None,
        principal: str | None = None,
    ) -> AbstractAsyncContextManager[Session]:
        """A new session with one loop running ``definition``.  On exit the
        session shuts down (a running turn is interrupted and settled).

        Every ``checkpoint_every`` records the writer adds a checkpoint, so a
        restore folds only what follows the last one (None: never).  With
        ``lease`` (taken by a host with ``Journal.acquire``) the session
        writes under it instead of opening the session itself.  ``principal``
        (who creates it) is recorded on the first loop's ``loop.started``."""
        return _Opening(
            partial(
                cls._create,
                journal,
                definition,
                session_id=session_id,
                checkpoint_every=checkpoint_every,
                lease=lease,
                principal=principal,
            )
        )

    @classmethod
    async def _create(
        cls,
        journal: Journal,
        definition: LoopDefinition,
        *,
        session_id: str | None,
        checkpoint_every: int | None,
        lease: SessionLease | None,
        principal: str | None,
    ) -> tuple[Session, AbstractAsyncContextManager[None]]:
        principal = check_principal(principal)
        fresh = lease is None and session_id is None
        session_id = lease.session if lease is not None else session_id or new_id("ses_")
        session = cls(journal, session_id, definition, checkpoint_every=checkpoint_every)
        session._creator = principal
        existing = 0
        if not fresh:
            # A chosen id may name a session with a live writer.  An id made
            # here is 64 random bits nobody else holds, so the read (a hop to
            # the journal, and for a new id an exception, cyclic garbage
            # with its traceback) is spared; the lease's head below still
            # refuses one that somehow has records.
            try:
                existing = await journal.head(session_id)
            except SessionNotFoundError:
                existing = -1
            if existing == 0 and lease is None:
                await _refuse_other_definition(journal, session_id, definition.name)
        if existing > 0:
            # Refused before taking a lease, so a live writer is not fenced.
            raise SessionExistsError(
                f"session {session_id} already has {existing} records; use "
                "Session.restore to continue it"
            )
        if lease is None:
            lease = await journal.open_session(session_id, create=True)
        if lease.head:
            raise SessionExistsError(
                f"session {session_id} already has {lease.head} records; use "
                "Session.restore to continue it"
            )
        return session, session._running(lease, {ROOT_LOOP: LoopState()})

    @classmethod
    @asynccontextmanager
    async def restore(
        cls,
        journal: Journal,
        session_id: str,
        definition: LoopDefinition,
        *,
        also: Sequence[LoopDefinition] | Collaboration = (),
        checkpoint_every: int | None = DEFAULT_EVERY,
        use_checkpoints: bool = True,
        drift: Drift = "record",
        lease: SessionLease | None = None,
    ) -> AsyncIterator[Session]:
        """Continue a session from its journal: fold every loop (from the last
        checkpoint on, unless ``use_checkpoints`` is False), settle what a
        crash left open, and start the loops.  ``also`` names definitions of
        loops that are not delegates of ``definition`` (the workers of a
        collaboration, or the collaboration itself).

        ``drift``: a definition that differs from the configuration the
        journal recorded is recorded (``"record"``: ``loop.reconfigured``) or
        refused before the lease (``"refuse"``: ``DefinitionDriftError``);
        docs/restore.md, "Deploys".  With ``lease`` (taken by a host with
        ``Journal.acquire``, which fenced every earlier writer) the journal
        is read under it, once."""
        check_choice(drift)
        # Built first: it refuses a bad checkpoint_every before any I/O.
        session = cls(journal, session_id, definition, checkpoint_every=checkpoint_every)
        session._also.extend(also.definitions() if isinstance(also, Collaboration) else also)
        # Read and checked before the lease is taken: taking it fences the
        # process that runs the session, which a restore bound to fail (an
        # unknown session, a definition that does not fit) must never do.
        try:
            restored = await read_restored(journal, session_id, use_checkpoints=use_checkpoints)
        except SessionNotFoundError as exc:
            raise session._unknown() from exc
        session._check_fits(restored.states, drift)
        if lease is None:
            try:
                lease = await journal.open_session(session_id, create=False)
            except SessionNotFoundError as exc:
                raise session._unknown() from exc
        if lease.head != restored.head:
            # A writer appended between the read and the lease.  The lease has
            # fenced it, so the journal is final now: read it again.  Only this
            # race pays for a second read.
            restored = await read_restored(journal, session_id, use_checkpoints=use_checkpoints)
            session._check_fits(restored.states, drift)
        session._writer.checkpoints.resume(restored)
        async with session._running(lease, restored.states, restoring=True):
            yield session

    @classmethod
    @asynccontextmanager
    async def fork(
        cls,
        journal: Journal,
        session_id: str,
        definition: LoopDefinition,
        *,
        at: int,
        new_session_id: str | None = None,
        also: Sequence[LoopDefinition] | Collaboration = (),
        checkpoint_every: int | None = DEFAULT_EVERY,
    ) -> AsyncIterator[Session]:
        """A new session that starts where ``session_id`` stood at seq ``at``,
        opened like a restore (what was open there is settled as after a
        crash).  The source is never changed.  Its id is the session's ``id``
        (``new_session_id``, or a fresh one).  Everything is checked first: a
        seq outside the source, a source that fails its check (``ForkError``),
        a source that is not there (``UnknownSessionError``), an id in use
        (``SessionExistsError``) or a definition that cannot run the loops
        write nothing."""
        plan = await plan_fork(journal, session_id, at, new_session_id)
        probe = cls(journal, plan.new_session_id, definition, checkpoint_every=checkpoint_every)
        probe._also.extend(also.definitions() if isinstance(also, Collaboration) else also)
        probe._check_fits(plan.states)
        await write_fork(journal, plan)
        async with cls.restore(
            journal,
            plan.new_session_id,
            definition,
            also=also,
            checkpoint_every=checkpoint_every,
        ) as session:
            yield session

    def _unknown(self) -> UnknownSessionError:
        return UnknownSessionError(
            f"there is no session {self.id} in journal {self.journal.url}; "
            "`loopruntime sessions` lists the ones there are"
        )

    def _check_fits(self, states: dict[str, LoopState], drift: Drift = "record") -> None:
        """Refuse restored states this session's definitions cannot run (or,
        under ``drift="refuse"``, run under a changed definition)."""
        if ROOT_LOOP not in states:
            raise UnknownSessionError(f"session {self.id} has no loop records to restore")
        for loop_id, state in states.items():
            if state.mode is not None and not state.stopped:
                try:
                    self.definition.mode(state.mode)
                except ModeNotFoundError as exc:
                    raise ModeNotFoundError(
                        f"cannot restore loop {loop_id} of session {self.id}: its journal "
                        f"says it runs in mode {state.mode!r}, which the definition no longer "
                        f"has ({exc})"
                    ) from exc
        for loop_id, state in states.items():
            # Raised here, as itself: inside the running session it would come
            # out wrapped in the nursery's exception group.
            self._definition_of(loop_id, state)
        check_drift(self.id, states, self._definition_of, drift)

    def _running(
        self, lease: Any, states: dict[str, LoopState], *, restoring: bool = False
    ) -> _Running:
        """The session's running context: its nursery, writer and loops, shut
        down on exit."""
        return _Running(self, lease, states, restoring)

    async def _start(
        self, nursery: trio.Nursery, states: dict[str, LoopState], restoring: bool
    ) -> None:
        """Start the loops in the session's nursery (and, restored, settle
        what they left open first)."""
        if restoring:
            # Every loop exists before the first settling commit: a
            # checkpoint that commit carries pictures every loop there is.
            restored = [self._make_loop(loop_id, state) for loop_id, state in states.items()]
            self._prompts.update(d for st in states.values() for d in st.prompts)
            for loop in restored:
                await self.commit(loop, reopening(loop.state, loop.definition, self))
        for loop_id, state in states.items():
            loop = self.loops.get(loop_id) or self._make_loop(loop_id, state)
            if state.stopped:
                continue
            # A loop with nothing to do until a command comes (a new one, or
            # a restored one at rest) starts parked, without a task of its own.
            await loop.start_parked(nursery)
        for loop in list(self.loops.values()):
            for child in loop.state.children.values():
                # A background child whose result the parent never got.
                if child.background and child.status == "running":
                    if child.child_loop in self.loops:
                        self.watch_background(loop, child.child_loop)

    def _make_loop(self, loop_id: str, state: LoopState) -> Loop:
        loop = Loop(
            loop_id=loop_id,
            definition=self._definition_of(loop_id, state),
            host=self,
            state=state,
            principal=self._creator,
        )
        self.loops[loop_id] = loop
        return loop

    def _definition_of(self, loop_id: str, state: LoopState) -> LoopDefinition:
        definition = self.definition
        if state.definition and state.definition != definition.name:
            found = next(
                (
                    f
                    for root in (definition, *self._also)
                    if (f := find_definition(root, state.definition)) is not None
                ),
                None,
            )
            if found is None:
                raise UnknownSessionError(
                    f"loop {loop_id} of session {self.id} runs definition "
                    f"{state.definition!r}, which {definition.name!r} does not delegate to; "
                    "pass the definitions of collaboration workers as Session.restore(also=...)"
                )
            definition = found
        return definition

    # -- children (LoopHost) -------------------------------------------------------

    async def start_child(
        self,
        parent: Loop,
        child_id: str,
        definition: LoopDefinition,
        provenance: Provenance,
        *,
        mode: str | None = None,
    ) -> Loop:
        # The parent's delegate call (its tool.started record, whose id is the
        # execution id) is the cause of the child's first records.
        return await self.start_worker(
            child_id, definition, provenance, cause=provenance.execution_id, mode=mode
        )

    def child(self, child_id: str) -> Loop | None:
        return self.loops.get(child_id)

    async def start_worker(
        self,
        loop_id: str,
        definition: LoopDefinition,
        provenance: Provenance,
        *,
        cause: str | None = None,
        mode: str | None = None,
    ) -> Loop:
        """Start a loop that is not a delegate of another (collaboration
        workers), in ``mode``; a start that fails leaves no loop behind."""
        loop = Loop(
            loop_id=loop_id,
            definition=definition,
            host=self,
            parent=provenance,
            cause=cause,
            mode=mode,
        )
        self.loops[loop_id] = loop
        try:
            await self._nursery.start(loop.run)
        except BaseException as exc:
            if not loop.state.loop:
                del self.loops[loop_id]
            refused = _refusal(exc) if isinstance(exc, BaseExceptionGroup) else None
            if refused is not None:
                raise refused from None
            raise
        return loop

    async def collaborate(
        self, collaboration: Collaboration, input: str, *, collab_id: str | None = None
    ) -> str:
        """Run a coordinator/worker collaboration; returns its output, or raises
        ``CollaborationError`` with the failure code."""
        self._loop(None)  # refuse when closed
        self._also.extend(collaboration.definitions())
        return await collaborate(self, collaboration, input, collab_id=collab_id)

    async def resume_collaboration(self, collaboration: Collaboration, collab_id: str) -> str:
        """Continue a collaboration recorded in this session's journal."""
        self._loop(None)
        return await resume(self, collaboration, collab_id)

    async def collaboration_status(self, collab_id: str) -> CollabStatus:
        """What collaboration ``collab_id`` is doing: its phase (a coordinator
        whose open gates, unknown effects or running children keep its
        decision from counting is ``coordinator unresolved``, and ``unresolved``
        names them), its turns and running tasks."""
        return await collaboration_status(self, collab_id)

    def new_prompts(self, prompts: dict[str, str]) -> dict[str, str]:
        fresh = {d: text for d, text in prompts.items() if d not in self._prompts}
        self._prompts.update(fresh)
        return fresh

    def watch_background(self, parent: Loop, child_id: str) -> None:
        if child_id in self._watching:
            return
        self._watching[child_id] = None
        self._nursery.start_soon(self._deliver, parent, child_id)

    async def _deliver(self, parent: Loop, child_id: str) -> None:
        child = self.loops[child_id]
        await child.wait_settled()
        status, output = child_outcome(child)
        try:
            await parent.send(
                SubagentResult(
                    input_id=new_id("in_"),
                    child_loop=child_id,
                    text=output,
                    status=status,
                    background=True,
                    tokens=tokens_spent(child.state),
                )
            )
        except LoopClosedError:
            return  # the parent stopped; a restore delivers it (exactly once)
        finally:
            self._watching.pop(child_id, None)
            if self._delivered is not None:
                self._delivered.unpark_all()
        await child.finish()

    async def shutdown(self) -> None:
        """Stop every loop (running turns are interrupted and settled).
        Queued input stays in the journal for a later restore."""
        if self._closed:
            return
        self._closed = True
        for loop in list(self.loops.values()):
            try:
                await loop.send(Shutdown())
            except LoopClosedError:
                pass
        try:
            # Pipelined records still on their way go in before the writer stops.
            await self._writer.wait_durable()
        except Exception:
            pass  # the writer's own failure: the session's run raises it
        self._subscriptions.wake_all()

    # -- commands -----------------------------------------------------------------

    def _loop(self, loop: str | None) -> Loop:
        if self._closed:
            raise LoopClosedError(f"session {self.id} is shut down; it takes no more commands")
        found = self.loops.get(loop or ROOT_LOOP)
        if found is None:
            raise UnknownLoopError(
                f"session {self.id} has no loop {loop!r}; nothing was committed",
                session=self.id,
                loop=loop or ROOT_LOOP,
            )
        return found

    def _limits(self, loop: Loop | None) -> Limits:
        """The limits a command's content is checked against: those of the
        loop it goes to, under its mode (the root loop's when it names none
        that exists: the command is refused for that anyway)."""
        loop = loop or self.loops.get(ROOT_LOOP)
        if loop is None:
            return Limits()
        return loop.definition.limits_under(loop.state.mode)

    async def _send(self, target: Loop | None, command: Command, route: Route) -> Any:
        return await send_keyed(self.loops, self._key_flights, target, command, route)

    async def submit(
        self,
        content: str | Message | Sequence[Block],
        *,
        loop: str | None = None,
        key: str | None = None,
        principal: str | None = None,
    ) -> str:
        """Queue input; returns its id once it is durable.  ``key`` makes the
        call idempotent: a repeat returns the first call's input id and
        commits nothing (see docs/boundaries.md).  Beyond
        ``Limits.max_queued_inputs`` queued inputs it raises ``QueueFullError``."""
        key, principal = check_key(key), check_principal(principal)
        message = user_message(content, self._limits(self.loops.get(loop or ROOT_LOOP)))
        input_id = new_id("in_")
        command = UserInput(input_id=input_id, messages=(message,), key=key, principal=principal)
        try:
            target = self._loop(loop)
            result: str = await self._send(target, command, _routed)
        except LoopClosedError:
            await self._reject_closed(loop, input_id, key, principal)
            raise
        return result

    async def _reject_closed(
        self, loop: str | None, input_id: str, key: str | None, principal: str | None
    ) -> None:
        """Record that input arrived while the session shut down, when the
        journal can still take it; the caller raises ``LoopClosedError`` either way."""
        target = self.loops.get(loop or ROOT_LOOP)
        if target is None:
            return
        rejection = TurnRejected(
            input_id=input_id, reason="shutting_down", key=key, principal=principal
        )
        try:
            with trio.CancelScope(shield=True):
                await self._writer.commit(target, [rejection])
        except (JournalError, LoopError):
            pass  # the journal is closed, or another writer holds the session

    async def steer(
        self,
        text: str,
        *,
        loop: str | None = None,
        key: str | None = None,
        principal: str | None = None,
    ) -> str:
        key, principal = check_key(key), check_principal(principal)
        text = steering_text(text, self._limits(self.loops.get(loop or ROOT_LOOP)))
        command = Steer(steer_id=new_id("st_"), text=text, key=key, principal=principal)
        steer_id: str = await self._send(self._loop(loop), command, _routed)
        return steer_id

    async def cancel_queued(
        self,
        input_id: str,
        *,
        loop: str | None = None,
        key: str | None = None,
        principal: str | None = None,
    ) -> None:
        key, principal = check_key(key), check_principal(principal)
        command = CancelQueuedInput(input_id=input_id, key=key, principal=principal)
        await self._send(self._loop(loop), command, _routed)

    async def interrupt(
        self, *, loop: str | None = None, key: str | None = None, principal: str | None = None
    ) -> bool:
        """Stop the running turn; True when one was stopped (a keyed repeat
        answers what the first call did)."""
        key, principal = check_key(key), check_principal(principal)
        command = Interrupt(key=key, principal=principal)
        return bool(await self._send(self._loop(loop), command, _routed))

    async def pause(
        self, loop: str | None = None, *, key: str | None = None, principal: str | None = None
    ) -> bool:
        """Pause ``loop`` (the root loop by default): one ``loop.paused``.  From
        then on it starts no model call, tool, child, turn or compaction, and
        its children's next steps wait too; a step already running finishes
        and is recorded.  Input and commands are taken meanwhile and run after
        ``resume``; open gates stay answerable, their answers acted on after
        it.  The pause is the journal's: it holds across restore and failover.
        True when this call paused it; False when it was already paused
        (nothing recorded but the key: idempotent).  A stopped loop raises
        ``LoopStoppedError``, an unknown one ``UnknownLoopError``; neither
        commits anything."""
        key, principal = check_key(key), check_principal(principal)
        command = Pause(key=key, principal=principal)
        return bool(await self._send(self._running_loop(loop, "pause"), command, _routed))

    async def resume(
        self, loop: str | None = None, *, key: str | None = None, principal: str | None = None
    ) -> bool:
        """End ``loop``'s pause: one ``loop.resumed``, and what waited goes on
        (the open turn's next step, queued input, answered gates, requested
        compactions, the children's steps).  Only a resume releases a pause.
        True when this call resumed it; False when it was not paused (nothing
        recorded but the key).  Errors as ``pause``."""
        key, principal = check_key(key), check_principal(principal)
        command = Resume(key=key, principal=principal)
        return bool(await self._send(self._running_loop(loop, "resume"), command, _routed))

    def _running_loop(self, loop: str | None, what: str) -> Loop:
        """The loop ``loop`` names, refused with ``LoopStoppedError`` when it
        stopped for good (a keyed repeat is answered only while it runs)."""
        found = self._loop(loop)
        if found.state.stopped:
            raise LoopStoppedError(
                f"loop {found.id} of session {self.id} has stopped for good; there is "
                f"nothing to {what} and nothing was committed",
                loop=found.id,
            )
        return found

    def _gate_loop(self, gate_id: str) -> Loop:
        for loop in self.loops.values():
            if gate_id in loop.state.gates:
                return loop
        self._loop(None)  # raises when closed
        raise GateMismatchError(f"gate {gate_id} is not open in session {self.id}")

    async def answer(
        self,
        gate_id: str,
        text: str | Any,
        *,
        key: str | None = None,
        principal: str | None = None,
    ) -> None:
        """Answer an open question: text for a question (one of its choices
        when it has them) or a URL gate (the value it asks for, if any); for
        a form, JSON text or the data itself (a dict, a Struct...), which must
        validate as the form's type.  An answer that does not fit raises
        ``InvalidAnswerError`` naming why (the field, for a form), and the gate
        stays open."""
        key, principal = check_key(key), check_principal(principal)
        at = next((lp for lp in self.loops.values() if gate_id in lp.state.gates), None)
        gate = at.state.gates[gate_id] if at is not None else None
        # Data is a form's answer; for a gate not open here (a keyed repeat
        # after it closed) the loop's answer decides.
        text = answer_text(
            gate_id, text, data=gate is None or gate.form is not None, limits=self._limits(at)
        )
        self._loop(None)  # refuse when closed, before a repeat is answered
        command = AnswerGate(gate_id=gate_id, answer=text, key=key, principal=principal)
        await self._send(None, command, lambda: self._gate_loop(gate_id))

    async def decide(
        self,
        gate_id: str,
        allow: bool,
        scope: str = "once",
        *,
        key: str | None = None,
        principal: str | None = None,
    ) -> None:
        key, principal = check_key(key), check_principal(principal)
        # Checked before the gate is looked up: a malformed decision is refused
        # whatever the gate, and the gate stays open.
        checked = check_decision(gate_id, allow, scope)
        self._loop(None)
        command = DecideGate(
            gate_id=gate_id,
            allow=allow,
            scope=checked,
            key=key,
            principal=principal,
        )
        await self._send(None, command, lambda: self._gate_loop(gate_id))

    async def resolve(
        self,
        execution_id: str,
        result: str | Sequence[ResultBlock],
        is_error: bool = False,
        *,
        key: str | None = None,
        principal: str | None = None,
    ) -> None:
        """Settle a tool call whose outcome is unknown (after a crash)."""
        key, principal = check_key(key), check_principal(principal)
        at = next((lp for lp in self.loops.values() if execution_id in lp.state.unknown), None)
        content = tool_result(execution_id, result, is_error, self._limits(at))
        self._loop(None)
        command = ResolveToolCall(
            execution_id=execution_id,
            content=content,
            is_error=is_error,
            key=key,
            principal=principal,
        )
        await self._send(None, command, lambda: self._unknown_loop(execution_id))

    def _unknown_loop(self, execution_id: str) -> Loop:
        for loop in self.loops.values():
            if execution_id in loop.state.unknown:
                return loop
        self._loop(None)
        raise NotUnknownEffectError(
            f"execution {execution_id} has no unknown outcome in session {self.id}"
        )

    async def compact(
        self, *, loop: str | None = None, key: str | None = None, principal: str | None = None
    ) -> str:
        """Ask for a compaction; its outcome is a compaction.committed or
        compaction.rejected record.  Returns the attempt id.  With ``key`` the
        request is durable: a restored session runs it if it had not started."""
        key, principal = check_key(key), check_principal(principal)
        command = Compact(attempt_id=new_id("cmp_"), key=key, principal=principal)
        attempt_id: str = await self._send(self._loop(loop), command, _routed)
        return attempt_id

    async def change_mode(
        self,
        mode: str | None,
        *,
        loop: str | None = None,
        key: str | None = None,
        principal: str | None = None,
    ) -> None:
        key, principal = check_key(key), check_principal(principal)
        command = ChangeMode(mode=mode, key=key, principal=principal)
        await self._send(self._loop(loop), command, _routed)

    async def change_inference(
        self,
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        reset: bool = False,
        loop: str | None = None,
        key: str | None = None,
        principal: str | None = None,
    ) -> None:
        """Choose the loop's model (a registered name) and output budget from its
        next turn on (None keeps a choice; ``reset`` drops both first): one
        ``loop.inference_changed``.  docs/restore.md, "Deploys"."""
        command = inference_command(model, max_tokens, reset, check_key(key))
        command.principal = check_principal(principal)
        await self._send(self._loop(loop), command, _routed)

    async def replace_tools(
        self,
        tools: Sequence[str | Tool] | None,
        *,
        loop: str | None = None,
        key: str | None = None,
        principal: str | None = None,
    ) -> None:
        """Offer these registered tools (names or ``Tool``s) from the next turn
        on, in place of the definition's own (None: those again): one
        ``loop.tools_replaced``.  docs/restore.md, "Deploys"."""
        key, principal = check_key(key), check_principal(principal)
        target = self._loop(loop)
        command = tools_command(tools, target.definition, key)
        command.principal = principal
        await self._send(target, command, _routed)

    async def snapshot(self, *, loop: str | None = None) -> LoopState:
        """A consistent copy of a loop's state."""
        state: LoopState = await self._loop(loop).send(Snapshot())
        if state.last_seq > self._writer.head:
            # It holds pipelined records: returned once they are durable.  Not
            # ``wait_durable(state.last_seq)``: a fork's loop that has folded
            # no record of its own yet carries its source's seq, which this
            # session may never reach.
            await self._writer.wait_durable()
        return state

    async def result(self, turn_id: int | None = None, *, loop: str | None = None) -> Any:
        """The answer of turn ``turn_id`` (None: the last turn that ended):
        its typed value when the definition asks for one (``output=``),
        decoded from the journal, else the text of its last reply.  Raises
        ``NoResultError`` when that turn did not complete."""
        target = self._loop(loop)
        # A fork's turns before its seq are its source's: read them there.
        records = await inherited_records(self.journal, self.id)
        records += [r async for r in self.journal.read(self.id)]
        return turn_result(records, target.id, target.definition, turn_id)

    async def wait_idle(self) -> None:
        """Wait until no loop has work it can do without a person (idle, or
        waiting at a gate or on an unknown effect)."""
        while True:
            for loop in list(self.loops.values()):
                await loop.wait_quiescent()
            # A checkpoint: a loop's task woken with this one (by the same
            # change) runs before the check.  A parent waiting on a foreground
            # child that has settled is not quiet even before then
            # (``Loop.wait_child``).
            await trio.lowlevel.checkpoint()
            if self._closed:
                return
            due = any(self.loops[c].settled for c in self._watching)
            if not due and all(loop.quiescent for loop in self.loops.values()):
                return
            if due:
                # A settled background child is about to report to its parent.
                if self._delivered is None:
                    self._delivered = trio.lowlevel.ParkingLot()
                await self._delivered.park()

    @property
    def head(self) -> int:
        """Seq of the last record committed in this session (folded; durable,
        or pipelined to be appended with the next durable commit)."""
        return self._writer.head

    # -- what a host does with a session it holds (``session.hosting.host``) --------------

    async def checkpoint_at_rest(self, after: int) -> None:
        """Checkpoint the session, at rest and about to be unloaded, when at
        least ``after`` records followed its last checkpoint."""
        await self._writer.checkpoint_at_rest(after)

    def expect_entry(
        self, entry: int, match: Callable[[Event], InboxOutcome | None]
    ) -> Expectation:
        """Have the append carrying the first event ``match`` accepts consume
        inbox entry ``entry``; ``forget_entry`` it when none came."""
        return self._writer.expect(entry, None, match)

    def forget_entry(self, expectation: Expectation) -> None:
        self._writer.forget(expectation)

    async def consume_entry(self, consumed: Consumed) -> None:
        """Consume an inbox entry whose command made no records, in commit order."""
        await self._writer.consume(consumed)

    def tokens_used(self) -> int:
        """Tokens the session's loops spent, children included: the sum of
        their folds, so it counts what the journal holds, restored or not
        (docs/boundaries.md says which of a call's tokens count)."""
        return sum(loop.state.tokens_used for loop in self.loops.values())

    def rate_limited(self) -> dict[str, Waiting]:
        """This session's loops waiting now for a shared rate limit, by loop
        id (``describe`` shows them); read in memory, nothing journaled."""
        found = {loop_id: waiting_of(id(loop)) for loop_id, loop in self.loops.items()}
        return {loop_id: wait for loop_id, wait in found.items() if wait is not None}

    def commit_statistics(self) -> CommitStatistics:
        """How this session's commits met the journal so far: how many waited
        for durability, how many were pipelined, how many appends were made."""
        return self._writer.statistics()

    async def verify(self) -> None:
        """Prove each live loop's state equals the fold of its journal records
        (for a fork, folded onto the state it was cut from)."""
        # Pipelined records are folded before they are durable: compare once
        # everything committed so far is in the journal.
        await self._writer.wait_durable()
        base = SessionFolder()
        async for record in self.journal.read(self.id):
            base.feed(record)
            if record.seq >= 2:
                break
        for loop_id, loop in list(self.loops.items()):
            # A stopped loop's actor is gone; its state is final.  A loop
            # that stops while asked (a failed child winding down) is too.
            try:
                snap = (
                    copy_state(loop.state)
                    if loop.state.stopped
                    else await self.snapshot(loop=loop_id)
                )
            except LoopClosedError:
                snap = copy_state(loop.state)
            start = base.states.get(loop_id) if base.forked is not None else None
            fresh = copy_state(start) if start is not None else LoopState()
            async for record in self.journal.read(self.id):
                if record.seq > snap.last_seq:
                    break
                if record.loop == loop_id:
                    fold(fresh, record)
            if fresh != snap:
                diff = [
                    f for f in LoopState.__struct_fields__ if getattr(fresh, f) != getattr(snap, f)
                ]
                raise VerifyError(
                    f"loop {loop_id} of session {self.id}: live state differs from the fold "
                    f"of its journal in {', '.join(diff)}"
                )

    def subscribe(
        self, after: int | None = 0, *, deltas: bool = False, capacity: int = 10_000
    ) -> AsyncIterator[Record | StreamDelta]:
        """Every durable record after ``after`` (history first, then live), and
        with ``deltas`` the live stream deltas too; ``after=None``: only what
        the session commits from the moment iteration starts.  Ends when the session
        closes; a subscriber too slow to keep ``capacity`` records buffered
        gets ``SessionLagError`` with the seq to resume from."""
        return self._subscriptions.subscribe(after, deltas=deltas, capacity=capacity)


class _Opening:
    """What ``Session.create`` returns: on entry it awaits the session's
    setup, then enters its running context.  A class, not a generator: an
    idle session keeps no suspended frame, async generator or generator
    context manager for ``create``."""

    __slots__ = ("_running", "_setup")

    def __init__(
        self, setup: Callable[[], Awaitable[tuple[Session, AbstractAsyncContextManager[None]]]]
    ) -> None:
        self._setup: Any = setup
        self._running: AbstractAsyncContextManager[None] | None = None

    async def __aenter__(self) -> Session:
        setup, self._setup = self._setup, None
        if setup is None:
            raise RuntimeError("Session.create's context was entered twice; call create again")
        session, running = await setup()
        await running.__aenter__()
        self._running = running
        return session

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        running, self._running = self._running, None
        assert running is not None
        return await running.__aexit__(*exc_info)


class _Running:
    """A session's running context: on entry its writer opens under the lease
    and its loops start in a nursery of its own; on exit the session shuts
    down (shielded) and the nursery closes.  A class, not an async generator:
    an idle session keeps no suspended frame, generator, generator context
    manager or trio's weak reference to the generator.

    The caller's own error leaves as itself, after the session closed; a
    journal failure that stopped the session's tasks leaves as the journal's
    own error, not a tree of task groups (``_journal_failure``)."""

    __slots__ = ("_lease", "_manager", "_restoring", "_session", "_states")

    def __init__(
        self, session: Session, lease: Any, states: dict[str, LoopState], restoring: bool
    ) -> None:
        self._session = session
        self._lease = lease
        self._states: dict[str, LoopState] | None = states
        self._restoring = restoring
        self._manager: AbstractAsyncContextManager[trio.Nursery] | None = None

    async def __aenter__(self) -> None:
        session, states = self._session, self._states
        assert states is not None, "a session's running context is entered once"
        # Kept no longer than needed: this object lives as long as the session
        # (the states are the loops' own once they start).
        lease, self._states, self._lease = self._lease, None, None
        session._writer.open(lease)
        self._manager = manager = trio.open_nursery()
        session._nursery = nursery = await manager.__aenter__()
        session._writer.start(nursery)
        try:
            await session._start(nursery, states, self._restoring)
        except BaseException as exc:
            # It leaves through the nursery, which stops the session's tasks.
            await self._leave(exc)
            raise

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        session = self._session
        # The caller's own error is raised as itself once the session has
        # closed; anything else (a cancellation) leaves through the nursery.
        through = exc if exc is not None and not isinstance(exc, Exception) else None
        try:
            with trio.CancelScope(shield=True):
                await session.shutdown()
            session._nursery.cancel_scope.cancel()
        except BaseException as error:
            through = error
        suppressed = await self._leave(through)
        return suppressed and through is exc and exc is not None

    async def _leave(self, exc: BaseException | None) -> bool:
        """Close the session's nursery with ``exc`` leaving its body; True when
        the nursery took it (a cancellation of its own)."""
        manager, self._manager = self._manager, None
        assert manager is not None
        try:
            if exc is None:
                return bool(await manager.__aexit__(None, None, None))
            return bool(await manager.__aexit__(type(exc), exc, exc.__traceback__))
        except BaseExceptionGroup as group:
            failure = _journal_failure(group) or _refusal(group)
            if failure is None:
                raise
            raise failure from None


E = TypeVar("E", bound=BaseException)


def _journal_failure(group: BaseExceptionGroup[BaseException]) -> JournalError | None:
    """The journal error behind a group made only of it (and cancellations)."""
    return _alone(group, JournalError)


def _refusal(group: BaseExceptionGroup[BaseException]) -> DefinitionError | None:
    """The refused definition behind a group made only of it (and
    cancellations): a loop's start that its configuration refused."""
    return _alone(group, DefinitionError)


def _alone(group: BaseExceptionGroup[BaseException], kind: type[E]) -> E | None:
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    found = [e for e in leaves if isinstance(e, kind)]
    if found and all(isinstance(e, kind | trio.Cancelled) for e in leaves):
        return found[0]
    return None


async def _refuse_other_definition(journal: Journal, session_id: str, name: str) -> None:
    """A session with no records yet may have been asked for through the
    inbox (a client's ``create``) with another definition: creating it here
    with this one would run what nobody asked for."""
    info = next((i for i in await journal.sessions() if i.session == session_id), None)
    recorded = info.definition if info is not None else None
    if recorded is not None and recorded != name:
        raise SessionExistsError(
            f"session {session_id} already exists with definition {recorded!r}, not "
            f"{name!r}: a host running {recorded!r} starts it; choose another session id",
            session=session_id,
            definition=recorded,
            requested=name,
        )
