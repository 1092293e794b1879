"""Session: one journal lease, one writer, a nursery of loops, fan-out.

The writer is the single place a session's records are appended.  Commits
that arrive at the same moment (from any loop of the session) go into one
atomic append; the records are then folded into their loops in seq order,
published to subscribers, and only then are the committers released.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import msgspec
import structlog
import trio

from journal import Draft, Journal, JournalError, Record, SessionNotFoundError
from journal.content import Block, Message, ResultBlock, Text
from journal.events import Event, Provenance
from loopruntime import (
    GateMismatchError,
    InvalidAnswerError,
    Loop,
    LoopClosedError,
    LoopDefinition,
    LoopError,
    LoopState,
    ModeNotFoundError,
    NotUnknownEffectError,
    fold,
)
from loopruntime.host import (
    AnswerGate,
    CancelQueuedInput,
    ChangeMode,
    Compact,
    DecideGate,
    Delta,
    GuardFailedError,
    Interrupt,
    Reply,
    ResolveToolCall,
    Shutdown,
    Snapshot,
    Steer,
    SubagentResult,
    UserInput,
    child_outcome,
    copy_state,
    find_definition,
    new_id,
)

from .checkpoints import DEFAULT_EVERY, Checkpointer, read_restored
from .collaboration import Collaboration
from .errors import (
    InvalidContentError,
    SeqOutOfRangeError,
    SessionExistsError,
    SessionLagError,
    UnknownSessionError,
    VerifyError,
)

__all__ = ["ROOT_LOOP", "Session", "StreamDelta"]

log = structlog.get_logger(__name__)

ROOT_LOOP = "main"
"""Loop id of a session's first loop."""


class StreamDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A live stream delta (ephemeral: not durable, may be dropped)."""

    loop: str
    effect_id: str
    delta: Any


_message_decoder = msgspec.msgpack.Decoder(Message)
_result_decoder = msgspec.msgpack.Decoder(tuple[ResultBlock, ...])
_text_decoder = msgspec.msgpack.Decoder(str)


def _recordable(value: object, decoder: msgspec.msgpack.Decoder[Any], what: str) -> None:
    """Refuse what the journal could not read back.

    msgspec encodes whatever it is given, but decodes only what the schema
    allows: a plain string among a message's blocks would be appended, and
    the session's journal would be unreadable from that record on.  Text that
    is not Unicode fails the append itself, which ends the whole session."""
    try:
        decoder.decode(msgspec.msgpack.encode(value))
    except (msgspec.MsgspecError, TypeError, ValueError) as exc:
        raise InvalidContentError(
            f"{what} cannot be recorded ({exc}); nothing was committed"
        ) from exc


class Stream(Protocol):
    """What records are committed for: a loop, or a collaboration's stream."""

    id: str

    def apply(self, record: Record) -> None: ...


class _Pending:
    __slots__ = ("drafts", "guard", "loop", "reply")

    def __init__(self, loop: Stream, drafts: list[Draft], guard: Callable[[], bool] | None) -> None:
        self.loop = loop
        self.drafts = drafts
        self.guard = guard
        self.reply: Reply[list[Record]] = Reply()


class _Subscriber:
    __slots__ = ("buffer", "capacity", "deltas", "dropped", "lagged", "lot")

    def __init__(self, capacity: int, deltas: bool) -> None:
        self.buffer: deque[Record | StreamDelta] = deque()
        self.capacity = capacity
        self.deltas = deltas
        self.lagged = False
        self.dropped = 0
        self.lot = trio.lowlevel.ParkingLot()

    def push(self, item: Record | StreamDelta) -> None:
        if len(self.buffer) >= self.capacity:
            if isinstance(item, StreamDelta):
                self.dropped += 1  # ephemeral: dropping is allowed
                return
            # A durable record never silently goes missing: the subscription
            # ends with an error saying where to resume from.
            self.lagged = True
            self.lot.unpark_all()
            return
        self.buffer.append(item)
        self.lot.unpark_all()


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
        self._queue: list[_Pending] = []
        self._wake = trio.Event()
        self._writing = False
        self._head = 0
        self._checkpoints = Checkpointer(checkpoint_every)
        self._failed: BaseException | None = None
        self._subscribers: set[_Subscriber] = set()
        self._closed = False
        self._closed_event = trio.Event()
        self._watching: set[str] = set()
        self._also: list[LoopDefinition] = []
        self.collab_streams: set[str] = set()
        """Stream ids of the collaborations started by this session object."""
        self._delivered = trio.lowlevel.ParkingLot()
        self.log = log.bind(session=session_id)

    # -- lifecycle ---------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def create(
        cls,
        journal: Journal,
        definition: LoopDefinition,
        *,
        session_id: str | None = None,
        checkpoint_every: int | None = DEFAULT_EVERY,
    ) -> AsyncIterator[Session]:
        """A new session with one loop running ``definition``.  On exit the
        session shuts down (a running turn is interrupted and settled).

        Every ``checkpoint_every`` records the writer adds a checkpoint, so a
        restore folds only what follows the last one (None: never)."""
        session_id = session_id or new_id("ses_")
        session = cls(journal, session_id, definition, checkpoint_every=checkpoint_every)
        try:
            existing = await journal.head(session_id)
        except SessionNotFoundError:
            existing = 0
        if existing:
            # Refused before taking a lease, so a live writer is not fenced.
            raise SessionExistsError(
                f"session {session_id} already has {existing} records; use "
                "Session.restore to continue it"
            )
        lease = await journal.open_session(session_id, create=True)
        if lease.head:
            raise SessionExistsError(
                f"session {session_id} already has {lease.head} records; use "
                "Session.restore to continue it"
            )
        async with session._running(lease, {ROOT_LOOP: LoopState()}):
            yield session

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
    ) -> AsyncIterator[Session]:
        """Continue a session from its journal: fold every loop (from the last
        checkpoint on, unless ``use_checkpoints`` is False), settle what a
        crash left open, and start the loops.  ``also`` names definitions of
        loops that are not delegates of ``definition`` (the workers of a
        collaboration, or the collaboration itself)."""
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
        session._check_fits(restored.states)
        try:
            lease = await journal.open_session(session_id, create=False)
        except SessionNotFoundError as exc:
            raise session._unknown() from exc
        if lease.head != restored.head:
            # A writer appended between the read and the lease.  The lease has
            # fenced it, so the journal is final now: read it again.  Only this
            # race pays for a second read.
            restored = await read_restored(journal, session_id, use_checkpoints=use_checkpoints)
            session._check_fits(restored.states)
        session._checkpoints.resume(restored)
        async with session._running(lease, restored.states, restoring=True):
            yield session

    def _unknown(self) -> UnknownSessionError:
        return UnknownSessionError(
            f"there is no session {self.id} in journal {self.journal.url}; "
            "`loopruntime sessions` lists the ones there are"
        )

    def _check_fits(self, states: dict[str, LoopState]) -> None:
        """Refuse restored states this session's definitions cannot run."""
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

    @asynccontextmanager
    async def _running(
        self, lease: Any, states: dict[str, LoopState], *, restoring: bool = False
    ) -> AsyncIterator[None]:
        self._lease = lease
        self._head = lease.head
        raised: Exception | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write)
                if restoring:
                    from .restore import settle_restored

                    # Every loop exists before the first settling commit: a
                    # checkpoint that commit carries pictures every loop there is.
                    restored = [
                        self._make_loop(loop_id, state) for loop_id, state in states.items()
                    ]
                    for loop in restored:
                        await self.commit(loop, settle_restored(loop.state, loop.definition))
                for loop_id, state in states.items():
                    loop = self.loops.get(loop_id) or self._make_loop(loop_id, state)
                    if state.stopped:
                        continue
                    await nursery.start(loop.run)
                for loop in list(self.loops.values()):
                    for child in loop.state.children.values():
                        # A background child whose result the parent never got.
                        if child.background and child.status == "running":
                            if child.child_loop in self.loops:
                                self.watch_background(loop, child.child_loop)
                try:
                    yield
                except Exception as exc:
                    # The caller's own error: raised as itself after the session
                    # closes, not wrapped in the nursery's exception group.
                    raised = exc
                finally:
                    with trio.CancelScope(shield=True):
                        await self.shutdown()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # A journal failure stops every task of the session; the caller
            # gets the journal's own error, not a tree of task groups.
            failure = _journal_failure(group)
            if failure is None:
                raise
            raise failure from None
        if raised is not None:
            raise raised

    def _make_loop(self, loop_id: str, state: LoopState) -> Loop:
        loop = Loop(
            loop_id=loop_id, definition=self._definition_of(loop_id, state), host=self, state=state
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
        self, parent: Loop, child_id: str, definition: LoopDefinition, provenance: Provenance
    ) -> Loop:
        return await self.start_worker(child_id, definition, provenance)

    def child(self, child_id: str) -> Loop | None:
        return self.loops.get(child_id)

    async def start_worker(
        self, loop_id: str, definition: LoopDefinition, provenance: Provenance
    ) -> Loop:
        """Start a loop that is not a delegate of another (collaboration workers)."""
        loop = Loop(loop_id=loop_id, definition=definition, host=self, parent=provenance)
        self.loops[loop_id] = loop
        await self._nursery.start(loop.run)
        return loop

    async def collaborate(
        self, collaboration: Collaboration, input: str, *, collab_id: str | None = None
    ) -> str:
        """Run a coordinator/worker collaboration; returns its output, or raises
        ``CollaborationError`` with the failure code."""
        from .collaboration import collaborate

        self._loop(None)  # refuse when closed
        self._also.extend(collaboration.definitions())
        return await collaborate(self, collaboration, input, collab_id=collab_id)

    async def resume_collaboration(self, collaboration: Collaboration, collab_id: str) -> str:
        """Continue a collaboration recorded in this session's journal."""
        from .collaboration import resume

        self._loop(None)
        return await resume(self, collaboration, collab_id)

    def watch_background(self, parent: Loop, child_id: str) -> None:
        if child_id in self._watching:
            return
        self._watching.add(child_id)
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
                )
            )
        except LoopClosedError:
            return  # the parent stopped; a restore delivers it (exactly once)
        finally:
            self._watching.discard(child_id)
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
        self._closed_event.set()
        for sub in self._subscribers:
            sub.lot.unpark_all()

    # -- the writer (LoopHost) --------------------------------------------------------

    async def commit(
        self,
        loop: Stream,
        events: Sequence[Event],
        *,
        cause: str | None = None,
        guard: Callable[[], bool] | None = None,
    ) -> list[Record]:
        if not events:
            return []
        if self._failed is not None:
            raise self._failed
        pending = _Pending(
            loop,
            [Draft(id=new_id("ev_"), loop=loop.id, event=e, cause=cause) for e in events],
            guard,
        )
        if not self._writing and not self._queue and guard is None:
            # Nothing in flight: append from this task, sparing the hop to the
            # writer.  Commits arriving meanwhile queue up and go together next.
            self._writing = True
            try:
                await self._append([pending])
            except trio.Cancelled:
                raise  # nothing was appended (the journal's contract): nothing to undo
            except BaseException as exc:
                self._fail(exc, [pending])
                raise
            finally:
                self._writing = False
                if self._queue:
                    self._wake.set()
            return pending.reply.result()
        self._queue.append(pending)
        self._wake.set()
        # Shielded: once asked for, a commit runs to its end, so the caller
        # always learns exactly what became durable (and state is folded).
        with trio.CancelScope(shield=True):
            records = await pending.reply.wait()
        return records

    def _fail(self, exc: BaseException, batch: list[_Pending]) -> None:
        """A journal failure stops the session: nobody may go on believing
        something is durable that is not, and nobody waits forever on a
        commit that will never happen."""
        self._failed = exc
        for p in [*batch, *self._queue]:
            p.reply.fail(exc)
        self._queue = []
        self.log.error("journal_append_failed", error=repr(exc))

    async def _write(self) -> None:
        while True:
            if not self._queue or self._writing:
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            batch, self._queue = self._queue, []
            self._writing = True
            try:
                group: list[_Pending] = []
                for pending in batch:
                    if pending.guard is not None:
                        # A guard sees everything committed before it folded.
                        await self._append(group)
                        group = []
                        if not pending.guard():
                            pending.reply.fail(
                                GuardFailedError("the guarded commit's precondition failed")
                            )
                            continue
                    group.append(pending)
                await self._append(group)
            except BaseException as exc:
                self._fail(exc, batch)
                raise
            finally:
                self._writing = False

    async def _append(self, group: list[_Pending]) -> None:
        """Append a group in one atomic append, fold, publish, release."""
        if not group:
            return
        drafts = [d for p in group for d in p.drafts]
        # Every loop has folded up to the head: a checkpoint taken now, put
        # first, is exactly the fold of the records before it.
        checkpoint = self._checkpoints.draft(self._head, self.loops)
        if checkpoint is not None:
            drafts.insert(0, checkpoint)
        # No shield needed: the journal's append is atomic under cancellation
        # (a Cancelled append wrote nothing; one under way finishes), and all
        # that follows is synchronous.
        records = await self.journal.append(self._lease, drafts, expected_seq=self._head)
        self._head = records[-1].seq
        at = 0
        if checkpoint is not None:
            self._checkpoints.written(records[0])
            for sub in self._subscribers:
                sub.push(records[0])
            at = 1
        for p in group:
            mine = records[at : at + len(p.drafts)]
            at += len(p.drafts)
            for record in mine:
                p.loop.apply(record)
                for sub in self._subscribers:
                    sub.push(record)
            p.reply.set(mine)

    def publish_delta(self, loop: str, effect_id: str, delta: Delta) -> None:
        if not self._subscribers:
            return
        item = StreamDelta(loop=loop, effect_id=effect_id, delta=delta)
        for sub in self._subscribers:
            if sub.deltas:
                sub.push(item)

    # -- commands -----------------------------------------------------------------

    def _loop(self, loop: str | None) -> Loop:
        if self._closed:
            raise LoopClosedError(f"session {self.id} is shut down; it takes no more commands")
        found = self.loops.get(loop or ROOT_LOOP)
        if found is None:
            raise LoopError(f"session {self.id} has no loop {loop!r}")
        return found

    async def submit(
        self, content: str | Message | Sequence[Block], *, loop: str | None = None
    ) -> str:
        """Queue input; returns its id once it is durable."""
        if isinstance(content, str):
            message = Message(role="user", blocks=(Text(text=content),))
        elif isinstance(content, Message):
            message = content
        else:
            try:
                message = Message(role="user", blocks=tuple(content))
            except TypeError as exc:
                raise InvalidContentError(
                    f"input must be text, a Message or a sequence of content blocks, not "
                    f"{type(content).__name__}; nothing was committed"
                ) from exc
        _recordable(message, _message_decoder, "the input")
        input_id = new_id("in_")
        await self._loop(loop).send(UserInput(input_id=input_id, messages=(message,)))
        return input_id

    async def steer(self, text: str, *, loop: str | None = None) -> str:
        if not isinstance(text, str):
            raise InvalidContentError(
                f"steering must be text, not {type(text).__name__}; nothing was committed"
            )
        _recordable(text, _text_decoder, "the steering")
        steer_id = new_id("st_")
        await self._loop(loop).send(Steer(steer_id=steer_id, text=text))
        return steer_id

    async def cancel_queued(self, input_id: str, *, loop: str | None = None) -> None:
        await self._loop(loop).send(CancelQueuedInput(input_id=input_id))

    async def interrupt(self, *, loop: str | None = None) -> bool:
        """Stop the running turn; True when one was stopped."""
        return bool(await self._loop(loop).send(Interrupt()))

    def _gate_loop(self, gate_id: str) -> Loop:
        for loop in self.loops.values():
            if gate_id in loop.state.gates:
                return loop
        self._loop(None)  # raises when closed
        raise GateMismatchError(f"gate {gate_id} is not open in session {self.id}")

    async def answer(self, gate_id: str, text: str) -> None:
        if not isinstance(text, str):
            raise InvalidAnswerError(
                f"the answer to gate {gate_id} must be text, not {type(text).__name__}; "
                "the gate stays open"
            )
        await self._gate_loop(gate_id).send(AnswerGate(gate_id=gate_id, answer=text))

    async def decide(self, gate_id: str, allow: bool, scope: str = "once") -> None:
        # Checked before the gate is looked up: a malformed decision is refused
        # whatever the gate, and the gate stays open.  bool("no") is True, so
        # anything but a real bool would allow what the caller meant to deny.
        if not isinstance(allow, bool):
            raise InvalidAnswerError(
                f"the decision on gate {gate_id} must be allow=True or allow=False, not "
                f"{allow!r}; the gate stays open"
            )
        if scope not in ("once", "session"):
            raise InvalidAnswerError(
                f"the scope of a decision on gate {gate_id} must be 'once' or 'session', "
                f"not {scope!r}; the gate stays open"
            )
        await self._gate_loop(gate_id).send(
            DecideGate(gate_id=gate_id, allow=allow, scope=scope)  # type: ignore[arg-type]
        )

    async def resolve(
        self, execution_id: str, result: str | Sequence[ResultBlock], is_error: bool = False
    ) -> None:
        """Settle a tool call whose outcome is unknown (after a crash)."""
        if isinstance(result, str):
            content: tuple[ResultBlock, ...] = (Text(text=result),)
        else:
            try:
                content = tuple(result)
            except TypeError as exc:
                raise InvalidContentError(
                    f"the result of execution {execution_id} must be text or a sequence of "
                    f"Text and Image blocks, not {type(result).__name__}; nothing was committed"
                ) from exc
        _recordable(content, _result_decoder, f"the result of execution {execution_id}")
        if not isinstance(is_error, bool):
            raise InvalidContentError(
                f"is_error must be a bool, not {is_error!r}; nothing was committed"
            )
        for loop in self.loops.values():
            if execution_id in loop.state.unknown:
                await loop.send(
                    ResolveToolCall(execution_id=execution_id, content=content, is_error=is_error)
                )
                return
        self._loop(None)
        raise NotUnknownEffectError(
            f"execution {execution_id} has no unknown outcome in session {self.id}"
        )

    async def compact(self, *, loop: str | None = None) -> str:
        """Ask for a compaction; its outcome is a compaction.committed or
        compaction.rejected record.  Returns the attempt id."""
        attempt_id = new_id("cmp_")
        await self._loop(loop).send(Compact(attempt_id=attempt_id))
        return attempt_id

    async def change_mode(self, mode: str | None, *, loop: str | None = None) -> None:
        await self._loop(loop).send(ChangeMode(mode=mode))

    async def snapshot(self, *, loop: str | None = None) -> LoopState:
        """A consistent copy of a loop's state."""
        state: LoopState = await self._loop(loop).send(Snapshot())
        return state

    async def wait_idle(self) -> None:
        """Wait until no loop has work it can do without a person (idle, or
        waiting at a gate or on an unknown effect)."""
        while True:
            for loop in list(self.loops.values()):
                await loop.wait_quiescent()
            await trio.lowlevel.checkpoint()
            if self._closed:
                return
            due = any(self.loops[c].settled for c in self._watching)
            if not due and all(loop.quiescent for loop in self.loops.values()):
                return
            if due:
                # A settled background child is about to report to its parent.
                await self._delivered.park()

    async def verify(self) -> None:
        """Prove each live loop's state equals the fold of its journal records."""
        for loop_id, loop in list(self.loops.items()):
            # A stopped loop's actor is gone; its state is final.
            snap = (
                copy_state(loop.state) if loop.state.stopped else await self.snapshot(loop=loop_id)
            )
            fresh = LoopState()
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

    async def subscribe(
        self, after: int = 0, *, deltas: bool = False, capacity: int = 10_000
    ) -> AsyncIterator[Record | StreamDelta]:
        """Every durable record after ``after`` (history first, then live), and
        with ``deltas`` the live stream deltas too.  Ends when the session
        closes; a subscriber too slow to keep ``capacity`` records buffered
        gets ``SessionLagError`` with the seq to resume from."""
        if not 0 <= after <= self._head:
            raise SeqOutOfRangeError(self.id, after, self._head)
        sub = _Subscriber(capacity, deltas)
        self._subscribers.add(sub)
        last = after
        try:
            async for record in self.journal.read(self.id, after=after):
                yield record
                last = record.seq
            while True:
                while sub.buffer:
                    item = sub.buffer.popleft()
                    if isinstance(item, Record):
                        if item.seq <= last:
                            continue
                        last = item.seq
                    yield item
                if sub.lagged:
                    raise SessionLagError(self.id, last)
                if self._closed:
                    return
                await sub.lot.park()
        finally:
            self._subscribers.discard(sub)


def _journal_failure(group: BaseExceptionGroup[BaseException]) -> JournalError | None:
    """The journal error behind a group made only of it (and cancellations)."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    found = [e for e in leaves if isinstance(e, JournalError)]
    if found and all(isinstance(e, JournalError | trio.Cancelled) for e in leaves):
        return found[0]
    return None
