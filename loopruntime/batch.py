"""run_batch: one model reply's tool calls, from admission to results.

1. Resolve tools and permissions in call order, so a session-wide grant on
   call N is seen by call N+1.  A call that needs approval opens a permission
   gate and waits; no policy means deny.  Calls that will not run get their
   ``tool.completed(rejected)`` at once.
2. Commit ``tool.started`` for every admitted call, in one commit, before any
   runs.
3. Run them: exclusive calls alone and in order; parallel-safe calls at most
   ``max_parallel_tool_calls`` at a time; calls with the same write target
   never overlap and keep their order.
4. Commit one ``tool.completed`` per call.  The fold hands the results to the
   model in call order once every call has one.

A call runs under its deadline (the tool's ``timeout``, else
``Limits.tool_timeout``).  When it passes the call is cancelled and
``deadline.passed`` is committed with what follows: a replay-safe tool runs
again under the same execution id (at most ``Limits.tool_retries`` times),
then fails visibly to the model; an atomic tool fails visibly at once; any
other call's outcome is unknown (``tool.abandoned(deadline)`` and a notice),
and the turn waits for the host to resolve it once the batch is done.

The batch is planned from loop state, so it also resumes a batch that a
restart cut short: calls with results are skipped, open gates are waited on
again, and restored calls (replay-safe, or resumable with an answered
question) are re-entered under their original execution id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgspec
import trio

from journal.content import Text, ToolUse
from journal.events import (
    DeadlinePassed,
    Event,
    GateCancelled,
    Notice,
    ToolAbandoned,
    ToolCompleted,
    ToolStarted,
)

from . import deadlines, gates
from .definition import ResolvedDefinition
from .ids import new_id
from .notices import (
    DENIED_RESULT,
    EMPTY_RESULT,
    deadline_failure,
    deadline_unknown,
    rejected,
)
from .ports import ToolsPort
from .tools import (
    Tool,
    ToolContext,
    ToolInputError,
    ToolOutput,
    decide,
    is_empty_result,
    shape_result,
)

__all__ = ["run_batch"]


@dataclass
class _Call:
    use: ToolUse
    tool: Tool
    parsed: msgspec.Struct
    execution_id: str
    new: bool
    """False when re-entering a call started before a restart."""


@dataclass
class _Batch:
    loop: ToolsPort
    resolved: ResolvedDefinition
    """The definition as the turn resolved it when it started."""
    entered: set[str]
    """The turn's record of the calls whose tool function really ran."""


async def run_batch(loop: ToolsPort, resolved: ResolvedDefinition, entered: set[str]) -> None:
    """Run the calls of the last reply still waiting for a result; adds the
    execution id of every call whose tool function it enters to ``entered``."""
    batch = _Batch(loop, resolved, entered)
    state = loop.state
    limits = resolved.limits
    tools: dict[str, Tool] = {t.name: t for t in resolved.tools}
    admitted: list[_Call] = []
    budget = limits.max_tool_calls_per_turn - state.turn_tool_calls

    for tool_use_id in list(state.awaiting):
        use = state.tool_uses[tool_use_id]
        if tool_use_id in state.results:
            continue
        execution = state.executions.get(tool_use_id)
        tool = tools.get(use.name)
        if execution is not None:
            if execution in state.running:
                # Re-entering a call restore kept running.  It was admitted
                # under the mode of its time, which a later ChangeMode may have
                # narrowed: restore looks in every mode, so must this, or the
                # call is never finished and the turn spins on it.
                started = loop.definition.find_tool(use.name, loop.listed) if tool is None else tool
                assert started is not None, f"restore kept {execution} running without its tool"
                admitted.append(
                    _Call(
                        use=use,
                        tool=started,
                        parsed=started.parse(use.input),
                        execution_id=execution,
                        new=False,
                    )
                )
            continue
        rejection = await _admit(batch, use, tool, budget - len(admitted))
        if rejection is not None:
            await loop.commit([rejected(use.id, rejection)], cause=state.message_record)
            continue
        assert tool is not None
        admitted.append(
            _Call(
                use=use,
                tool=tool,
                parsed=tool.parse(use.input),
                execution_id=new_id("exe_"),
                new=True,
            )
        )

    starts: list[Event] = [
        ToolStarted(
            execution_id=c.execution_id,
            tool_use_id=c.use.id,
            name=c.tool.name,
            input=c.use.input,
            turn=state.turn_index,
            step=state.step,
        )
        for c in admitted
        if c.new
    ]
    if starts:
        # Each start's record id is its execution id: the call's later
        # records (its gates, its result, a child loop) name it as their cause.
        await loop.commit(
            starts,
            cause=state.message_record,
            ids=[c.execution_id for c in admitted if c.new],
        )
    await _execute(batch, admitted)


async def _admit(
    batch: _Batch,
    use: ToolUse,
    tool: Tool | None,
    budget: int,
) -> str | None:
    """None when the call may run; otherwise the model-visible reason it won't."""
    loop = batch.loop
    state = loop.state
    if tool is None:
        known = ", ".join(sorted(t.name for t in batch.resolved.tools)) or "none"
        return f"[error: there is no tool named {use.name!r}; available tools: {known}]"
    try:
        tool.parse(use.input)
    except ToolInputError as exc:
        return f"[error: {exc}]"
    if budget <= 0:
        return "[not run: the turn's tool call limit was reached]"
    policy = loop.definition.permissions.get(tool.name, tool.permission)
    verdict = decide(policy, tool.name, use.input)
    if verdict == "ask" and tool.name in state.grants:
        verdict = "allow"
    if verdict == "ask":
        allowed = state.decided.get(use.id)
        if allowed is None:
            allowed = await _ask_permission(loop, use, tool)
        verdict = "allow" if allowed else "deny"
    if verdict == "deny":
        if policy is None:
            return (
                f"[denied: no permission policy is configured for tool {tool.name}; "
                "the runtime denies it]"
            )
        return DENIED_RESULT
    return None


async def _ask_permission(loop: ToolsPort, use: ToolUse, tool: Tool) -> bool:
    gate = gates.open_permission(loop.state, use.id)
    if gate is None:
        answer = await gates.open_and_wait(
            loop, gates.permission_request(use, tool.name), cause=loop.state.message_record
        )
    else:
        answer = await loop.wait_gate(gate.gate_id)  # opened before a restart
    return bool(answer.allow)


async def _execute(batch: _Batch, calls: list[_Call]) -> None:
    if all(c.tool.concurrency == "exclusive" for c in calls):
        # Nothing may overlap: run them in order, no task group needed.
        for call in calls:
            await _run_one(batch, call)
        return
    limiter = trio.CapacityLimiter(max(1, batch.resolved.limits.max_parallel_tool_calls))
    calls_of = _Parallel(batch.loop)
    turn = calls_of.turn
    try:
        async with trio.open_nursery() as nursery:
            running: list[trio.Event] = []
            last_for_target: dict[str, trio.Event] = {}
            for call in calls:
                if call.tool.concurrency == "exclusive":
                    for done in running:
                        if not done.is_set():
                            turn.begin(done)
                            await done.wait()
                            turn.end()
                    running.clear()
                    await _run_one(batch, call)
                    continue
                done = trio.Event()
                target = call.tool.target(call.use.input)
                before = last_for_target.get(target) if target is not None else None
                if target is not None:
                    last_for_target[target] = done
                try:
                    limiter.acquire_on_behalf_of_nowait(done)
                except trio.WouldBlock:
                    turn.begin(_ANY)
                    await limiter.acquire_on_behalf_of(done)
                    turn.end()
                follower = calls_of.started(done, before)
                nursery.start_soon(
                    _run_parallel, batch, call, before, done, limiter, calls_of, follower
                )
                running.append(done)
            if calls_of.live:
                turn.begin(_ALL)
    finally:
        turn.end()


_ANY = object()
"""The turn waits for any parallel call to end (a free slot)."""
_ALL = object()
"""The turn waits for every parallel call to end."""


class _Waiter:
    """A task's part in the loop's busy count while it waits on parallel calls."""

    def __init__(self, loop: ToolsPort) -> None:
        self.loop = loop
        self.on: object = None
        """What it waits for: a call's ``done`` event, ``_ANY`` or ``_ALL``
        (None: it is not waiting)."""

    def begin(self, on: object) -> None:
        self.on = on
        self.loop.busy(-1)

    def end(self) -> None:
        """It counts itself again (idempotent)."""
        if self.on is not None:
            self.on = None
            self.loop.busy(+1)


class _Parallel:
    """The parallel calls of a batch and who waits on them.

    Each call counts itself busy; a task that only waits on calls (the turn,
    or a call queued behind another on the same target) does not, so when
    each running call waits on a person (a question) the loop is quiet, as
    with one exclusive call asking.  The call whose end lets a waiter go on
    gives it its count back before it stops counting itself: the loop never
    looks quiet between a call ending and its waiter going on.
    """

    def __init__(self, loop: ToolsPort) -> None:
        self.loop = loop
        self.turn = _Waiter(loop)
        self.live = 0
        """Calls started and not ended."""
        self.followers: dict[trio.Event, _Waiter] = {}
        """The call queued behind each call on its target."""

    def started(self, done: trio.Event, before: trio.Event | None) -> _Waiter | None:
        """A call is started (its task may not run yet): counted busy from now,
        since the turn may stop counting itself before then; returns the
        waiter of a call queued behind ``before``."""
        self.loop.busy(+1)
        self.live += 1
        if before is None:
            return None
        follower = self.followers[before] = _Waiter(self.loop)
        return follower

    def ended(self, done: trio.Event) -> None:
        """A call ended (``done`` is set): give back the count of whoever it lets
        go on, then stop counting it."""
        self.live -= 1
        follower = self.followers.pop(done, None)
        if follower is not None:
            follower.end()
        on = self.turn.on
        if on is _ANY or on is done or (on is _ALL and not self.live):
            self.turn.end()
        self.loop.busy(-1)


async def _run_parallel(
    batch: _Batch,
    call: _Call,
    before: trio.Event | None,
    done: trio.Event,
    limiter: trio.CapacityLimiter,
    calls_of: _Parallel,
    follower: _Waiter | None,
) -> None:
    # Counted busy by the turn when it started this task (``_Parallel.started``).
    try:
        if before is not None and follower is not None and not before.is_set():
            follower.begin(before)
            await before.wait()
            follower.end()
        await _run_one(batch, call)
    finally:
        if follower is not None:
            follower.end()
        limiter.release_on_behalf_of(done)
        done.set()
        calls_of.ended(done)


async def _run_one(batch: _Batch, call: _Call) -> None:
    loop = batch.loop
    limit = batch.resolved.limits.max_tool_result_bytes
    # A call started here names its tool.started record; one re-entered after
    # a restore (its record may predate record ids chosen so) names the message.
    cause = call.execution_id if call.new else loop.state.message_record
    continuation: str | None = None
    if not call.new:
        # Re-entered after a restore: a question still open is answered first,
        # and the answer becomes the call's continuation.
        gate = gates.open_question(loop.state, call.execution_id)
        if gate is not None:
            continuation = (await loop.wait_gate(gate.gate_id)).answer or ""

    async def ask(question: str, choices: tuple[str, ...] | None) -> str:
        gate = gates.question(
            execution_id=call.execution_id,
            tool_use_id=call.use.id,
            tool_name=call.tool.name,
            prompt=question,
            choices=choices,
        )
        return (await gates.open_and_wait(loop, gate, cause=cause)).answer or ""

    limits = batch.resolved.limits
    timeout = call.tool.timeout_under(limits.tool_timeout)
    started = time.perf_counter_ns()
    structured = None
    while True:
        ctx = ToolContext(
            loop=loop.id,
            execution_id=call.execution_id,
            tool_use_id=call.use.id,
            tool_name=call.tool.name,
            ask=ask,
            continuation=continuation,
            runtime=loop,
        )
        batch.entered.add(call.execution_id)
        with deadlines.timer(timeout) as deadline:
            try:
                value = await call.tool.invoke(ctx, call.parsed)
                blocks, cut = shape_result(value, limit)
                if isinstance(value, ToolOutput):
                    structured = value.structured
                disposition = "succeeded"
                if is_empty_result(blocks):
                    blocks, disposition = (Text(text=EMPTY_RESULT),), "failed"
            except Exception as exc:
                loop.log.info("tool_failed", tool=call.tool.name, error=repr(exc))
                blocks, cut = (
                    (
                        Text(
                            text=f"[error: tool {call.tool.name} failed: "
                            f"{type(exc).__name__}: {exc}]"
                        ),
                    ),
                    0,
                )
                disposition = "failed"
        if not deadline.passed:
            break
        assert timeout is not None
        events = _deadline_passed(loop, call, timeout, limits.tool_retries)
        await loop.commit(events, cause=cause)
        if not any(isinstance(e, DeadlinePassed) and e.action == "retried" for e in events):
            return
        continuation = None  # an answer given to an earlier run was used there
    await loop.commit(
        [
            ToolCompleted(
                execution_id=call.execution_id,
                tool_use_id=call.use.id,
                content=blocks,
                disposition=disposition,  # type: ignore[arg-type]
                truncated_bytes=cut,
                duration_ns=time.perf_counter_ns() - started,
                structured=structured,
            )
        ],
        cause=cause,
    )


def _deadline_passed(loop: ToolsPort, call: _Call, seconds: float, retries: int) -> list[Event]:
    """What a call cut by its deadline commits: the ``deadline.passed`` record
    and its consequence (a retry, a visible failure, or an unknown outcome)."""
    running = loop.state.running.get(call.execution_id)
    attempt = running.attempt if running is not None else 1
    tool = call.tool
    loop.log.warning(
        "tool_deadline_passed",
        tool=tool.name,
        execution=call.execution_id,
        seconds=seconds,
        attempt=attempt,
    )

    def passed(action: str) -> DeadlinePassed:
        return DeadlinePassed(
            deadline="tool",
            seconds=seconds,
            turn=loop.state.turn_index,
            ref=call.execution_id,
            attempt=attempt,
            action=action,  # type: ignore[arg-type]
        )

    # A question the call had just opened closes with it (the wait itself is
    # paused, so only a gate opened as the deadline passed can be left).
    closed: list[Event] = [
        GateCancelled(gate_id=g.gate_id, reason="interrupted")
        for g in loop.state.gates.values()
        if g.execution_id == call.execution_id
    ]
    if tool.replay_safe and attempt <= retries:
        return [*closed, passed("retried")]
    if tool.replay_safe or tool.atomic:
        text = deadline_failure(tool.name, seconds, attempts=attempt, atomic=not tool.replay_safe)
        return [
            *closed,
            passed("failed"),
            ToolCompleted(
                execution_id=call.execution_id,
                tool_use_id=call.use.id,
                content=(Text(text=text),),
                disposition="failed",
            ),
        ]
    return [
        *closed,
        passed("unknown"),
        ToolAbandoned(execution_id=call.execution_id, tool_use_id=call.use.id, reason="deadline"),
        Notice(
            code="unknown_effects",
            text=deadline_unknown(call.execution_id, tool.name, seconds),
            refs=(call.execution_id,),
        ),
    ]
