"""The collaboration driver: runs coordinator turns, starts and controls
worker tasks, and records every step on the collaboration's stream.

It works through a ``CollaborationHost`` (the commit path, the loops,
starting workers), never through the session itself.  Each step is
committed before it is acted on, so a resumed driver carries out exactly
what the last decision asked and the journal does not yet show.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, Protocol, assert_never

import msgspec
import trio

from journal import Journal, Record
from journal.content import Message, Text
from journal.events import (
    CollabControlled,
    CollabEnded,
    CollabStarted,
    CollabTaskFinished,
    CollabTaskStarted,
    CollabTurn,
    Control,
    Decision,
    Event,
    Provenance,
    TaskSpec,
)
from loopruntime import Loop, LoopClosedError, LoopDefinition, LoopError
from loopruntime.host import Interrupt, Steer, UserInput, child_outcome, new_id

from ..subscriptions import StreamDelta
from ..validation import user_message
from ..writer import Stream
from .definition import Collaboration, CollaborationError
from .fold import CollabState, Turn, WorkerInfo, fold_collaboration
from .grammar import Complete, Decide, Done, Fail, Wait, check_decision, next_step
from .status import CollabStatus, describe, unresolved_effects

__all__ = [
    "CollaborationHost",
    "Driver",
    "collaborate",
    "parse_decision",
    "read_collaboration",
    "resume",
    "status",
]


_decision_decoder = msgspec.json.Decoder(Decision)


def parse_decision(text: str) -> Decision:
    """A decision from a model's reply: the outermost JSON object in it.

    A reply that holds no JSON object, or one that does not parse, is not a
    decision frame at all (``collaboration.protocol.invalid``); an object that
    is not a ``Decision`` is an invalid decision (``collaboration.decision.invalid``)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise CollaborationError(
            "the coordinator's reply holds no JSON decision object",
            code="collaboration.protocol.invalid",
        )
    try:
        return _decision_decoder.decode(text[start : end + 1])
    except msgspec.ValidationError as exc:
        raise CollaborationError(
            f"the coordinator's decision is not valid: {exc}",
            code="collaboration.decision.invalid",
        ) from exc
    except msgspec.DecodeError as exc:
        raise CollaborationError(
            f"the coordinator's reply is not a JSON object: {exc}",
            code="collaboration.protocol.invalid",
        ) from exc


class CollaborationHost(Protocol):
    """What a collaboration needs of the session it runs on: the commit path,
    its loops, and starting worker loops (``Session`` is one)."""

    @property
    def id(self) -> str: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def loops(self) -> Mapping[str, Loop]: ...

    @property
    def collab_streams(self) -> dict[str, None]:
        """Stream ids of the collaborations started on this host (a dict as
        an ordered set)."""
        ...

    async def commit(self, loop: Stream, events: Sequence[Event]) -> list[Record]: ...

    def child(self, child_id: str) -> Loop | None: ...

    def subscribe(self, after: int | None = 0) -> AsyncIterator[Record | StreamDelta]: ...

    async def start_worker(
        self, loop_id: str, definition: LoopDefinition, provenance: Provenance
    ) -> Loop: ...


class _Stream:
    """The collaboration's own journal stream (commit target of the session)."""

    def __init__(self, collab_id: str) -> None:
        self.id = f"collab:{collab_id}"
        self.state = CollabState()

    def apply(self, record: Record) -> None:
        fold_collaboration(self.state, record)


class Driver:
    def __init__(self, session: CollaborationHost, collab: Collaboration, stream: _Stream) -> None:
        self.session = session
        self.collab = collab
        self.stream = stream
        self.workers = {w.name: w for w in collab.workers}
        self.changed = trio.Event()
        self.cancelling: set[str] = set()
        self.refused_at: str | None = None
        """Where a refused typed ``state`` or ``output`` broke its schema."""

    @property
    def state(self) -> CollabState:
        return self.stream.state

    async def commit(self, *events: Event) -> None:
        await self.session.commit(self.stream, list(events))
        self.changed.set()
        self.changed = trio.Event()

    async def run(self, nursery: trio.Nursery) -> str:
        self.nursery = nursery
        state = self.state
        for task in state.running:
            if self.session.child(task.child_loop) is None:
                await self._run_task(task.key)  # a crash cut its start short
            else:
                self._watch(task.key)
        await self._apply_unfinished_decision()
        while True:
            step = next_step(state)
            match step:
                case Done():
                    break
                case Complete(output=output):
                    await self._complete(output)
                    break
                case Fail(code=code, detail=detail):
                    await self._fail(code, detail)
                    break
                case Wait():
                    await self.changed.wait()
                case Decide():
                    if not await self._take_turn():
                        break
                case _:
                    assert_never(step)
        if state.status != "completed":
            raise CollaborationError(
                f"collaboration {state.collab_id} failed ({state.code})"
                + (f": {state.detail}" if state.detail else ""),
                code=state.code or "",
                path=self.refused_at,
            )
        return state.output

    async def _take_turn(self) -> bool:
        """One coordinator turn: decide, check, record, act.  False when the
        decision was refused (the collaboration then failed)."""
        state = self.state
        try:
            turn = self._turn()
            decision = await self._decide(turn)
            seen = sum(1 for t in turn.tasks if t.status != "running")
            check_decision(
                state,
                decision,
                seen=seen,
                defined=self.workers,
                state_type=self.collab.state_type,
                output_type=self.collab.output_type,
            )
        except CollaborationError as exc:
            self.refused_at = exc.path
            await self._fail(exc.code, str(exc))
            return False
        await self.commit(
            CollabTurn(
                collab_id=state.collab_id,
                number=state.turns + 1,
                decision=decision,
                seen_finished=seen,
            )
        )
        await self._apply_unfinished_decision()
        return True

    # -- one turn --------------------------------------------------------------------

    def _turn(self) -> Turn:
        state = self.state
        return Turn(
            number=state.turns + 1,
            input=state.input,
            state=state.notes,
            workers=tuple(
                WorkerInfo(name=w.name, description=w.description) for w in self.collab.workers
            ),
            tasks=tuple(msgspec.structs.replace(t) for t in state.tasks.values()),
            controls=tuple(state.receipts),
        )

    async def _decide(self, turn: Turn) -> Decision:
        coordinator = self.collab.coordinator
        if not isinstance(coordinator, LoopDefinition):
            answer = coordinator(turn)
            if inspect.isawaitable(answer):
                answer = await answer
            if not isinstance(answer, Decision):
                raise CollaborationError(
                    f"the coordinator returned {type(answer).__name__}, not a Decision",
                    code="collaboration.protocol.invalid",
                )
            return answer
        loop = await self._coordinator_loop(coordinator)
        ask = _COORDINATOR_ASK + msgspec.json.encode(turn).decode()
        await loop.send(
            UserInput(
                input_id=new_id("in_"),
                messages=(Message(role="user", blocks=(Text(text=ask),)),),
            )
        )
        await self._wait_resolved(loop)
        status, text = child_outcome(loop)
        if status != "completed":
            # The coordinator's own code (a provider's error, a limit) says more
            # than a generic one.
            raise CollaborationError(
                f"the coordinator's turn {status}" + (f": {text}" if text else ""),
                code=loop.state.last_failure_code or "collaboration.coordinator.failed",
            )
        return parse_decision(text)

    async def _wait_resolved(self, loop: Loop) -> None:
        """Wait until the coordinator has settled with nothing unresolved in
        its subtree: only then does its answer authorize a decision (a child
        still running may yet change it, through the turn its result starts)."""
        await loop.wait_settled()
        while unresolved_effects(loop.state):
            # Any record of the coordinator after the state just read may
            # resolve something: read from there, so none is missed.
            records, moved = self.session.subscribe(after=loop.state.last_seq), False
            try:
                async for item in records:
                    if isinstance(item, Record) and item.loop == loop.id:
                        moved = True
                        break
            finally:
                await _close(records)
            if not moved:
                # The session closed: what the coordinator said before is
                # still unauthorized.
                raise CollaborationError(
                    f"session {self.session.id} closed while the coordinator waited on "
                    f"{', '.join(unresolved_effects(loop.state))}",
                    code="collaboration.coordinator.unresolved",
                )
            await loop.wait_settled()

    async def _coordinator_loop(self, definition: LoopDefinition) -> Loop:
        loop_id = f"{self.stream.id}/coordinator"
        existing = self.session.child(loop_id)
        if existing is not None:
            return existing
        return await self.session.start_worker(
            loop_id,
            definition,
            Provenance(parent_loop=self.stream.id, turn=0, step=0, execution_id="coordinator"),
        )

    async def _apply_unfinished_decision(self) -> None:
        """Carry out what the last decision asked that is not yet recorded
        (all of it, or what a crash cut short)."""
        d = self.state.last
        if d is None:
            return
        applied = {(r.key, r.kind) for r in self.state.receipts}
        for ctl in d.controls:
            if (ctl.key, ctl.kind) not in applied:
                await self._control(ctl)
        for spec in d.tasks:
            if spec.key not in self.state.tasks:
                await self._start(spec)

    async def _control(self, ctl: Control) -> None:
        task = self.state.tasks[ctl.key]
        loop = self.session.child(task.child_loop)
        if task.status != "running" or loop is None:
            await self.commit(
                CollabControlled(
                    collab_id=self.state.collab_id,
                    key=ctl.key,
                    kind=ctl.kind,
                    text=ctl.text,
                    receipt="already_finished",
                    turn=self.state.turns,
                )
            )
            return
        if ctl.kind == "steer":
            await _quietly(loop.send(Steer(steer_id=new_id("st_"), text=ctl.text)))
            await self.commit(
                CollabControlled(
                    collab_id=self.state.collab_id,
                    key=ctl.key,
                    kind="steer",
                    text=ctl.text,
                    turn=self.state.turns,
                )
            )
            return
        # The watcher must not report this task: its end is the cancellation.
        self.cancelling.add(ctl.key)
        await _quietly(loop.send(Interrupt()))
        _, output = child_outcome(loop)
        await self.commit(
            CollabControlled(
                collab_id=self.state.collab_id, key=ctl.key, kind="cancel", turn=self.state.turns
            ),
            CollabTaskFinished(
                collab_id=self.state.collab_id, key=ctl.key, status="cancelled", output=output
            ),
        )
        await loop.finish()

    async def _start(self, spec: TaskSpec) -> None:
        await self.commit(
            CollabTaskStarted(
                collab_id=self.state.collab_id,
                key=spec.key,
                worker=spec.worker,
                child_loop=f"{self.stream.id}/{spec.key}",
                input=spec.input,
                turn=self.state.turns,
            )
        )
        await self._run_task(spec.key)

    async def _run_task(self, key: str) -> None:
        """Start the worker of a task recorded started (after a restore too,
        when a crash came between the record and the worker's first records);
        a start that fails is recorded as the task's end, ``start_failed``."""
        task = self.state.tasks[key]
        definition = self.workers[task.worker].definition
        try:
            message = user_message(task.input, definition.limits)
            loop = await self.session.start_worker(
                task.child_loop,
                definition,
                Provenance(
                    parent_loop=self.stream.id,
                    turn=task.started_turn,
                    step=0,
                    execution_id=key,
                ),
            )
            await loop.send(UserInput(input_id=new_id("in_"), messages=(message,)))
        except LoopError as exc:
            await self.commit(
                CollabTaskFinished(
                    collab_id=self.state.collab_id,
                    key=key,
                    status="start_failed",
                    output=str(exc),
                    code=exc.code,
                )
            )
            return
        self._watch(key)

    def _watch(self, key: str) -> None:
        self.nursery.start_soon(self._finish_when_settled, key)

    async def _finish_when_settled(self, key: str) -> None:
        task = self.state.tasks[key]
        loop = self.session.child(task.child_loop)
        if loop is None:
            return
        await loop.wait_settled()
        if key in self.cancelling or self.state.tasks[key].status != "running":
            return  # cancelled meanwhile
        status, output = child_outcome(loop)
        await self.commit(
            CollabTaskFinished(
                collab_id=self.state.collab_id,
                key=key,
                status=status,
                output=output,
            )
        )
        await loop.finish()

    async def _complete(self, output: str) -> None:
        for task in self.state.running:
            await self._control(Control(key=task.key, kind="cancel"))
        await self.commit(
            CollabEnded(collab_id=self.state.collab_id, status="completed", output=output)
        )

    async def _fail(self, code: str, detail: str) -> None:
        for task in self.state.running:
            await self._control(Control(key=task.key, kind="cancel"))
        await self.commit(
            CollabEnded(collab_id=self.state.collab_id, status="failed", code=code, detail=detail)
        )


async def _close(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def _quietly(call: Awaitable[Any]) -> None:
    try:
        await call
    except LoopClosedError:
        pass  # the task's loop already stopped: the receipt says so


_COORDINATOR_ASK = (
    "You coordinate workers. Reply with ONLY a JSON object "
    '{"mode": "continue"|"wait"|"complete", "state": "<your notes>", '
    '"tasks": [{"key": "<unique>", "worker": "<worker name>", "input": "<task>"}], '
    '"controls": [{"key": "<task key>", "kind": "steer"|"cancel", "text": "..."}], '
    '"output": "<final answer when complete>"}.\n'
    "continue: run your next turn at once; wait: start the tasks, then run your next "
    "turn once a task finishes; complete: end with output (required) and no tasks or "
    "controls. Only complete carries output.\nThis turn:\n"
)


async def collaborate(
    session: CollaborationHost, collab: Collaboration, input: str, *, collab_id: str | None = None
) -> str:
    """Run a new collaboration to its end; return its output (or raise
    ``CollaborationError`` with the failure code)."""
    stream = _Stream(collab_id or os.urandom(6).hex())
    await _refuse_taken(session, stream.id)
    driver = Driver(session, collab, stream)
    await driver.commit(
        CollabStarted(
            collab_id=stream.id.removeprefix("collab:"),
            coordinator=collab.coordinator_name,
            workers=tuple(w.name for w in collab.workers),
            input=input,
            max_turns=collab.turn_bound,
            max_tasks=collab.task_bound,
            max_concurrent_tasks=collab.max_concurrent_tasks,
            max_controls_per_turn=collab.max_controls_per_turn,
            state_schema=collab.state_schema,
            output_schema=collab.output_schema,
        )
    )
    return await _drive(driver)


async def _refuse_taken(session: CollaborationHost, stream_id: str) -> None:
    """Refuse a collaboration id this session already used.

    A second collaboration on the same stream would interleave its records
    with the first one's and start workers under the loop ids of the first
    one's workers: the journal would no longer fold or pass the checker."""
    taken = stream_id in session.collab_streams or any(
        loop_id.startswith(stream_id + "/") for loop_id in session.loops
    )
    if not taken:
        # Claimed before the journal is read, so a second call made meanwhile
        # is refused too.
        session.collab_streams[stream_id] = None
        async for record in session.journal.read(session.id):
            if record.loop == stream_id or record.loop.startswith(stream_id + "/"):
                taken = True
                break
    if taken:
        raise CollaborationError(
            f"session {session.id} already has a collaboration "
            f"{stream_id.removeprefix('collab:')}; continue it with "
            "Session.resume_collaboration, or start a new one under another id",
            code="collaboration.exists",
        )


async def _drive(driver: Driver) -> str:
    # The driver's outcome is taken inside the nursery, so a failure reaches
    # the caller as the CollaborationError it is, not wrapped in a group.
    outcome: str | CollaborationError = ""
    async with trio.open_nursery() as nursery:
        try:
            outcome = await driver.run(nursery)
        except CollaborationError as exc:
            outcome = exc
        nursery.cancel_scope.cancel()
    if isinstance(outcome, CollaborationError):
        raise outcome
    return outcome


async def read_collaboration(session: CollaborationHost, collab_id: str) -> CollabState:
    """The collaboration ``collab_id`` folded from the session's journal."""
    state, stream_id = CollabState(), f"collab:{collab_id}"
    async for record in session.journal.read(session.id):
        if record.loop == stream_id:
            fold_collaboration(state, record)
    return state


async def status(session: CollaborationHost, collab_id: str) -> CollabStatus:
    """What collaboration ``collab_id`` is doing (``Session.collaboration_status``)."""
    state = await read_collaboration(session, collab_id)
    if not state.collab_id:
        raise CollaborationError(
            f"session {session.id} has no collaboration {collab_id}",
            code="collaboration.unknown",
        )
    return describe(state, {loop_id: loop.state for loop_id, loop in session.loops.items()})


async def resume(session: CollaborationHost, collab: Collaboration, collab_id: str) -> str:
    """Continue a collaboration from its journal stream (after a restore)."""
    stream = _Stream(collab_id)
    stream.state = await read_collaboration(session, collab_id)
    if stream.state.protocol_error:
        raise CollaborationError(
            f"the stream of collaboration {collab_id} breaks the collaboration protocol "
            f"({stream.state.protocol_error}); it cannot be resumed",
            code="collaboration.protocol.invalid",
        )
    if not stream.state.collab_id:
        raise CollaborationError(
            f"session {session.id} has no collaboration {collab_id}",
            code="collaboration.unknown",
        )
    given = {w.name for w in collab.workers}
    missing = sorted({t.worker for t in stream.state.running} - given)
    if missing:
        raise CollaborationError(
            f"collaboration {collab_id} has running tasks of workers {missing} that the "
            "Collaboration given to resume it does not define",
            code="collaboration.worker.missing",
        )
    _refuse_changed_schemas(stream.state, collab)
    driver = Driver(session, collab, stream)
    return await _drive(driver)


def _refuse_changed_schemas(state: CollabState, collab: Collaboration) -> None:
    """The decisions already recorded were checked against the types the
    collaboration started with; later ones must be checked against the same."""
    for part, recorded, given in (
        ("state_type", state.state_schema, collab.state_schema),
        ("output_type", state.output_schema, collab.output_schema),
    ):
        if recorded != given:
            raise CollaborationError(
                f"collaboration {state.collab_id} started with {part} schema "
                f"{recorded or '(free text)'}, and the Collaboration given to resume it has "
                f"{given or '(free text)'}; resume it with the {part} it started with",
                code="collaboration.schema.changed",
            )
