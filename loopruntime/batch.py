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

The batch is planned from loop state, so it also resumes a batch that a
restart cut short: calls with results are skipped, open gates are waited on
again, and restored calls (replay-safe, or resumable with an answered
question) are re-entered under their original execution id.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
import trio

from journal.content import Text, ToolUse
from journal.events import Event, GateOpened, GateResolved, ToolCompleted, ToolStarted

from .ids import new_id
from .notices import DENIED_RESULT
from .tools import Tool, ToolContext, ToolInputError, decide, shape_result

if TYPE_CHECKING:
    from .turn import TurnRunner

__all__ = ["run_batch"]


@dataclass
class _Call:
    use: ToolUse
    tool: Tool
    parsed: msgspec.Struct
    execution_id: str
    new: bool
    """False when re-entering a call started before a restart."""


def _rejected(use: ToolUse, text: str) -> ToolCompleted:
    return ToolCompleted(
        execution_id="",
        tool_use_id=use.id,
        content=(Text(text=text),),
        disposition="rejected",
    )


async def run_batch(turn: TurnRunner) -> None:
    loop = turn.loop
    state = loop.state
    limits = turn.resolved.limits
    tools: dict[str, Tool] = {t.name: t for t in turn.resolved.tools}
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
                started = turn.loop.definition.find_tool(use.name) if tool is None else tool
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
        rejection = await _admit(turn, use, tool, budget - len(admitted))
        if rejection is not None:
            await loop.commit([_rejected(use, rejection)])
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
        await loop.commit(starts)
    await _execute(turn, admitted)


async def _admit(
    turn: TurnRunner,
    use: ToolUse,
    tool: Tool | None,
    budget: int,
) -> str | None:
    """None when the call may run; otherwise the model-visible reason it won't."""
    state = turn.loop.state
    if tool is None:
        known = ", ".join(sorted(t.name for t in turn.resolved.tools)) or "none"
        return f"[error: there is no tool named {use.name!r}; available tools: {known}]"
    try:
        tool.parse(use.input)
    except ToolInputError as exc:
        return f"[error: {exc}]"
    if budget <= 0:
        return "[not run: the turn's tool call limit was reached]"
    policy = turn.loop.definition.permissions.get(tool.name, tool.permission)
    verdict = decide(policy, tool.name, use.input)
    if verdict == "ask" and tool.name in state.grants:
        verdict = "allow"
    if verdict == "ask":
        allowed = state.decided.get(use.id)
        if allowed is None:
            allowed = await _ask_permission(turn, use, tool)
        verdict = "allow" if allowed else "deny"
    if verdict == "deny":
        if policy is None:
            return (
                f"[denied: no permission policy is configured for tool {tool.name}; "
                "the runtime denies it]"
            )
        return DENIED_RESULT
    return None


async def _ask_permission(turn: TurnRunner, use: ToolUse, tool: Tool) -> bool:
    loop = turn.loop
    gate = next(
        (
            g
            for g in loop.state.gates.values()
            if g.kind == "permission" and g.tool_use_id == use.id
        ),
        None,
    )
    if gate is None:
        gate = GateOpened(
            gate_id=new_id("gate_"),
            kind="permission",
            execution_id="",
            tool_use_id=use.id,
            tool_name=tool.name,
            prompt=f"Allow {tool.name}?",
            preview={"tool": tool.name, "input": use.input},
        )
        await loop.commit([gate])
    return bool((await _wait_gate(turn, gate.gate_id)).allow)


async def _execute(turn: TurnRunner, calls: list[_Call]) -> None:
    if all(c.tool.concurrency == "exclusive" for c in calls):
        # Nothing may overlap: run them in order, no task group needed.
        for call in calls:
            await _run_one(turn, call)
        return
    limiter = trio.CapacityLimiter(max(1, turn.resolved.limits.max_parallel_tool_calls))
    async with trio.open_nursery() as nursery:
        running: list[trio.Event] = []
        last_for_target: dict[str, trio.Event] = {}
        for call in calls:
            if call.tool.concurrency == "exclusive":
                for done in running:
                    await done.wait()
                running.clear()
                await _run_one(turn, call)
                continue
            done = trio.Event()
            target = call.tool.target(call.use.input)
            before = last_for_target.get(target) if target is not None else None
            if target is not None:
                last_for_target[target] = done
            await limiter.acquire_on_behalf_of(done)
            nursery.start_soon(_run_parallel, turn, call, before, done, limiter)
            running.append(done)


async def _run_parallel(
    turn: TurnRunner,
    call: _Call,
    before: trio.Event | None,
    done: trio.Event,
    limiter: trio.CapacityLimiter,
) -> None:
    turn.loop.busy(+1)
    try:
        if before is not None:
            await before.wait()
        await _run_one(turn, call)
    finally:
        limiter.release_on_behalf_of(done)
        done.set()
        turn.loop.busy(-1)


async def _run_one(turn: TurnRunner, call: _Call) -> None:
    loop = turn.loop
    limit = turn.resolved.limits.max_tool_result_bytes
    continuation: str | None = None
    if not call.new:
        # Re-entered after a restore: a question still open is answered first,
        # and the answer becomes the call's continuation.
        gate = next(
            (
                g
                for g in loop.state.gates.values()
                if g.kind == "user_input" and g.execution_id == call.execution_id
            ),
            None,
        )
        if gate is not None:
            continuation = (await _wait_gate(turn, gate.gate_id)).answer or ""

    async def ask(question: str, choices: tuple[str, ...] | None) -> str:
        gate = GateOpened(
            gate_id=new_id("gate_"),
            kind="user_input",
            execution_id=call.execution_id,
            tool_use_id=call.use.id,
            tool_name=call.tool.name,
            prompt=question,
            choices=choices,
        )
        # Durable before anyone can answer: the id only becomes known through
        # the committed record.
        await loop.commit([gate])
        return (await _wait_gate(turn, gate.gate_id)).answer or ""

    ctx = ToolContext(
        loop=loop.id,
        execution_id=call.execution_id,
        tool_use_id=call.use.id,
        tool_name=call.tool.name,
        ask=ask,
        continuation=continuation,
        runtime=loop,
    )
    started = time.perf_counter_ns()
    turn.entered.add(call.execution_id)
    try:
        value = await call.tool.invoke(ctx, call.parsed)
        blocks, cut = shape_result(value, limit)
        disposition = "succeeded"
    except Exception as exc:
        loop.log.info("tool_failed", tool=call.tool.name, error=repr(exc))
        blocks, cut = (
            (Text(text=f"[error: tool {call.tool.name} failed: {type(exc).__name__}: {exc}]"),),
            0,
        )
        disposition = "failed"
    await loop.commit(
        [
            ToolCompleted(
                execution_id=call.execution_id,
                tool_use_id=call.use.id,
                content=blocks,
                disposition=disposition,  # type: ignore[arg-type]
                truncated_bytes=cut,
                duration_ns=time.perf_counter_ns() - started,
            )
        ]
    )


async def _wait_gate(turn: TurnRunner, gate_id: str) -> GateResolved:
    """Wait for a person to close a gate; the loop counts as quiet meanwhile."""
    loop = turn.loop
    waiter = loop.gate_waiter(gate_id)
    loop.parked()
    loop.busy(-1)
    try:
        return await waiter.wait()
    finally:
        loop.busy(+1)
        loop.forget_gate(gate_id)
