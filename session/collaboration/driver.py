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
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Protocol

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
from loopruntime import Loop, LoopClosedError, LoopDefinition
from loopruntime.host import Interrupt, Steer, UserInput, child_outcome, new_id

from ..writer import Stream
from .definition import Collaboration, CollaborationError
from .fold import CollabState, Turn, WorkerInfo, fold_collaboration

__all__ = ["CollaborationHost", "Driver", "collaborate", "parse_decision", "resume"]


_decision_decoder = msgspec.json.Decoder(Decision)


def parse_decision(text: str) -> Decision:
    """A decision from a model's reply: the outermost JSON object in it."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise CollaborationError(
            "the coordinator's reply holds no JSON decision object",
            code="collaboration.decision.invalid",
        )
    try:
        return _decision_decoder.decode(text[start : end + 1])
    except msgspec.DecodeError as exc:
        raise CollaborationError(
            f"the coordinator's decision is not valid: {exc}",
            code="collaboration.decision.invalid",
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
            self._watch(task.key)
        await self._apply_unfinished_decision()
        while not state.ended:
            last = state.last
            if last is not None and last.mode == "complete":
                await self._complete(last.output)
                break
            if last is not None and last.mode == "wait" and state.finished_since_turn == 0:
                if not state.running:
                    await self._fail("collaboration.decision.invalid", "wait with no running task")
                    break
                await self.changed.wait()
                continue
            if state.turns >= state.max_turns:
                await self._fail(
                    "collaboration.limit.turns",
                    f"the coordinator used its {state.max_turns} turns without completing",
                )
                break
            try:
                turn = self._turn()
                decision = await self._decide(turn)
                seen = sum(1 for t in turn.tasks if t.status != "running")
                self._validate(decision, seen)
            except CollaborationError as exc:
                await self._fail(exc.code, str(exc))
                break
            await self.commit(
                CollabTurn(
                    collab_id=state.collab_id,
                    number=state.turns + 1,
                    decision=decision,
                    seen_finished=seen,
                )
            )
            await self._apply_unfinished_decision()
        if state.status != "completed":
            raise CollaborationError(
                f"collaboration {state.collab_id} failed: {state.code}", code=state.code or ""
            )
        return state.output

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
                    code="collaboration.decision.invalid",
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
        await loop.wait_settled()
        status, text = child_outcome(loop)
        if status != "completed":
            # The coordinator's own code (a provider's error, a limit) says more
            # than a generic one.
            raise CollaborationError(
                f"the coordinator's turn {status}" + (f": {text}" if text else ""),
                code=loop.state.last_failure_code or "collaboration.coordinator.failed",
            )
        return parse_decision(text)

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

    def _validate(self, d: Decision, seen: int) -> None:
        """Refuse a decision that breaks the grammar or a bound (each with its own
        code); ``seen``: the finished tasks the coordinator was shown."""
        state = self.state
        _check_shape(d)
        invalid = "collaboration.decision.invalid"
        keys = [t.key for t in d.tasks]
        for t in d.tasks:
            if t.worker not in state.workers:
                raise CollaborationError(f"unknown worker {t.worker!r}", code=invalid)
            if t.worker not in self.workers:
                raise CollaborationError(
                    f"worker {t.worker!r} has no definition in this process; pass it in the "
                    "Collaboration given to resume_collaboration",
                    code="collaboration.worker.missing",
                )
            if not t.key or t.key in state.tasks or keys.count(t.key) > 1:
                raise CollaborationError(f"duplicate task key {t.key!r}", code=invalid)
        for ctl in d.controls:
            if ctl.key not in state.tasks:
                raise CollaborationError(f"control names unknown task {ctl.key!r}", code=invalid)
        if len(d.controls) > state.max_controls_per_turn:
            raise CollaborationError(
                f"{len(d.controls)} controls in one turn (at most {state.max_controls_per_turn})",
                code="collaboration.limit.controls",
            )
        if len(state.tasks) + len(d.tasks) > state.max_tasks:
            raise CollaborationError(
                f"more than {state.max_tasks} tasks in all", code="collaboration.limit.tasks"
            )
        cancelled = {ctl.key for ctl in d.controls if ctl.kind == "cancel"}
        running = len([t for t in state.running if t.key not in cancelled])
        if d.mode != "complete" and running + len(d.tasks) > state.max_concurrent_tasks:
            raise CollaborationError(
                f"{running + len(d.tasks)} tasks at once (at most {state.max_concurrent_tasks})",
                code="collaboration.limit.concurrent_tasks",
            )
        if d.mode == "wait" and not running and state.finished <= seen:
            # A task that finished while the coordinator decided is still news.
            raise CollaborationError("wait with no task running or unseen", code=invalid)

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
        child_id = f"{self.stream.id}/{spec.key}"
        await self.commit(
            CollabTaskStarted(
                collab_id=self.state.collab_id,
                key=spec.key,
                worker=spec.worker,
                child_loop=child_id,
                input=spec.input,
                turn=self.state.turns,
            )
        )
        loop = await self.session.start_worker(
            child_id,
            self.workers[spec.worker].definition,
            Provenance(
                parent_loop=self.stream.id,
                turn=self.state.turns,
                step=0,
                execution_id=spec.key,
            ),
        )
        await loop.send(
            UserInput(
                input_id=new_id("in_"),
                messages=(Message(role="user", blocks=(Text(text=spec.input),)),),
            )
        )
        self._watch(spec.key)

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


_SHAPES = {
    ("complete", "tasks"): "collaboration.decision.complete_with_tasks",
    ("continue", "output"): "collaboration.decision.continue_with_output",
    ("wait", "tasks"): "collaboration.decision.wait_with_tasks",
    ("wait", "output"): "collaboration.decision.wait_with_output",
}


def _check_shape(d: Decision) -> None:
    """The decision grammar (docs/collaboration.md): ``complete`` carries no
    tasks, ``continue`` no output, ``wait`` neither."""
    for part, present in (("tasks", bool(d.tasks)), ("output", bool(d.output))):
        code = _SHAPES.get((d.mode, part))
        if code is not None and present:
            raise CollaborationError(f"a {d.mode!r} decision carries no {part}", code=code)


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
    '"output": "<final answer when complete>"}.\nThis turn:\n'
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
            max_turns=collab.max_turns,
            max_tasks=collab.max_tasks,
            max_concurrent_tasks=collab.max_concurrent_tasks,
            max_controls_per_turn=collab.max_controls_per_turn,
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


async def resume(session: CollaborationHost, collab: Collaboration, collab_id: str) -> str:
    """Continue a collaboration from its journal stream (after a restore)."""
    stream = _Stream(collab_id)
    async for record in session.journal.read(session.id):
        if record.loop == stream.id:
            stream.apply(record)
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
    driver = Driver(session, collab, stream)
    return await _drive(driver)
