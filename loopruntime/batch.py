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

The module is one piece: its steps share one batch's plan (``_Batch``,
``_Call``) and nothing outside runs a part of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import msgspec
import trio

from journal.content import Text, ToolUse
from journal.events import (
    DeadlinePassed,
    Disposition,
    Event,
    GateCancelled,
    GateOpened,
    Notice,
    ToolAbandoned,
    ToolCompleted,
    ToolStarted,
)

from . import classifiers, deadlines, gates, hooks
from .deferred import not_loaded
from .definition import ResolvedDefinition
from .errors import ChildRejectedError, RedactedInputError
from .hooks import Hook
from .ids import new_id
from .notices import (
    DENIED_RESULT,
    EMPTY_RESULT,
    rejected,
)
from .output import OutputTool
from .overruns import overrun
from .parallel import ALL, ANY, ParallelCalls, Waiter
from .ports import ToolsPort
from .progress import Progress
from .redaction import Originals, input_digest, recovered_input, redacted_rewrite, scrub
from .results import ToolOutput, is_empty_result, shape_result
from .tools import (
    Form,
    Middleware,
    Tool,
    ToolContext,
    ToolInputError,
    call_tool,
    decide,
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
    input: dict[str, Any]
    """The real input (``use.input`` is what the journal holds: redacted, for
    a tool that redacts)."""
    decided: list[Event] = field(default_factory=list)
    """The before_tool hooks' rewrites, committed with the call's start."""


@dataclass
class _Batch:
    loop: ToolsPort
    resolved: ResolvedDefinition
    """The definition as the turn resolved it when it started."""
    entered: set[str]
    """The turn's record of the calls whose tool function really ran."""
    originals: Originals
    """The real inputs and results of redacted calls (``redaction``)."""
    before: list[Hook] = field(default_factory=list)
    after: list[Hook] = field(default_factory=list)
    middleware: tuple[Middleware, ...] = ()


@dataclass
class _Refused:
    """A call that will not run: what the model reads, and the records that
    decided it (committed with its rejection)."""

    text: str
    events: list[Event] = field(default_factory=list)


async def run_batch(
    loop: ToolsPort,
    resolved: ResolvedDefinition,
    entered: set[str],
    originals: Originals | None = None,
) -> None:
    """Run the calls of the last reply still waiting for a result; adds the
    execution id of every call whose tool function it enters to ``entered``.
    ``originals``: the real inputs of redacted calls, and where their real
    results go (the model is shown them while the loop lives)."""
    definition = loop.definition
    batch = _Batch(
        loop,
        resolved,
        entered,
        originals if originals is not None else Originals(),
        middleware=tuple(definition.tool_middleware),
    )
    for h in definition.hooks:
        if h.point == "before_tool":
            batch.before.append(h)
        elif h.point == "after_tool":
            batch.after.append(h)
    admitted = await _admit_all(batch)
    await _start(batch, admitted)
    await _execute(batch, admitted)


async def _admit_all(batch: _Batch) -> list[_Call]:
    """Step 1: the calls that run, in call order (re-entered ones included);
    every other call's rejection is committed on the way."""
    state = batch.loop.state
    tools: dict[str, Tool] = {t.name: t for t in batch.resolved.tools}
    admitted: list[_Call] = []
    budget = batch.resolved.limits.max_tool_calls_per_turn - state.turn_tool_calls
    for tool_use_id in list(state.awaiting):
        use = state.tool_uses[tool_use_id]
        if tool_use_id in state.results:
            continue
        execution = state.executions.get(tool_use_id)
        tool = tools.get(use.name)
        if execution is not None:
            if execution in state.running:
                call = await _reentered(batch, use, execution, tool)
                if call is not None:
                    admitted.append(call)
            continue
        call = await _admit_new(batch, use, tool, budget - len(admitted))
        if call is not None:
            admitted.append(call)
    return admitted


async def _reentered(
    batch: _Batch, use: ToolUse, execution: str, tool: Tool | None
) -> _Call | None:
    """A call restore kept running, to enter again (None: its redacted input
    is gone, and its outcome was committed as unknown)."""
    loop = batch.loop
    # It was admitted under the mode of its time, which a later ChangeMode may
    # have narrowed: restore looks in every mode, so must this, or the call is
    # never finished and the turn spins on it.
    started = loop.definition.find_tool(use.name, loop.listed) if tool is None else tool
    assert started is not None, f"restore kept {execution} running without its tool"
    real = batch.originals.inputs.get(use.id)
    if real is None and started.redact_input is not None:
        real = await _recover(batch, started, execution, use)
        if real is None:
            return None
    real = real if real is not None else use.input
    return _Call(
        use=use,
        tool=started,
        parsed=started.parse(real),
        execution_id=execution,
        new=False,
        input=real,
    )


async def _admit_new(batch: _Batch, use: ToolUse, tool: Tool | None, budget: int) -> _Call | None:
    """A call not started yet: admitted (the ``before_tool`` hooks' rewrite
    applied), or refused with its rejection committed (None)."""
    loop, state = batch.loop, batch.loop.state
    real = batch.originals.inputs.get(use.id)
    if real is None and tool is not None and tool.redact_input is not None:
        # Redacted, and the loop restarted before it ran: the real input is gone.
        await loop.commit(
            [rejected(use.id, _REDACTED_NOT_RUN.format(tool=tool.name))],
            cause=state.message_record,
        )
        return None
    real = real if real is not None else use.input
    refusal = await _admit(batch, use, real, tool, budget)
    decided: list[Event] = []
    if refusal is None and batch.before:
        assert tool is not None
        verdict = await hooks.before_tool(
            batch.before,
            hooks.BeforeTool(
                loop=loop.id,
                turn=state.turn_index,
                tool=tool.name,
                tool_use_id=use.id,
                input=real,
            ),
            tool,
            batch.resolved.limits.hook_timeout,
        )
        if verdict.denial is not None:
            refusal = _Refused(verdict.denial, verdict.events)
        elif verdict.events:
            decided, real = verdict.events, verdict.input
            journaled = real
            if tool.redact_input is not None:
                # The hook saw the real input; the journal keeps the redacted forms.
                decided = [redacted_rewrite(e, tool.redact_input) for e in decided]
                journaled = tool.redact_input(real)
                batch.originals.inputs[use.id] = real
            use = msgspec.structs.replace(use, input=journaled)
    if refusal is not None:
        await loop.commit(
            [*refusal.events, rejected(use.id, refusal.text)], cause=state.message_record
        )
        return None
    assert tool is not None
    return _Call(
        use=use,
        tool=tool,
        parsed=tool.parse(real),
        execution_id=new_id("exe_"),
        new=True,
        input=real,
        decided=decided,
    )


async def _start(batch: _Batch, admitted: list[_Call]) -> None:
    """Step 2: one commit of every new call's ``tool.started`` (after the
    hooks' rewrites), before any runs."""
    state = batch.loop.state
    starts: list[Event] = []
    ids: list[str | None] = []
    for c in admitted:
        if not c.new:
            continue
        # A hook's rewrite comes first: the fold gives the model's call the
        # new input before the start that runs with it.
        starts += c.decided
        ids += [None] * len(c.decided)
        starts.append(
            ToolStarted(
                execution_id=c.execution_id,
                tool_use_id=c.use.id,
                name=c.tool.name,
                input=c.use.input,
                turn=state.turn_index,
                step=state.step,
                input_digest=input_digest(c.input) if c.tool.redact_input is not None else "",
            )
        )
        ids.append(c.execution_id)
    if starts:
        # Each start's record id is its execution id: the call's later
        # records (its gates, its result, a child loop) name it as their cause.
        await batch.loop.commit(starts, cause=state.message_record, ids=ids)


_REDACTED_NOT_RUN = (
    "[not run: the input of this {tool} call was redacted and the loop restarted before "
    "it ran, so its real input is gone; call the tool again]"
)


async def _recover(
    batch: _Batch, tool: Tool, execution: str, use: ToolUse
) -> dict[str, Any] | None:
    """The real input of a redacted call re-entered after a restore, from the
    host; None when there is none, after committing the call's outcome as
    unknown with a notice saying why (the host resolves it)."""
    loop = batch.loop
    started = loop.state.running[execution]
    try:
        real = recovered_input(
            tool.name, tool.recover_input, started.input_digest, execution, use.input
        )
    except RedactedInputError as exc:
        loop.log.warning("redacted_input_unavailable", tool=tool.name, execution=execution)
        await loop.commit(
            [
                ToolAbandoned(
                    execution_id=execution, tool_use_id=use.id, reason="restore_unavailable"
                ),
                Notice(code="redacted_input_unavailable", text=str(exc), refs=(execution,)),
            ],
            cause=loop.state.message_record,
        )
        return None
    batch.originals.inputs[use.id] = real
    return real


async def _admit(
    batch: _Batch,
    use: ToolUse,
    real: dict[str, Any],
    tool: Tool | None,
    budget: int,
) -> _Refused | None:
    """None when the call may run; otherwise why it won't.  ``real`` is the
    input the tool would run with; the permission policy and the gate see
    ``use.input``, the journal's (redacted) form."""
    loop = batch.loop
    state = loop.state
    if tool is None:
        known = ", ".join(sorted(t.name for t in batch.resolved.tools)) or "none"
        return _Refused(f"[error: there is no tool named {use.name!r}; available tools: {known}]")
    if tool.name in batch.resolved.deferred and tool.name not in state.loaded:
        return _Refused(not_loaded(tool.name))
    try:
        tool.parse(real)
    except ToolInputError as exc:
        return _Refused(f"[error: {scrub(str(exc), real, use.input)}]")
    if budget <= 0:
        return _Refused("[not run: the turn's tool call limit was reached]")
    policy = loop.definition.permissions.get(tool.name, tool.permission)
    verdict = decide(policy, tool.name, use.input)
    if verdict == "ask" and tool.name in state.grants:
        verdict = "allow"
    if verdict == "ask":
        allowed = state.decided.get(use.id)
        if allowed is None:
            asked = await loop.run_outside(_ask_permission, batch, use, tool)
            if isinstance(asked, _Refused):
                return asked
            allowed = asked
        verdict = "allow" if allowed else "deny"
    if verdict == "deny":
        if policy is None:
            return _Refused(
                f"[denied: no permission policy is configured for tool {tool.name}; "
                "the runtime denies it]"
            )
        return _Refused(DENIED_RESULT)
    return None


async def _ask_permission(batch: _Batch, use: ToolUse, tool: Tool) -> bool | _Refused:
    """Whether a person (or a classifier, before one is asked) allows the
    call; a classifier's denial is returned as the refusal, to be committed
    with the call's rejection."""
    loop = batch.loop
    cause = loop.state.message_record
    gate = gates.open_permission(loop.state, use.id)
    if gate is not None:
        return bool((await loop.wait_gate(gate.gate_id)).allow)  # opened before a restart
    reviews: list[Event] = []
    if loop.definition.classifiers:
        request = classifiers.PermissionRequest(
            loop=loop.id, tool=tool.name, tool_use_id=use.id, input=MappingProxyType(use.input)
        )
        found = await classifiers.review(
            loop.definition.classifiers, request, batch.resolved.limits.hook_timeout
        )
        last = found[-1]
        if last.verdict == "allow":
            await loop.commit(found, cause=cause)
            return True
        if last.verdict == "deny":
            return _Refused(f"[denied by {last.classifier}: {last.reason}]", [*found])
        reviews = [*found]
    # The gate opens in the same commit as the reviews that left it to a person.
    opened = gates.permission_request(use, tool.name)
    await loop.commit([*reviews, opened], cause=cause)
    return bool((await loop.wait_gate(opened.gate_id)).allow)


async def _execute(batch: _Batch, calls: list[_Call]) -> None:
    if all(c.tool.concurrency == "exclusive" for c in calls):
        # Nothing may overlap: run them in order, no task group needed.
        for call in calls:
            await _run_one(batch, call)
        return
    limiter = trio.CapacityLimiter(max(1, batch.resolved.limits.max_parallel_tool_calls))
    calls_of = ParallelCalls(batch.loop)
    turn = calls_of.turn
    try:
        async with batch.loop.outside(), trio.open_nursery() as nursery:
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
                    await batch.loop.run_working(_run_one, batch, call)
                    continue
                done = trio.Event()
                target = call.tool.target(call.input)
                before = last_for_target.get(target) if target is not None else None
                if target is not None:
                    last_for_target[target] = done
                try:
                    limiter.acquire_on_behalf_of_nowait(done)
                except trio.WouldBlock:
                    turn.begin(ANY)
                    await limiter.acquire_on_behalf_of(done)
                    turn.end()
                follower = calls_of.started(done, before)
                nursery.start_soon(
                    _run_parallel, batch, call, before, done, limiter, calls_of, follower
                )
                running.append(done)
            if calls_of.live:
                turn.begin(ALL)
    finally:
        turn.end()


async def _run_parallel(
    batch: _Batch,
    call: _Call,
    before: trio.Event | None,
    done: trio.Event,
    limiter: trio.CapacityLimiter,
    calls_of: ParallelCalls,
    follower: Waiter | None,
) -> None:
    # Counted busy by the turn when it started this task (``ParallelCalls.started``).
    try:
        if before is not None and follower is not None and not before.is_set():
            follower.begin(before)
            await before.wait()
            follower.end()
        await batch.loop.run_working(_run_one, batch, call)
    finally:
        if follower is not None:
            follower.end()
        limiter.release_on_behalf_of(done)
        done.set()
        calls_of.ended(done)


class _Questions:
    """The questions one call asks (its ``ToolContext.ask``)."""

    __slots__ = ("call", "cause", "loop", "reattach")

    def __init__(
        self, loop: ToolsPort, call: _Call, cause: str | None, reattach: GateOpened | None
    ) -> None:
        self.loop = loop
        self.call = call
        self.cause = cause
        self.reattach = reattach
        """A form gate a restore found open: the tool's first question asks it again."""

    async def ask(
        self,
        question: str,
        choices: tuple[str, ...] | None,
        *,
        form: Form | None = None,
        url: str | None = None,
        needs_value: bool = False,
    ) -> str:
        loop, call = self.loop, self.call
        gate = gates.question(
            execution_id=call.execution_id,
            tool_use_id=call.use.id,
            tool_name=call.tool.name,
            prompt=question,
            choices=choices,
            form=form.schema if form is not None else None,
            url=url,
            needs_value=needs_value,
        )
        waiting, self.reattach = self.reattach, None
        if waiting is not None:
            if form is not None and (waiting.prompt, waiting.form) == (question, gate.form):
                # The form asked before the restart, asked again: it waits on.
                gate = waiting
            else:
                await loop.commit(
                    [GateCancelled(gate_id=waiting.gate_id, reason="restore_unavailable")],
                    cause=self.cause,
                )
        if form is not None:
            loop.forms.expect(gate.gate_id, form.type)
        try:
            if gate is waiting:
                return (await loop.wait_gate(gate.gate_id)).answer or ""
            return (await gates.open_and_wait(loop, gate, cause=self.cause)).answer or ""
        finally:
            if form is not None:
                loop.forms.forget(gate.gate_id)


@dataclass
class _Result:
    """What a call's run produced, as the journal will hold it."""

    blocks: tuple[Any, ...]
    cut: int
    disposition: Disposition
    structured: Any = None
    shown: Any = None
    """The real result the model is shown (a tool that redacts its output)."""
    duration: int = 0


async def _run_one(batch: _Batch, call: _Call) -> None:
    """Steps 3 and 4 for one call: run it (again, after a passed deadline,
    when it may), then settle its ``tool.completed``."""
    loop = batch.loop
    # A call started here names its tool.started record; one re-entered after
    # a restore (its record may predate record ids chosen so) names the message.
    cause = call.execution_id if call.new else loop.state.message_record
    continuation: str | None = None
    reattach: GateOpened | None = None
    if not call.new:
        # Re-entered after a restore: a question still open is answered first,
        # and the answer becomes the call's continuation.  A form is re-entered
        # at once instead: its answer can only be checked once the tool has
        # named the form's type again, by asking it.
        gate = gates.open_question(loop.state, call.execution_id)
        if gate is not None and gate.form is not None:
            reattach = gate
        elif gate is not None:
            continuation = (await loop.wait_gate(gate.gate_id)).answer or ""
    questions = _Questions(loop, call, cause, reattach)
    limits = batch.resolved.limits
    progress = Progress(
        loop,
        execution_id=call.execution_id,
        tool_use_id=call.use.id,
        tool_name=call.tool.name,
        per_second=limits.max_progress_per_second,
        limit=limits.max_progress_bytes,
        cause=cause,
    )
    try:
        result = await _run_under_deadline(
            batch, call, questions, continuation, cause, progress.report
        )
    except BaseException:
        progress.drop()
        raise
    if result is None:
        progress.drop()  # cut by its deadline: its outcome is already committed
        return
    await progress.end()
    await _settle(batch, call, result, cause)


async def _run_under_deadline(
    batch: _Batch,
    call: _Call,
    questions: _Questions,
    continuation: str | None,
    cause: str | None,
    report: Callable[[str, float | None], None],
) -> _Result | None:
    """Run the tool under its deadline until a run ends in time (its result)
    or the deadline's consequence is final (committed; None)."""
    loop = batch.loop
    limits = batch.resolved.limits
    timeout = call.tool.timeout_under(limits.tool_timeout)
    # The runtime's final-answer tool is no function of the host's to wrap.
    middleware = () if isinstance(call.tool, OutputTool) else batch.middleware
    started = time.perf_counter_ns()
    while True:
        ctx = ToolContext(
            loop=loop.id,
            execution_id=call.execution_id,
            tool_use_id=call.use.id,
            tool_name=call.tool.name,
            ask=questions.ask,
            continuation=continuation,
            runtime=loop,
            input=call.input,
            report=report,
        )
        batch.entered.add(call.execution_id)
        with deadlines.timer(timeout) as deadline:
            result = await _run_tool(batch, call, ctx, middleware)
        if not deadline.passed:
            result.duration = time.perf_counter_ns() - started
            return result
        assert timeout is not None
        events = overrun(
            loop, call.tool, call.execution_id, call.use.id, timeout, limits.tool_retries
        )
        await loop.commit(events, cause=cause)
        if not any(isinstance(e, DeadlinePassed) and e.action == "retried" for e in events):
            return None
        continuation = None  # an answer given to an earlier run was used there


async def _run_tool(
    batch: _Batch, call: _Call, ctx: ToolContext, middleware: tuple[Middleware, ...]
) -> _Result:
    """One run of the tool function: its result shaped for the journal, or
    its failure as the model reads it."""
    loop = batch.loop
    limit = batch.resolved.limits.max_tool_result_bytes
    try:
        value = await loop.run_outside(call_tool, call.tool, ctx, call.parsed, middleware)
        shown = None
        if call.tool.redact_output is not None:
            # The model is shown the real result; the journal the redacted one.
            shown, _ = shape_result(value, limit)
            value = call.tool.redact_output(value)
        blocks, cut = shape_result(value, limit)
        structured = value.structured if isinstance(value, ToolOutput) else None
        if is_empty_result(blocks):
            return _Result((Text(text=EMPTY_RESULT),), cut, "failed", structured)
        return _Result(blocks, cut, "succeeded", structured, shown)
    except ChildRejectedError as exc:  # never ran: the model may choose another worker
        return _Result((Text(text=f"[rejected: {exc}]"),), 0, "rejected")
    except Exception as exc:
        error = scrub(f"{type(exc).__name__}: {exc}", call.input, call.use.input)
        loop.log.info("tool_failed", tool=call.tool.name, error=error)
        return _Result((Text(text=f"[error: tool {call.tool.name} failed: {error}]"),), 0, "failed")


async def _settle(batch: _Batch, call: _Call, result: _Result, cause: str | None) -> None:
    """Step 4: the ``after_tool`` hooks, then one commit of the call's
    ``tool.completed`` (with its gates still open, closed)."""
    loop = batch.loop
    limits = batch.resolved.limits
    decided: list[Event] = []
    if batch.after:
        verdict = await hooks.after_tool(
            batch.after,
            hooks.AfterTool(
                loop=loop.id,
                turn=loop.state.turn_index,
                tool=call.tool.name,
                tool_use_id=call.use.id,
                execution_id=call.execution_id,
                input=MappingProxyType(call.use.input),
                content=result.blocks,
                is_error=result.disposition != "succeeded",
            ),
            limits.max_tool_result_bytes,
            limits.hook_timeout,
        )
        if verdict.changed:
            # The tool's own result (and structured value) is not kept; the
            # model reads the hook's result, as the journal does.
            decided = verdict.events
            disposition: Disposition = "failed" if verdict.is_error else "succeeded"
            blocks = verdict.content
            if is_empty_result(blocks):
                blocks, disposition = (Text(text=EMPTY_RESULT),), "failed"
            result = _Result(blocks, verdict.cut, disposition, duration=result.duration)
    if result.shown is not None:
        batch.originals.results[call.use.id] = result.shown
    # A gate of this call still open (a restored form the re-entered tool
    # never asked again) closes with it: nobody is left to take its answer.
    closed: list[Event] = [
        GateCancelled(gate_id=g.gate_id, reason="restore_unavailable")
        for g in loop.state.gates.values()
        if g.execution_id == call.execution_id
    ]
    await loop.commit(
        [
            *closed,
            *decided,
            ToolCompleted(
                execution_id=call.execution_id,
                tool_use_id=call.use.id,
                content=result.blocks,
                disposition=result.disposition,
                truncated_bytes=result.cut,
                duration_ns=result.duration,
                structured=result.structured,
            ),
        ],
        cause=cause,
    )
