"""The Loop actor: the one task that owns a loop's state and changes its phase.

Rules:
- State changes only through ``LoopHost.commit``: the host appends, folds each
  durable record into ``Loop.state`` in seq order, publishes, then returns.
- The loop's phase (``lifecycle.Phase``) and the actor's presence
  (``lifecycle.Actor``) change only by a step of their tables (``_step``,
  ``_move``); nothing else says whether a turn or a compaction runs.
- One handler per command (``_on_*``); ``_handle`` only dispatches.
- A turn is stopped by handing it a ``TurnStop``; it returns a ``TurnResult``.
- Workers (turn, batch, compaction, delegation) get the loop through the ports
  of ``ports.py``, never the actor.
- The module is one piece: it is the one task owning the loop's fields, and
  its handlers, lifecycle steps and ports all read and change them.

``docs/architecture.md`` ("The loop's lifecycle") tells the whole life.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar, Unpack

import structlog
import trio

from journal.content import Message, Text
from journal.events import (
    ChildFinished,
    CommandKeyed,
    CompactionTrigger,
    Event,
    GateResolved,
    InputCancelled,
    InputQueued,
    LoopConfigured,
    LoopInferenceChanged,
    LoopModeChanged,
    LoopPaused,
    LoopResumed,
    LoopStarted,
    LoopStopped,
    LoopToolsReplaced,
    Provenance,
    SteerQueued,
    ToolResolved,
    TurnRejected,
    TurnStarted,
)
from journal.record import Record

from . import deadlines, gates
from .commands import (
    PRIORITY,
    AnswerGate,
    CancelQueuedInput,
    ChangeInference,
    ChangeMode,
    Command,
    Compact,
    DecideGate,
    Interrupt,
    Pause,
    ReplaceTools,
    ResolveToolCall,
    Resume,
    Shutdown,
    Snapshot,
    Steer,
    SubagentResult,
    UserInput,
    closed_error,
)
from .compaction import compact, needs_compaction
from .configuration import describe_shared, prompts_of
from .context import RequestBuilder
from .definition import Delegate, LoopDefinition, ResolvedDefinition
from .delegation import run_delegate
from .errors import (
    BudgetExhaustedError,
    CommandError,
    LoopClosedError,
    NotQueuedError,
    NotUnknownEffectError,
    QueueFullError,
    UnknownCommandError,
)
from .ids import new_id
from .keys import command_digest, command_name, repeat_of
from .lifecycle import TRANSITIONS, Actor, ActorStep, Phase, Step, advance, held, move
from .mailbox import Mailbox
from .model import Delta
from .models.limiter import wait_on_behalf_of
from .notices import BUDGET_EXHAUSTED
from .permits import Outside, Permit, Permits, Working
from .ports import ChildLoop, CommitOptions
from .principals import stamped
from .relisting import relisting_events
from .state import LoopState, copy_state, fold, shed_empty
from .timers import RunTimer, Ticket
from .tools import Tool
from .toolsets import Toolsets
from .turn import TurnResult, TurnRunner, TurnStop

__all__ = ["Loop", "LoopHost"]

T = TypeVar("T")

_stdlib = logging.getLogger(__name__)
log = structlog.wrap_logger(_stdlib)


class LoopHost(Protocol):
    """What a loop needs from the session that hosts it."""

    async def commit(
        self, loop: Loop, events: Sequence[Event], **options: Unpack[CommitOptions]
    ) -> list[Record]:
        """Append durably, fold into ``loop.state`` in seq order, publish, return
        (``CommitOptions``).  Enqueued before the first checkpoint, so commits
        keep call order."""
        ...

    def publish_delta(self, loop: str, effect_id: str, delta: Delta) -> None:
        """Show a live stream delta to subscribers (ephemeral, may be dropped)."""
        ...

    async def start_child(
        self,
        parent: Loop,
        child_id: str,
        definition: LoopDefinition,
        provenance: Provenance,
        *,
        mode: str | None = None,
    ) -> Loop:
        """Create and start a child loop in the same session, in ``mode``."""
        ...

    def child(self, child_id: str) -> Loop | None:
        """A loop of this session by id (None when it is not running here)."""
        ...

    def watch_background(self, parent: Loop, child_id: str) -> None:
        """Deliver a background child's result to ``parent`` once it settles."""
        ...

    def new_prompts(self, prompts: dict[str, str]) -> dict[str, str]:
        """Of ``prompts`` (digest -> text), those not yet recorded in the
        session; they count as recorded from now on (the caller commits them)."""
        ...

    def tokens_used(self) -> int:
        """Tokens every loop of the session spent: the sum of their folds'
        ``tokens_used``."""
        ...


class _TurnDone:
    """Internal: the turn task finished, with ``result``."""

    __slots__ = ("result",)

    def __init__(self, result: TurnResult | None) -> None:
        self.result = result
        """None: the turn's run raised (the loop is closing)."""


class _CompactionDone:
    """Internal: a compaction attempt finished."""


_NO_TOOLSETS = Toolsets()
"""What every loop whose definition names no MCP server shares: it connects
nothing, lists nothing and never changes."""


class Loop:
    """One agent loop.  Create it, then ``await nursery.start(loop.run)``; the
    loop keeps running in that nursery (parked, with no task, while idle)."""

    # Slots: with over 30 attributes an instance dict stops sharing its keys
    # with the class's other instances, and every idle loop would pay for it.
    __slots__ = (
        "_active",
        "_actor",
        "_answers",
        "_auto_tried_at",
        "_awaited",
        "_compaction_principals",
        "_compaction_scope",
        "_creator",
        "_due",
        "_flush",
        "_flushes",
        "_home",
        "_mailbox",
        "_pending_compactions",
        "_phase",
        "_quiet",
        "_resumed",
        "_start_cause",
        "_tasks",
        "_turn",
        "_turn_finished",
        "definition",
        "forms",
        "host",
        "id",
        "parent",
        "permit",
        "requests",
        "state",
        "toolsets",
    )

    def __init__(
        self,
        *,
        loop_id: str,
        definition: LoopDefinition,
        host: LoopHost,
        state: LoopState | None = None,
        parent: Provenance | None = None,
        mailbox_capacity: int = 64,
        cause: str | None = None,
        principal: str | None = None,
        mode: str | None = None,
    ) -> None:
        self.id = loop_id
        self._creator = principal
        """Who created the session, recorded on ``loop.started`` (its first loop)."""
        self._start_cause = cause
        """The cause of ``loop.started``: the parent's delegate call, for a child."""
        self.parent = parent
        self.definition = definition
        self.host = host
        # A new loop may start in a mode (a delegate's child): its first
        # record names it, and until then the state already runs it.
        self.state = state if state is not None else LoopState(mode=mode)
        self._mailbox = Mailbox(mailbox_capacity, self._arrived)
        self._phase = Phase.IDLE
        self._actor = Actor.SERVING
        """``Actor.PARKED``: the next item in the mailbox starts a task."""
        self._home: trio.Nursery | None = None
        """The nursery ``run`` ran in, where a parked actor starts again."""
        self._tasks: trio.Nursery
        """Where the loop's other tasks start: ``_home``, or for a loop with MCP
        servers (which keeps its task) the actor's own nursery."""
        self._turn: TurnRunner | None = None
        """The open turn this process runs (due or running; ``Phase.TURN``)."""
        self._turn_finished: trio.Event | None = None
        """Set when the running turn has finished (made by the first waiter)."""
        self._due: TurnRunner | None = None
        """A turn started and not yet running: the actor runs it once it has
        taken every command waiting (``_serve``)."""
        self._answers = gates.Answers()
        self.forms = gates.Forms(self._resend_answer)
        """The types open form gates' answers must fit (``gates.Forms``)."""
        self._active = 0
        """Tasks of this loop doing work (not waiting on a person)."""
        self.permit = Permit()
        """This loop's part in the run's ``Permits``."""
        self._awaited: ChildLoop | None = None
        """The foreground child a tool call of this loop waits on (``wait_child``)."""
        self._quiet: trio.lowlevel.ParkingLot | None = None
        """Where ``wait_settled`` and ``wait_quiescent`` wait (made by the
        first waiter; a parked loop drops it when nobody waits)."""
        self._resumed: trio.lowlevel.ParkingLot | None = None
        """Where the tasks held by this loop's pause wait (its own and its
        descendants'; made by the first waiter)."""
        self._compaction_principals: dict[str, str] = {}
        """attempt id -> who asked for that compaction (this process only)."""
        self._flush: Ticket | None = None
        """The pending flush's entry in the run's timer (None: none)."""
        self._flushes: Callable[[], Awaitable[None]] | None = None
        """What that flush runs."""
        self._compaction_scope: trio.CancelScope | None = None
        """The running compaction's scope (cancelled when the loop stops)."""
        # Keyed requests the journal holds and no compaction started yet
        # (after a restore too): they run as if just asked for.
        # A tuple (most loops never have one): no empty list per idle loop.
        self._pending_compactions: tuple[tuple[str, str | None], ...] = (
            self.state.requested_compactions
        )
        self._auto_tried_at = -1
        self.requests = RequestBuilder()
        self.toolsets = Toolsets(definition.toolsets) if definition.toolsets else _NO_TOOLSETS

    # -- the lifecycle (lifecycle.py) -------------------------------------------

    @property
    def phase(self) -> Phase:
        """What works on the loop's context now (``lifecycle.Phase``)."""
        return self._phase

    @property
    def parked(self) -> bool:
        """No task serves the loop's mailbox (``lifecycle.Actor.PARKED``)."""
        return self._actor is Actor.PARKED

    def _step(self, step: Step) -> None:
        self._phase = advance(self._phase, step, self.id)

    def _move(self, step: ActorStep) -> None:
        self._actor = move(self._actor, step, self.id)

    # -- plumbing used by the host, and the ports the workers get (ports.py) ------

    @property
    def log(self) -> Any:
        """The loop's logger (bound to its id and definition).  Bound on each
        use, once a turn or a rare warning: kept, it would weigh on every
        idle loop."""
        return log.bind(loop=self.id, definition=self.definition.name)

    def logs(self, level: int) -> bool:
        """Whether the standard logger ``log`` writes to keeps lines at
        ``level`` (an application's logging settings decide).  Binding the
        logger and running structlog's processors cost far more than most
        lines: a line made every turn asks first."""
        return _stdlib.isEnabledFor(level)

    def apply(self, record: Record) -> None:
        """Fold one durable record (called by the host, in seq order)."""
        fold(self.state, record)

    async def commit(
        self, events: Sequence[Event], **options: Unpack[CommitOptions]
    ) -> list[Record]:
        """Commit through the host (``CommitOptions``)."""
        return await self.host.commit(self, events, **options)

    def resolved(self) -> ResolvedDefinition:
        """The definition as the next turn runs it: the mode, the tools its
        toolsets listed, and the choices made by command (the model by the name
        the fold says is in use)."""
        state = self.state
        return self.definition.resolved(
            state.mode,
            self.toolsets.tools,
            model=state.model or None,
            max_tokens=state.chosen_max_tokens,
            tools=state.chosen_tools,
        )

    @property
    def listed(self) -> tuple[Tool, ...]:
        return self.toolsets.tools

    def working(self) -> Working:
        return Permits.of_this_run().working(self.permit)

    def outside(self) -> Outside:
        # A model call made outside waits for a shared rate limit as this loop's.
        wait_on_behalf_of(id(self))
        return Permits.of_this_run().outside(self.permit)

    async def run_working(self, work: Callable[..., Awaitable[T]], *args: Any) -> T:
        async with Permits.of_this_run().working(self.permit):
            return await work(*args)

    async def run_outside(self, wait: Callable[..., Awaitable[T]], *args: Any) -> T:
        async with Permits.of_this_run().outside(self.permit):
            return await wait(*args)

    async def wait_gate(self, gate_id: str) -> GateResolved:
        # Waiting on a person: a requested compaction may run now, and the
        # loop counts as quiet.
        self._maybe_compact()
        self.busy(-1)
        try:
            # A person's time counts against no deadline of the waiting task.
            with deadlines.paused():
                resolution = await self._answers.wait(gate_id)
        finally:
            self.busy(+1)
        # Answered while the loop is paused: the answer is recorded, and
        # what it lets the tool do waits for the resume.
        await self.wait_unpaused()
        return resolution

    async def wait_unpaused(self) -> None:
        """Wait while this loop or one of its ancestors is paused (the fold's
        ``LoopState.paused``); a no-op, and no checkpoint, when none is.  The
        loop counts as quiet meanwhile, and the waiting task's deadlines stop
        counting, as while it waits on a person."""
        holder = self._pauser()
        if holder is None:
            return
        self.busy(-1)
        try:
            with deadlines.paused():
                while holder is not None:
                    await holder._wait_resumed()
                    holder = self._pauser()
        finally:
            self.busy(+1)

    @property
    def held_by_pause(self) -> bool:
        """This loop or one of its ancestors running here is paused."""
        return self._pauser() is not None

    def _pauser(self) -> Loop | None:
        """The nearest of this loop and its ancestors running here that is paused."""
        loop: Loop | None = self
        while loop is not None:
            state = loop.state
            if state.paused:
                return loop
            loop = self.host.child(state.parent.parent_loop) if state.parent else None
        return None

    async def _wait_resumed(self) -> None:
        if self._resumed is None:
            self._resumed = trio.lowlevel.ParkingLot()
        await self._resumed.park()

    async def delegate(self, delegate: Delegate, task: str, *, execution_id: str) -> str:
        return await run_delegate(self, delegate, task, execution_id=execution_id)

    def child(self, child_id: str) -> Loop | None:
        return self.host.child(child_id)

    async def start_child(
        self,
        child_id: str,
        definition: LoopDefinition,
        provenance: Provenance,
        *,
        mode: str | None = None,
    ) -> Loop:
        return await self.host.start_child(self, child_id, definition, provenance, mode=mode)

    def watch_background(self, child_id: str) -> None:
        self.host.watch_background(self, child_id)

    def session_tokens(self) -> int:
        return self.host.tokens_used()

    def flush_at(self, deadline: float, flush: Callable[[], Awaitable[None]]) -> None:
        """Have ``flush`` run at ``deadline`` (trio time) unless cancelled first.
        The run's timer watches the deadline: a task is started only
        for a flush that comes due (most are cancelled first, by the block's
        or the stream's end)."""
        if self._flush is not None:
            self._flush.cancel()
        self._flush = RunTimer.shared().add(deadline, self._flush_due)
        self._flushes = flush

    def cancel_flush(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = self._flushes = None

    def _flush_due(self) -> None:
        """The pending flush's deadline has come: run it in a task of the
        loop's own (from the timer's system task, which must not raise)."""
        flush = self._flushes
        assert flush is not None
        self._flush = self._flushes = None
        # A flush is pending only while the turn's model call streams, so
        # the nursery the turn runs in is open.
        self._start_task(flush)

    def busy(self, delta: int) -> None:
        self._active += delta
        if self._active == 0 and self._quiet is not None:
            self._quiet.unpark_all()

    async def wait_child(self, child: ChildLoop) -> None:
        """Wait for a foreground child to settle.  Meanwhile this loop counts as
        quiet, so the session is quiet while the child waits on a person; but
        not once the child has settled, though this loop's task may not have
        run yet: it has the child's result to take (``quiescent``)."""
        self._awaited = child
        self.busy(-1)
        try:
            await child.wait_settled()
        finally:
            self._awaited = None
            self.busy(+1)

    async def _wait_quiet_change(self) -> None:
        if self._quiet is None:
            self._quiet = trio.lowlevel.ParkingLot()
        await self._quiet.park()

    @property
    def quiescent(self) -> bool:
        """Nothing to do until someone sends a command (idle, or waiting on a
        person: an open gate or an unknown effect)."""
        awaited = self._awaited
        return (
            self._active == 0
            and len(self._mailbox) == 0
            and (awaited is None or not awaited.settled)
        )

    async def wait_settled(self) -> None:
        """Wait until the loop has run its input and has no turn open (or has
        stopped): what a parent waits for on a foreground child."""
        while self._phase is not Phase.STOPPED and not self.settled:
            await self._wait_quiet_change()

    @property
    def settled(self) -> bool:
        """Ran at least one turn, none is open, nothing queued, nothing to do."""
        state = self.state
        return state.turn_index > 0 and not state.turn_open and not state.queued and self.quiescent

    async def finish(self) -> None:
        """Stop the loop for good (``loop.stopped``); a no-op when stopped."""
        try:
            await self.send(Shutdown(final=True))
        except LoopClosedError:
            pass

    async def wait_quiescent(self) -> None:
        while not self.quiescent and self._phase is not Phase.STOPPED:
            await self._wait_quiet_change()

    # -- the public side -------------------------------------------------------

    async def send(self, command: Command) -> Any:
        """Deliver a command and wait for its acceptance (or its error)."""
        if self._mailbox.closed or self.state.stopped:
            # A stopped loop (finished for good) has no actor to answer.
            raise closed_error(self.id)
        if isinstance(command, PRIORITY):
            self._mailbox.send_priority(command)
        else:
            await self._mailbox.send(command)
        self._quiet_changed()
        return await command.reply.wait()

    def _resend_answer(self, command: AnswerGate) -> None:
        """Take a held answer again (its form's type is known, or the turn ended)."""
        try:
            self._mailbox.send_priority(command)
        except LoopClosedError as exc:
            command.reply.fail(exc)
            return
        self._quiet_changed()

    def _quiet_changed(self) -> None:
        if self._quiet is not None:
            self._quiet.unpark_all()

    # -- the actor -------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[Loop] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the loop (a new one commits what it runs under; a restored
        one resumes), then take commands.  Returns once the actor parks, its
        mailbox empty (a turn it started runs first, in this task): the actor
        is then data (an idle loop keeps no task, nursery or cancel scope) and
        the next item its mailbox takes starts it again in the nursery ``run``
        ran in.
        After ``Shutdown`` the loop is stopped for good; an error propagates
        into that nursery, as from any task of it."""
        await self._act(task_status)

    async def start_parked(self, home: trio.Nursery) -> None:
        """What ``await home.start(loop.run)`` does, without a task when it
        can: commit what a new loop runs under from the caller's task, then
        park it as data, ``home`` the nursery its actor starts in when its
        mailbox takes an item (at once, if one came meanwhile).  A new loop has
        nothing to resume; a restored one parks only when it has nothing
        either (``_nothing_to_resume``), so a host taking over idle sessions
        spends no task on each until its first command.  A loop with MCP
        servers, or restored with something to resume, starts with ``run``.
        A failed start stops the loop and raises to the caller."""
        if self.definition.toolsets or (self.state.loop and not self._nothing_to_resume()):
            await home.start(self.run)
            return
        self._home = self._tasks = home
        try:
            await self._open(home)
        except BaseException:
            self._close_down()
            raise
        self._move(ActorStep.PARK)
        self._mailbox.release()
        shed_empty(self.state)
        if len(self._mailbox):
            self._arrived()

    async def _act(self, task_status: trio.TaskStatus[Loop] | None) -> None:
        """A serving task: it starts with the loop (``task_status``) or when a
        command arrives at a parked loop, and ends when the loop parks or stops.  A
        loop with MCP servers keeps its task and a nursery of its own, where
        their connections and the loop's other tasks live; any other runs
        without one (its tasks start in ``_home``), which spares every
        serving task a nursery and the schedule point of its exit."""
        stopped = True
        permits = Permits.of_this_run()
        try:
            await permits.enter(self.permit)
            if self.definition.toolsets:
                async with trio.open_nursery() as nursery:
                    self._tasks = nursery
                    if task_status is not None:
                        await self._begin(task_status, nursery)
                        # The status keeps the nursery ``start`` waited in (its
                        # cancel scope and status); dropped, the actor holds none.
                        task_status = None
                        await self._resume_started()
                    stopped = await self._serve()
                    if stopped:
                        self.toolsets.close()
                        nursery.cancel_scope.cancel()
                return
            if task_status is not None:
                await self._begin(task_status, None)
                task_status = None
                assert self._home is not None
                self._tasks = self._home
                await self._resume_started()
            stopped = await self._serve()
            if stopped and self._compaction_scope is not None:
                self._compaction_scope.cancel()
        finally:
            permits.leave(self.permit)
            if stopped:
                self._close_down()

    async def _begin(
        self, task_status: trio.TaskStatus[Loop], nursery: trio.Nursery | None
    ) -> None:
        """Open the loop, report it started, and learn the nursery it runs in."""
        await self._open(nursery)
        task_status.started(self)
        self._home = trio.lowlevel.current_task().parent_nursery

    def _nothing_to_resume(self) -> bool:
        """What ``_resume_started`` would do is nothing: no turn open, no
        compaction asked for and not started, no input that starts a turn."""
        return not (self.state.turn_open or self._pending_compactions or self._may_start_turn())

    async def _resume_started(self) -> None:
        """After the start: what a restore found open resumes."""
        self.busy(+1)
        try:
            self._maybe_compact()  # keyed requests a restore found not started
            await self._resume()
        finally:
            self.busy(-1)

    async def _open(self, nursery: trio.Nursery | None) -> None:
        """List the servers' tools, then commit what a new loop runs under (or,
        restored, what changed on its servers)."""
        # The servers' tools are known before the first request is built.
        if nursery is not None:
            taken = [t.name for t in self.definition.resolved(None).tools]
            await self.toolsets.open(nursery, taken, definition=self.definition.name)
        if not self.state.loop:
            resolved = self.resolved()
            # Born with what it runs under: one commit, so no record
            # of the loop exists without its configuration.
            await self.commit(
                [
                    LoopStarted(
                        definition=self.definition.name,
                        model=resolved.model.name,
                        mode=self.state.mode,
                        parent=self.parent,
                        principal=self._creator,
                    ),
                    LoopConfigured(
                        config=describe_shared(self.definition, self.listed),
                        prompts=self.host.new_prompts(prompts_of(self.definition)),
                    ),
                ],
                cause=self._start_cause,
            )
        elif self.definition.toolsets:
            # Restored: a server's tools that vanished or changed
            # since the journal recorded them are drift, settled
            # before anything resumes.
            relisted = relisting_events(
                self.state, self.definition, self.listed, self.toolsets.answered
            )
            if relisted:
                await self.commit(relisted)

    async def _serve(self) -> bool:
        """Take commands until ``Shutdown`` (True) or until the actor may park
        (False): nothing in the mailbox, and no MCP server (a loop with
        servers keeps its task).  A turn started meanwhile runs in this task
        once the mailbox is empty, the actor parked while it runs; in a task
        of its own if commands wait (they are taken first) or the loop keeps
        its actor's task."""
        mailbox = self._mailbox
        parks = self._home is not None and not self.definition.toolsets
        while True:
            command = mailbox.take()
            held = False
            runner = self._due
            if runner is not None:
                self._due = None
                if command is not None or not parks:
                    # The turn's task works under the permit this one holds.
                    Permits.of_this_run().join(self.permit)
                    self._start_task(self._turn_task, runner)
                else:
                    # Run here, the actor parked meanwhile: a command arriving
                    # starts a new serving task, as at an idle loop.
                    self._move(ActorStep.PARK)
                    mailbox.release()
                    result = None
                    try:
                        result = await runner.run()
                    finally:
                        held = self._turn_ended(result, here=True)
                    if not held:
                        return False  # another serving task took over
                    # No serving task ran at the turn's end: this task serves
                    # again, the turn's busy count carried over.
                    command = _TurnDone(result)
            if command is None:
                if parks and self._phase is not Phase.STOPPING:
                    # Decided and marked in one step: an item arriving from
                    # now on starts the actor again (``_arrived``).
                    self._move(ActorStep.PARK)
                    mailbox.release()
                    if self._idle():
                        shed_empty(self.state)
                        if self._quiet is not None and not self._quiet:
                            self._quiet = None
                    return False
                async with self.outside():
                    await mailbox.wait()
                continue
            if not held:
                self.busy(+1)
            try:
                if isinstance(command, _TurnDone):
                    self.forms.release_all()
                    await self._after_turn(command.result)
                    continue
                if isinstance(command, _CompactionDone):
                    self._maybe_compact()
                    await self._resume()
                    continue
                try:
                    await self._handle(command)
                except CommandError as exc:
                    # Refused (nothing committed but, for a full queue,
                    # the turn.rejected that records it): the caller
                    # hears why, and the loop goes on.
                    command.reply.fail(exc)
                except BaseException as exc:
                    # Cancelled too (its session's work stopped midway): the
                    # caller must not wait on an actor that is gone.
                    command.reply.fail(exc if isinstance(exc, Exception) else closed_error(self.id))
                    raise
                if isinstance(command, Shutdown):
                    return True
            finally:
                self.busy(-1)

    def _idle(self) -> bool:
        """No turn or compaction runs, nothing counts itself busy and no
        answer is held: a parked loop may shed its empty containers."""
        return self._phase is Phase.IDLE and self._active == 0 and not self.forms.holding

    def _start_task(self, work: Callable[..., Awaitable[Any]], *args: Any) -> None:
        self._tasks.start_soon(self._guarded, work, *args)

    async def _guarded(self, work: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """A task of the loop (a turn the actor does not run, a compaction, a
        flush): its failure stops the loop, as the actor's own would (it
        then propagates into the nursery, as from any task of it)."""
        try:
            await work(*args)
        except BaseException:
            self._close_down()
            raise

    def _arrived(self) -> None:
        """An item is in the mailbox: a parked actor starts again."""
        if self._actor is not Actor.PARKED:
            return
        assert self._home is not None
        try:
            self._home.start_soon(self._act, None)
        except RuntimeError:
            # The nursery the loop ran in is closed (its session ended
            # while the loop was parked): the loop is stopped, and the item
            # is refused like any sent to a stopped loop.
            self._close_down()
            return
        self._move(ActorStep.WAKE)

    def _close_down(self) -> None:
        """The loop stopped: everything still waiting on it is refused."""
        for item in self._mailbox.close():
            if not isinstance(item, _TurnDone | _CompactionDone):
                item.reply.fail(closed_error(self.id))
        self._answers.fail_all(closed_error(self.id))
        self.forms.fail_all(closed_error(self.id))
        self._step(Step.CLOSE)
        self._quiet_changed()

    async def _handle(self, command: Command) -> None:
        state = self.state
        if command.key is not None and state.keys and command.key in state.keys:
            # A repeat of a keyed command: answered from the fold, nothing committed.
            used = state.keys[command.key]
            name, digest = command_name(command), command_digest(command, self.id)
            command.reply.set(repeat_of(used, command.key, name, digest))
            return
        match command:
            case UserInput():
                await self._on_user_input(command)
            case SubagentResult():
                await self._on_subagent_result(command)
            case CancelQueuedInput():
                await self._on_cancel_queued_input(command)
            case Steer():
                await self._on_steer(command)
            case AnswerGate() | DecideGate():
                await self._on_gate_answer(command)
            case ResolveToolCall():
                await self._on_resolve_tool_call(command)
            case ChangeMode():
                await self._on_change_mode(command)
            case ChangeInference():
                await self._on_change_inference(command)
            case ReplaceTools():
                await self._on_replace_tools(command)
            case Compact():
                await self._on_compact(command)
            case Interrupt():
                await self._on_interrupt(command)
            case Pause():
                await self._on_pause(command)
            case Resume():
                await self._on_resume(command)
            case Shutdown():
                await self._on_shutdown(command)
            case Snapshot():
                await self._on_snapshot(command)
            case _:
                raise UnknownCommandError(
                    f"loop {self.id} does not understand {type(command).__name__}"
                )

    async def _on_user_input(self, command: UserInput) -> None:
        state = self.state
        queued = InputQueued(
            input_id=command.input_id,
            messages=command.messages,
            trigger=command.trigger,
        )
        result = command.input_id
        await self._refuse_past_budget(command)
        if self._may_start_turn(extra=True) and not self._wants_compaction():
            # Idle: the input and the turn it starts are one commit.
            await self._start_turn([queued], command=command, result=result)
            command.reply.set(result)
            return
        limit = self.definition.limits_under(state.mode).max_queued_inputs
        if len(state.queued) >= limit:
            await self.commit(
                [
                    TurnRejected(
                        input_id=command.input_id,
                        reason="queue_full",
                        key=command.key,
                        principal=command.principal,
                    )
                ],
                cause=command.cause,
            )
            raise QueueFullError(
                f"loop {self.id} already holds {len(state.queued)} queued inputs "
                f"(Limits.max_queued_inputs={limit}); input {command.input_id} was "
                "refused: submit it again once a turn has taken some"
            )
        await self._commit_command(command, [queued], result)
        command.reply.set(result)
        await self._maybe_start_turn()

    async def _refuse_past_budget(self, command: UserInput) -> None:
        """Refuse input to a session that spent its token budget: recorded
        (``turn.rejected``) and raised, nothing queued."""
        budget = self.definition.limits_under(self.state.mode).max_session_tokens
        if budget is None:
            return
        spent = self.host.tokens_used()
        if spent < budget:
            return
        await self.commit(
            [
                TurnRejected(
                    input_id=command.input_id,
                    reason=BUDGET_EXHAUSTED,
                    key=command.key,
                    principal=command.principal,
                )
            ],
            cause=command.cause,
        )
        raise BudgetExhaustedError(
            f"the session already spent {spent} tokens of its budget of {budget} "
            f"(Limits.max_session_tokens of loop {self.id}); input {command.input_id} was "
            "refused: restore the session under a definition with a larger budget, or start "
            "a new session",
            spent=spent,
            budget=budget,
        )

    async def _on_subagent_result(self, command: SubagentResult) -> None:
        trigger: Literal["notification", "subagent"] = (
            "notification" if command.background else "subagent"
        )
        text = f"[result of child loop {command.child_loop} ({command.status})]\n{command.text}"
        # The child's end and its delivery are one commit: after a
        # crash the result is delivered exactly once.
        await self.commit(
            [
                ChildFinished(
                    child_loop=command.child_loop,
                    status=command.status,
                    output=command.text,
                    tokens=command.tokens,
                ),
                InputQueued(
                    input_id=command.input_id,
                    messages=(Message(role="user", blocks=(Text(text=text),)),),
                    trigger=trigger,
                    child_loop=command.child_loop,
                ),
            ],
            cause=command.cause,
        )
        command.reply.set(command.input_id)
        await self._maybe_start_turn()

    async def _on_cancel_queued_input(self, command: CancelQueuedInput) -> None:
        state = self.state
        if not any(q.input_id == command.input_id for q in state.queued):
            raise NotQueuedError(
                f"input {command.input_id} is not queued in loop {self.id} "
                "(it already started a turn, was cancelled, or never existed)"
            )
        await self._commit_command(command, [InputCancelled(input_id=command.input_id)])
        command.reply.set(True)

    async def _on_steer(self, command: Steer) -> None:
        steer = SteerQueued(steer_id=command.steer_id, text=command.text)
        await self._commit_command(command, [steer], command.steer_id)
        command.reply.set(command.steer_id)
        await self._maybe_start_turn()

    async def _on_gate_answer(self, command: AnswerGate | DecideGate) -> None:
        state = self.state
        if isinstance(command, AnswerGate) and self.forms.waits_for_type(state, command):
            # A form gate restored open: its type comes back when the
            # re-entered tool asks again; the answer is checked then.
            self.forms.hold(command)
            return
        resolution = gates.resolution(state, command, self.forms)
        await self._commit_command(command, [resolution])
        # The turn may not be waiting yet (just resumed): the answer
        # is kept until it does.
        self._answers.deliver(resolution)
        command.reply.set(True)

    async def _on_resolve_tool_call(self, command: ResolveToolCall) -> None:
        state = self.state
        if command.execution_id not in state.unknown:
            raise NotUnknownEffectError(
                f"execution {command.execution_id} in loop {self.id} has no unknown "
                "outcome to resolve (it completed, was resolved, or never started)"
            )
        started = state.unknown[command.execution_id]
        await self._commit_command(
            command,
            [
                ToolResolved(
                    execution_id=command.execution_id,
                    tool_use_id=started.tool_use_id,
                    content=command.content,
                    is_error=command.is_error,
                )
            ],
        )
        command.reply.set(True)
        await self._resume()

    async def _on_change_mode(self, command: ChangeMode) -> None:
        self.definition.mode(command.mode)  # raises ModeNotFoundError
        await self._commit_command(command, [LoopModeChanged(mode=command.mode)])
        command.reply.set(True)

    async def _on_change_inference(self, command: ChangeInference) -> None:
        state = self.state
        model = None if command.reset else state.chosen_model
        max_tokens = None if command.reset else state.chosen_max_tokens
        if command.model is not None:
            self.definition.registered_model(command.model)  # NotRegisteredError
            model = command.model
        if command.max_tokens is not None:
            max_tokens = command.max_tokens
        await self._commit_command(
            command, [LoopInferenceChanged(model=model, max_tokens=max_tokens)]
        )
        command.reply.set(True)

    async def _on_replace_tools(self, command: ReplaceTools) -> None:
        for name in command.tools or ():
            self.definition.registered_tool(name)  # NotRegisteredError
        await self._commit_command(command, [LoopToolsReplaced(tools=command.tools)])
        command.reply.set(True)

    async def _on_compact(self, command: Compact) -> None:
        # Runs when no turn is working: now, or once the running turn
        # ends or parks at a person's gate.  Never an error.  With a
        # key the request is durable (the fold keeps it until it starts).
        cause = await self._commit_command(command, [], command.attempt_id)
        if command.principal is not None:
            self._compaction_principals[command.attempt_id] = command.principal
        pending = (command.attempt_id, command.cause if command.key is None else cause)
        self._pending_compactions = (*self._pending_compactions, pending)
        command.reply.set(command.attempt_id)
        self._maybe_compact()

    async def _on_interrupt(self, command: Interrupt) -> None:
        stopping = self._turn is not None
        cause = await self._commit_command(command, [], stopping)
        stop = TurnStop("interrupted", cause, command.principal)
        command.reply.set(await self._stop_turn(stop))

    async def _on_pause(self, command: Pause) -> None:
        # Idempotent: pausing a paused loop records nothing but its key,
        # and answers False (as an interrupt with no turn does).
        pausing = not self.state.paused
        events: list[Event] = [LoopPaused()] if pausing else []
        await self._commit_command(command, events, pausing)
        command.reply.set(pausing)

    async def _on_resume(self, command: Resume) -> None:
        resuming = self.state.paused
        events: list[Event] = [LoopResumed()] if resuming else []
        await self._commit_command(command, events, resuming)
        command.reply.set(resuming)
        if not resuming:
            return
        lot, self._resumed = self._resumed, None
        if lot is not None:
            # The turn's next step, answered gates, and the children's steps.
            lot.unpark_all()
        self._maybe_compact()
        await self._resume()

    async def _on_shutdown(self, command: Shutdown) -> None:
        state = self.state
        # Nothing is lost by leaving a turn open that only waits on
        # people: every gate stays answerable after a restore, so a
        # pending approval or question outlives a deploy's restart.
        detach = not command.final and (
            self._waits_only_on_people() or (self._turn is not None and self._turn.held)
        )
        self._step(Step.SHUT_DOWN)
        await self._stop_turn(TurnStop("detached" if detach else "shutdown"))
        if command.final and not state.stopped:
            await self.commit([LoopStopped(reason="finished")], cause=command.cause)
        command.reply.set(True)

    async def _on_snapshot(self, command: Snapshot) -> None:
        state = self.state
        command.reply.set(copy_state(state))

    async def _commit_command(
        self, command: Command, events: list[Event], result: str | bool | None = None
    ) -> str | None:
        """Commit what ``command`` made.  With a key, a ``command.keyed``
        record goes first (storing the key, the digest and ``result``) and
        every record after it names it as its cause.  Returns the cause the
        command's later records name (the keyed record's id, or the command's
        own cause)."""
        events = stamped(events, command.principal)
        if command.key is None:
            await self.commit(events, cause=command.cause)
            return command.cause
        keyed, record_id = self._keyed(command, result)
        await self.commit(
            [keyed, *events],
            ids=[record_id, *(None for _ in events)],
            causes=[command.cause, *(record_id for _ in events)],
        )
        return record_id

    def _keyed(self, command: Command, result: str | bool | None) -> tuple[CommandKeyed, str]:
        assert command.key is not None
        keyed = CommandKeyed(
            key=command.key,
            command=command_name(command),
            digest=command_digest(command, self.id),
            result=result,
            principal=command.principal,
        )
        return keyed, new_id("cmd_")

    # -- turns -----------------------------------------------------------------

    def _may_start_turn(self, *, extra: bool = False) -> bool:
        """Nothing stands in the way of a new turn (``extra``: input about to
        be queued counts as queued)."""
        state = self.state
        return not (
            self._phase is not Phase.IDLE
            or held(Step.START_TURN, state.paused)
            or state.turn_open
            or state.stopped
            or state.gates
            or state.unknown
            or not (extra or state.queued or state.steering)
        )

    async def _maybe_start_turn(self) -> None:
        if not self._may_start_turn():
            return
        if self._maybe_auto_compact():
            return
        await self._start_turn([])

    async def _start_turn(
        self,
        first: list[Event],
        *,
        command: UserInput | None = None,
        result: str | None = None,
    ) -> None:
        """Commit ``first`` (what ``command`` made) and ``turn.started``
        (taking every queued input and steering) in one commit, then run the
        turn.  The turn's cause is the record of the first input it takes."""
        state = self.state
        inputs = [q.input_id for q in state.queued]
        inputs += [e.input_id for e in first if isinstance(e, InputQueued)]
        started = TurnStarted(
            turn=state.turn_index + 1,
            input_ids=tuple(inputs),
            steer_ids=tuple(s.steer_id for s in state.steering),
        )
        by = command.cause if command is not None else None
        if command is not None:
            first = stamped(first, command.principal)
        ids: list[str | None] = [new_id("ev_") for _ in first]
        causes: list[str | None] = [by for _ in first]
        if command is not None and command.key is not None:
            keyed, record_id = self._keyed(command, result)
            first, ids = [keyed, *first], [record_id, *ids]
            causes = [by, *(record_id for _ in causes)]
        turn_cause = next((q.record for q in state.queued), None) or next(
            (i for e, i in zip(first, ids, strict=True) if isinstance(e, InputQueued)),
            next((s.record for s in state.steering), None),
        )
        await self.commit([*first, started], ids=[*ids, None], causes=[*causes, turn_cause])
        self._spawn_turn()

    def _wants_compaction(self) -> bool:
        return self._auto_tried_at != self.state.history_seq and needs_compaction(
            self.state, self.definition.limits_under(self.state.mode)
        )

    def _maybe_auto_compact(self) -> bool:
        """Compact before starting a turn when the context passed its
        threshold (once per history state, so a rejection cannot loop)."""
        if not self._wants_compaction():
            return False
        self._auto_tried_at = self.state.history_seq
        self._start_compaction(new_id("cmp_"), "auto", None)
        return True

    def _maybe_compact(self) -> None:
        """Start the next requested compaction if nothing works on the context
        (no turn, or one that waits on a person)."""
        phase = self._phase
        if not self._pending_compactions or Step.START_COMPACTION not in TRANSITIONS[phase]:
            return
        if held(Step.START_COMPACTION, self.state.paused):
            return  # taken again by the resume
        if phase is Phase.TURN and not self.state.gates:
            return
        (attempt_id, cause), *rest = self._pending_compactions
        self._pending_compactions = tuple(rest)
        self._start_compaction(attempt_id, "manual", cause)

    def _start_compaction(
        self, attempt_id: str, trigger: CompactionTrigger, cause: str | None
    ) -> None:
        principal = self._compaction_principals.pop(attempt_id, None)

        async def run() -> None:
            permits = Permits.of_this_run()
            try:
                # Its own scope: the loop's stop cancels it (the actor has
                # no nursery to cancel), waiting for a permit included.
                with trio.CancelScope() as self._compaction_scope:
                    await permits.enter(self.permit)
                    await compact(
                        self, attempt_id, trigger=trigger, cause=cause, principal=principal
                    )
            finally:
                self._compaction_scope = None
                self._step(Step.END_COMPACTION)
                if not self._mailbox.closed:
                    self._mailbox.send_priority(_CompactionDone())
                self.busy(-1)
                permits.leave(self.permit)

        self._step(Step.START_COMPACTION)
        self.busy(+1)
        self._start_task(run)

    def _spawn_turn(self) -> None:
        """Start a turn: it runs once the actor has taken every command
        waiting (``_serve``)."""
        self._step(Step.START_TURN)
        self.busy(+1)
        self._turn = self._due = TurnRunner(self)

    async def _turn_task(self, runner: TurnRunner) -> None:
        """A turn in a task of its own (started while commands waited, or in
        a loop that keeps its actor's task)."""
        result = None
        try:
            result = await runner.run()
        finally:
            self._turn_ended(result, here=False)
            Permits.of_this_run().leave(self.permit)

    def _turn_ended(self, result: TurnResult | None, *, here: bool) -> bool:
        """The turn has finished: hand ``result`` to the actor (``_TurnDone``).
        Run ``here`` (in the task that parked to run the turn) with no
        serving task running now: True, and the caller takes the end itself, still
        counted busy (nobody sees the loop quiet in between)."""
        self._step(Step.END_TURN)
        self._turn = None
        # Set and dropped: a waiter holds its own reference.
        finished, self._turn_finished = self._turn_finished, None
        if finished is not None:
            finished.set()
        if self._mailbox.closed:
            self.busy(-1)
            return False
        if here and self._actor is Actor.PARKED:
            # Parked with an empty mailbox (an item would have started a
            # serving task): no other task serves the loop.
            self._move(ActorStep.WAKE)
            return True
        self._mailbox.send_priority(_TurnDone(result))
        self.busy(-1)
        return False

    async def _resume(self) -> None:
        """Continue after start or restore: an open turn with nothing unknown
        resumes where its records left it; otherwise queued input may start."""
        state = self.state
        if self._phase is not Phase.IDLE:
            return
        if state.turn_open:
            if not state.unknown:
                self._spawn_turn()
            return
        await self._maybe_start_turn()

    async def _after_turn(self, result: TurnResult | None) -> None:
        self._maybe_compact()
        outcome = None if result is None else result.outcome
        if outcome in ("completed", "limit", "crashed", "invalid_output") or (
            # A person's input that the interrupt left queued was typed to be
            # answered: it starts the next turn once the interrupt settled.
            # Steering alone was for the turn that was stopped: it waits.
            outcome == "interrupted" and self.state.queued
        ):
            await self._maybe_start_turn()

    async def _stop_turn(self, stop: TurnStop) -> bool:
        """Stop the open turn and wait until it has settled its records
        (False: no turn was open)."""
        turn = self._turn
        if turn is None:
            return False
        turn.stop(stop)
        if self._turn_finished is None:
            self._turn_finished = trio.Event()
        # Its settling may wait on other loops (a child interrupted): the
        # actor holds no permit meanwhile, or they could never get one.
        async with self.outside():
            await self._turn_finished.wait()
        return True

    def _waits_only_on_people(self) -> bool:
        """The running turn does nothing but wait at gates that a restore
        reopens as they are: permission gates (their tool never started) and
        questions asked by resumable tools (re-entered with the answer).  No
        model call is open and no other tool runs."""
        state = self.state
        if self._turn is None or not state.gates or state.open_call is not None:
            return False
        # A question is only ever asked from inside a running call, so checking
        # the running calls covers every question gate too.
        asking = {g.execution_id for g in state.gates.values() if g.kind == "user_input"}
        for execution_id, started in state.running.items():
            tool = self.definition.find_tool(started.name, self.listed)
            if execution_id not in asking or tool is None or not tool.resumable:
                return False
        return True
