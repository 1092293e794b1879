"""Tool batches, permissions, user-input gates, interrupts and steering."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from journal import open_journal
from journal.content import Text, ToolResult
from journal.events import (
    GateCancelled,
    GateOpened,
    ToolAbandoned,
    ToolCompleted,
    ToolStarted,
    TurnEnded,
)
from loopruntime import (
    GateMismatchError,
    InvalidAnswerError,
    Limits,
    LoopDefinition,
    LoopStatus,
    OutsideToolCallError,
    ToolContext,
    ask_user,
    ask_user_tool,
    tool,
)
from loopruntime.context import unanswered_tool_uses
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.notices import (
    DENIED_RESULT,
    INTERRUPTED_TOOL_RESULT,
    TRUNCATED_TOOL_CALL_RESULT,
)
from session import Session
from session.replay import check
from tests.support.loops import events_of, squash, tags


@tool(permission="allow")
async def add(ctx: ToolContext, *, a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


def result_texts(request: ModelRequest) -> list[str]:
    """Texts of the tool results in the last user message of a request."""
    last = request.messages[-1]
    return [
        c.text
        for b in last.blocks
        if isinstance(b, ToolResult)
        for c in b.content
        if isinstance(c, Text)
    ]


async def run(definition: LoopDefinition, text: str = "go") -> tuple[Any, str, list[str]]:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit(text)
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        report = await check(journal, s.id)
        assert report.ok, report.summary()
        return state, s.id, squash(await tags(journal, s.id))


async def test_tool_batch_golden_sequence_and_schema() -> None:
    model = ScriptedModel(
        [
            Reply(text="adding", tool_calls=[ToolCall(name="add", input={"a": 2, "b": 3})]),
            Reply(text="5"),
        ]
    )
    state, _, seq = await run(LoopDefinition(name="t", model=model, tools=[add]))
    assert seq == [
        "loop.started",
        "loop.configured",
        "input.queued",
        "turn.started",
        "model.call_started",
        "model.output",
        "model.message_committed",
        "context.measured",
        "tool.started",
        "tool.completed",
        "model.call_started",
        "model.output",
        "model.message_committed",
        "context.measured",
        "turn.ended",
    ]
    assert result_texts(model.requests[1]) == ["5"]
    schema = model.requests[0].tools[0]
    assert schema.name == "add" and schema.description == "Add two integers."
    assert schema.input_schema["type"] == "object"
    assert set(schema.input_schema["properties"]) == {"a", "b"}
    assert schema.input_schema["required"] == ["a", "b"]
    assert unanswered_tool_uses(state.messages) == []


class Query(msgspec.Struct):
    text: str
    limit: int = 3


@tool(permission="allow")
async def search(ctx: ToolContext, query: Query) -> list[str]:
    """Search for something."""
    return [query.text] * query.limit


@tool(permission="allow")
async def explode(ctx: ToolContext) -> str:
    """Always fails."""
    raise RuntimeError("kaboom")


class Opaque:
    pass


@tool(permission="allow")
async def opaque(ctx: ToolContext) -> Any:
    """Returns something that cannot be shown."""
    return Opaque()


@tool(permission="allow")
async def huge(ctx: ToolContext) -> str:
    """Returns 10 MB."""
    return "y" * 10_000_000


async def test_bad_tool_calls_become_model_visible_results() -> None:
    calls = [
        ToolCall(name="add", raw_json='{"a": 1, "b":'),  # malformed JSON
        ToolCall(name="nope", input={}),  # unknown tool
        ToolCall(name="add", input={"a": "one", "b": 2}),  # wrong type
        ToolCall(name="explode"),  # raises
        ToolCall(name="opaque"),  # returns a non-string it cannot show
        ToolCall(name="huge"),  # 10 MB
        ToolCall(name="search", input={"text": "q", "limit": 2}),  # one Struct input
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="done")])
    d = LoopDefinition(
        name="t",
        model=model,
        tools=[add, explode, opaque, huge, search],
        limits=Limits(max_tool_result_bytes=1000),
    )
    state, _, _ = await run(d)
    texts = result_texts(model.requests[1])
    assert "not valid JSON" in texts[0]
    assert "no tool named 'nope'" in texts[1]
    assert "invalid input for tool add" in texts[2]
    assert "RuntimeError: kaboom" in texts[3]
    assert "cannot be shown" in texts[4]
    assert texts[5].endswith("[truncated: tool output exceeded 1000 bytes]")
    assert len(texts[5].encode()) < 1100
    assert texts[6] == '["q","q"]'
    assert state.last_outcome == "completed"
    assert unanswered_tool_uses(state.messages) == []


async def test_concurrency_rules(autojump_clock: trio.abc.Clock) -> None:
    spans: dict[str, tuple[float, float]] = {}

    async def work(name: str, seconds: float) -> str:
        start = trio.current_time()
        await trio.sleep(seconds)
        spans[name] = (start, trio.current_time())
        return name

    @tool(permission="allow", concurrency="parallel", write_target=lambda i: i.get("path"))
    async def write(ctx: ToolContext, *, name: str, path: str | None = None) -> str:
        """Parallel-safe, except on the same path."""
        return await work(name, 1.0)

    @tool(permission="allow")
    async def barrier(ctx: ToolContext, *, name: str) -> str:
        """Exclusive."""
        return await work(name, 1.0)

    calls = [
        ToolCall(name="write", input={"name": "p1", "path": "a"}),
        ToolCall(name="write", input={"name": "p2", "path": "b"}),
        ToolCall(name="write", input={"name": "p3", "path": "a"}),
        ToolCall(name="write", input={"name": "p4"}),
        ToolCall(name="barrier", input={"name": "x"}),
        ToolCall(name="write", input={"name": "p5"}),
        ToolCall(name="write", input={"name": "p6"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="ok")])
    d = LoopDefinition(
        name="t", model=model, tools=[write, barrier], limits=Limits(max_parallel_tool_calls=2)
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
        started = await events_of(journal, s.id, ToolStarted)
        seq = await tags(journal, s.id)

    def overlap(a: str, b: str) -> bool:
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    # every tool.started is committed before any completion
    assert seq.index("tool.completed") > max(i for i, t in enumerate(seq) if t == "tool.started")
    assert len(started) == 7
    assert overlap("p1", "p2")  # different targets run together
    assert not overlap("p1", "p3") and spans["p3"][0] >= spans["p1"][1]  # same target, in order
    # never more than two at once
    for t in {s for span in spans.values() for s in span}:
        assert sum(1 for a, b in spans.values() if a <= t < b) <= 2
    # the exclusive call runs alone, after everything before it and before everything after
    for name in ("p1", "p2", "p3", "p4", "p5", "p6"):
        assert not overlap("x", name)
    assert spans["x"][0] >= max(spans[n][1] for n in ("p1", "p2", "p3", "p4"))
    assert spans["x"][1] <= min(spans[n][0] for n in ("p5", "p6"))
    # results go back in call order
    assert result_texts(model.requests[1]) == ["p1", "p2", "p3", "p4", "x", "p5", "p6"]


@tool(permission="ask")
async def rm(ctx: ToolContext, *, path: str) -> str:
    """Remove a file (needs approval)."""
    return f"removed {path}"


@tool
async def unpoliced(ctx: ToolContext) -> str:
    """A tool nobody gave a policy."""
    return "ran"


async def test_permission_gate_session_grant_applies_to_next_call_in_batch() -> None:
    calls = [ToolCall(name="rm", input={"path": "a"}), ToolCall(name="rm", input={"path": "b"})]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="done")])
    d = LoopDefinition(name="t", model=model, tools=[rm])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("clean up")
            await s.wait_idle()
            state = await s.snapshot()
            assert state.status is LoopStatus.AWAITING_GATE
            [gate] = state.open_gates
            assert gate.kind == "permission" and gate.preview == {
                "tool": "rm",
                "input": {"path": "a"},
            }
            with pytest.raises(GateMismatchError):
                await s.answer(gate.gate_id, "yes")  # wrong kind
            with pytest.raises(GateMismatchError):
                await s.decide("gate_nope", allow=True)
            await s.decide(gate.gate_id, allow=True, scope="session")
            await s.wait_idle()
            with pytest.raises(GateMismatchError):
                await s.decide(gate.gate_id, allow=True)  # closed
            state = await s.snapshot()
            await s.verify()
        gates = await events_of(journal, s.id, GateOpened)
        seq = squash(await tags(journal, s.id))
    assert len(gates) == 1  # the grant covered the second call
    assert state.grants == ["rm"]
    assert result_texts(model.requests[1]) == ["removed a", "removed b"]
    assert seq[7:14] == [
        "context.measured",
        "gate.opened",
        "gate.resolved",
        "tool.started",
        "tool.started",
        "tool.completed",
        "tool.completed",
    ]


async def test_denied_and_unpoliced_calls_are_model_visible() -> None:
    calls = [ToolCall(name="rm", input={"path": "a"}), ToolCall(name="unpoliced")]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="ok")])
    d = LoopDefinition(name="t", model=model, tools=[rm, unpoliced])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
            await s.decide(gate.gate_id, allow=False)
            await s.wait_idle()
        completed = await events_of(journal, s.id, ToolCompleted)
        assert await events_of(journal, s.id, ToolStarted) == []
    texts = result_texts(model.requests[1])
    assert "denied by the user" in texts[0]
    assert "no permission policy" in texts[1]
    assert [c.disposition for c in completed] == ["rejected", "rejected"]


@tool(permission="allow")
async def pick(ctx: ToolContext, *, prompt: str) -> str:
    """Ask the user to pick a colour."""
    answer = await ctx.ask_user(prompt, choices=["red", "blue"])
    return f"picked {answer}"


async def test_user_input_gate() -> None:
    model = ScriptedModel(
        [Reply(tool_calls=[ToolCall(name="pick", input={"prompt": "colour?"})]), Reply(text="ok")]
    )
    d = LoopDefinition(name="t", model=model, tools=[pick])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
            assert gate.kind == "user_input" and gate.choices == ("red", "blue")
            before = await tags(journal, s.id)
            with pytest.raises(InvalidAnswerError):
                await s.answer(gate.gate_id, "green")
            with pytest.raises(InvalidAnswerError):
                await s.answer(gate.gate_id, 42)  # type: ignore[arg-type]
            with pytest.raises(GateMismatchError):
                await s.decide(gate.gate_id, allow=True)
            assert await tags(journal, s.id) == before  # nothing committed
            assert (await s.snapshot()).open_gates == [gate]  # still open
            await s.answer(gate.gate_id, "blue")
            await s.wait_idle()
    assert result_texts(model.requests[1]) == ["picked blue"]


async def test_ask_user_outside_a_tool_call_fails_secure() -> None:
    with pytest.raises(OutsideToolCallError):
        await ask_user("anyone there?")
    leaked: list[ToolContext] = []

    @tool(permission="allow")
    async def leak(ctx: ToolContext) -> str:
        """Keeps its context."""
        leaked.append(ctx)
        return "ok"

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="leak")]), Reply(text="ok")])
    await run(LoopDefinition(name="t", model=model, tools=[leak]))
    with pytest.raises(OutsideToolCallError):
        await leaked[0].ask_user("late question")


async def test_builtin_ask_user_tool() -> None:
    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="ask_user", input={"question": "name?"})]),
            Reply(text="hi"),
        ]
    )
    d = LoopDefinition(name="t", model=model, tools=[ask_user_tool()])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
            assert gate.prompt == "name?"
            await s.answer(gate.gate_id, "Ada")
            await s.wait_idle()
    assert result_texts(model.requests[1]) == ["Ada"]


async def test_a_question_with_no_choices_never_opens_a_gate() -> None:
    # No answer could be accepted, so the gate would hold the turn for good:
    # a tool that asks so fails (model-visible); the model's own [] means "free".
    @tool(permission="allow")
    async def bad_pick(ctx: ToolContext) -> str:
        """Asks with an empty list of choices."""
        return await ctx.ask_user("which?", choices=[])

    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    ToolCall(name="bad_pick"),
                    ToolCall(name="ask_user", input={"question": "name?", "choices": []}),
                ]
            ),
            Reply(text="hi"),
        ]
    )
    d = LoopDefinition(name="t", model=model, tools=[bad_pick, ask_user_tool()])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
            assert gate.prompt == "name?" and gate.choices is None
            await s.answer(gate.gate_id, "Ada")
            await s.wait_idle()
            await s.verify()
    failed, answered = result_texts(model.requests[1])
    assert "was given no choices" in failed and failed.startswith("[error: tool bad_pick failed")
    assert answered == "Ada"


@tool(permission="allow", concurrency="parallel")
async def slow(ctx: ToolContext, *, seconds: float) -> str:
    """Sleeps."""
    await trio.sleep(seconds)
    return f"slept {seconds}"


async def test_interrupt_during_a_batch_answers_every_tool_use(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(permission="allow", concurrency="parallel")
    async def question(ctx: ToolContext) -> str:
        """Asks while others run."""
        return await ctx.ask_user("which?")

    calls = [
        ToolCall(name="slow", input={"seconds": 1}),
        ToolCall(name="slow", input={"seconds": 100}),
        ToolCall(name="question"),
        ToolCall(name="rm", input={"path": "x"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="after")])
    d = LoopDefinition(name="t", model=model, tools=[slow, question, rm])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()  # waits at the permission gate for rm
            [perm] = (await s.snapshot()).open_gates
            await s.decide(perm.gate_id, allow=True)
            await trio.sleep(5)  # slow(1) done, slow(100) running, pick asking
            state = await s.snapshot()
            assert state.status is LoopStatus.AWAITING_GATE
            assert await s.interrupt()
            state = await s.snapshot()
            assert unanswered_tool_uses(state.messages) == []
            await s.submit("continue")
            await s.wait_idle()
            await s.verify()
        seq = squash(await tags(journal, s.id))
        abandoned = await events_of(journal, s.id, ToolAbandoned)
    i = seq.index("turn.ended")
    assert seq[i - 5 : i + 1] == [
        "tool.completed",  # slow(1) finished before the interrupt
        "gate.cancelled",
        "tool.abandoned",  # slow(100) was running
        "tool.abandoned",  # question was waiting for its answer
        "tool.completed",  # rm (exclusive) was admitted but never began
        "turn.ended",
    ]
    assert [a.reason for a in abandoned] == ["interrupted", "interrupted"]
    request = model.requests[1]
    assert unanswered_tool_uses(request.messages) == []
    texts = [
        c.text
        for m in request.messages
        for b in m.blocks
        if isinstance(b, ToolResult)
        for c in b.content
        if isinstance(c, Text)
    ]
    assert texts[0] == "slept 1.0"
    assert texts[1] == INTERRUPTED_TOOL_RESULT and texts[2] == INTERRUPTED_TOOL_RESULT
    assert "removed" not in texts[3] and "not run" in texts[3]


async def test_tool_call_cut_off_by_token_limit_gets_feedback() -> None:
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[ToolCall(name="add", raw_json='{"a": 1, "b"')],
                stop_reason="max_tokens",
            ),
            Reply(tool_calls=[ToolCall(name="add", input={"a": 1, "b": 1})]),
            Reply(text="2"),
        ]
    )
    state, _, _ = await run(LoopDefinition(name="t", model=model, tools=[add]))
    assert result_texts(model.requests[1]) == [TRUNCATED_TOOL_CALL_RESULT]
    assert result_texts(model.requests[2]) == ["2"]
    assert state.last_outcome == "completed"


async def test_a_complete_call_in_a_reply_cut_by_the_token_limit_is_not_run() -> None:
    """Only a reply that stopped for tool use admits execution: a call that
    parsed, in a reply cut off by the token limit, gets the same feedback."""
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    ToolCall(name="add", input={"a": 1, "b": 1}),
                    ToolCall(name="add", raw_json='{"a": 1, "b"'),
                ],
                stop_reason="max_tokens",
            ),
            Reply(text="I will ask again"),
        ]
    )
    state, _, seq = await run(LoopDefinition(name="t", model=model, tools=[add]))
    assert "tool.started" not in seq
    assert result_texts(model.requests[1]) == [TRUNCATED_TOOL_CALL_RESULT] * 2
    assert state.last_outcome == "completed"


async def test_tool_calls_with_another_stop_reason_fail_the_turn() -> None:
    model = ScriptedModel(
        [
            Reply(
                tool_calls=[ToolCall(name="add", input={"a": 1, "b": 2})], stop_reason="end_turn"
            ),
            Reply(text="never asked"),
        ]
    )
    state, _, seq = await run(LoopDefinition(name="t", model=model, tools=[add]))
    assert "tool.started" not in seq
    assert len(model.requests) == 1
    assert state.last_outcome == "failed"
    assert unanswered_tool_uses(state.messages) == []


async def test_tool_limits() -> None:
    def always_calls(_: ModelRequest) -> Reply:
        return Reply(tool_calls=[ToolCall(name="add", input={"a": 1, "b": 1})] * 2)

    d = LoopDefinition(
        name="t",
        model=ScriptedModel(always_calls),
        tools=[add],
        limits=Limits(max_tool_iterations=3, max_tool_calls_per_turn=5),
    )
    state, _, _ = await run(d)
    assert state.last_outcome == "limit"
    assert unanswered_tool_uses(state.messages) == []
    assert state.turn_tool_calls == 5


async def test_steering_is_applied_after_tool_results_before_next_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(permission="allow")
    async def wait(ctx: ToolContext) -> str:
        """Takes a while."""
        await trio.sleep(10)
        return "waited"

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="wait")]), Reply(text="ok")])
    d = LoopDefinition(name="t", model=model, tools=[wait])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await trio.sleep(1)
            await s.steer("prefer brevity")
            await s.wait_idle()
            await s.verify()
        seq = squash(await tags(journal, s.id))
    assert seq.index("steer.queued") < seq.index("tool.completed") < seq.index("steer.applied")
    assert seq.index("steer.applied") < len(seq) - 1 - seq[::-1].index("model.call_started")
    last_user = model.requests[1].messages[-1]
    assert isinstance(last_user.blocks[0], ToolResult)
    assert last_user.blocks[-1] == Text(text="prefer brevity")


async def test_steering_while_idle_starts_a_turn() -> None:
    model = ScriptedModel([Reply(text="ok")])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="t", model=model)) as s:
            await s.steer("be terse")
            await s.wait_idle()
            state = await s.snapshot()
        seq = squash(await tags(journal, s.id))
    assert seq[:4] == ["loop.started", "loop.configured", "steer.queued", "turn.started"]
    assert state.turn_index == 1 and state.steering == []
    assert model.requests[0].messages[-1].blocks == (Text(text="be terse"),)


async def test_a_callable_permission_policy_decides_per_call() -> None:
    def only_tmp(name: str, raw: Mapping[str, Any]) -> str:
        return "allow" if str(raw.get("path", "")).startswith("/tmp/") else "deny"

    calls = [
        ToolCall(name="rm", input={"path": "/tmp/x"}),
        ToolCall(name="rm", input={"path": "/etc"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="ok")])
    d = LoopDefinition(name="t", model=model, tools=[rm], permissions={"rm": only_tmp})
    _, _, seq = await run(d)
    assert "gate.opened" not in seq  # the policy, not a person, decided
    assert result_texts(model.requests[1])[0] == "removed /tmp/x"
    assert "denied" in result_texts(model.requests[1])[1]


async def test_a_permission_policy_that_raises_denies_the_call() -> None:
    def policy(name: str, raw: Mapping[str, Any]) -> str:
        raise KeyError("path")

    @tool(permission=policy)
    async def erase(ctx: ToolContext, *, path: str) -> str:
        """Erase a file."""
        raise AssertionError("a call its policy could not judge must not run")

    model = ScriptedModel(
        [Reply(tool_calls=[ToolCall(name="erase", input={"path": "x"})]), Reply(text="ok")]
    )
    state, _, seq = await run(LoopDefinition(name="t", model=model, tools=[erase]))
    assert "tool.started" not in seq
    assert result_texts(model.requests[1]) == [DENIED_RESULT]
    assert state.last_outcome == "completed"


# -- gates across a clean shutdown ------------------------------------------------


@tool(permission="allow", resumable=True)
async def confirm(ctx: ToolContext, *, what: str) -> str:
    """Ask before acting; re-entered with the answer after a restore."""
    answer = ctx.continuation or await ctx.ask_user(f"{what}?", choices=["yes", "no"])
    return f"{what}: {answer}"


@pytest.mark.parametrize(
    ("call", "last_before", "reply", "result"),
    [
        # A permission gate: its tool never started.
        (ToolCall(name="rm", input={"path": "a"}), "context.measured", True, "removed a"),
        # A question of a resumable tool: re-entered with the answer.
        (ToolCall(name="confirm", input={"what": "deploy"}), "tool.started", "yes", "deploy: yes"),
    ],
)
async def test_a_pending_gate_outlives_a_clean_shutdown(
    tmp_path: Path, call: ToolCall, last_before: str, reply: bool | str, result: str
) -> None:
    # The turn waits only on a person, so shutdown leaves it open as the
    # journal holds it: the same gate is open after restore, and closing it
    # runs the tool once.  (A crash keeps it too; a deploy must not lose it.)
    model = ScriptedModel([Reply(tool_calls=[call]), Reply(text="done")])
    d = LoopDefinition(name="t", model=model, tools=[rm, confirm])
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
        # Nothing settled: the last records are the ones that opened the gate.
        assert squash(await tags(journal, s.id))[-2:] == [last_before, "gate.opened"]
        async with Session.restore(journal, s.id, d) as s2:
            state = await s2.snapshot()
            assert state.status is LoopStatus.AWAITING_GATE
            assert state.open_gates == [gate]
            if isinstance(reply, bool):
                await s2.decide(gate.gate_id, allow=reply)
            else:
                await s2.answer(gate.gate_id, reply)
            await s2.wait_idle()
            await s2.verify()
        report = await check(journal, s.id)
        assert report.ok, report.summary()
        seq = squash(await tags(journal, s.id))
    assert not {"gate.cancelled", "tool.abandoned", "notice"} & set(seq)
    assert seq.count("tool.started") == 1
    assert result_texts(model.requests[1]) == [result]


async def test_shutdown_still_settles_a_turn_that_does_more_than_wait(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A question of a tool that cannot be re-entered, and a resumable question
    # asked while another tool runs: leaving either turn open would make a
    # call an unknown effect at restore, so shutdown interrupts and settles.
    @tool(permission="allow", concurrency="parallel", resumable=True)
    async def check_in(ctx: ToolContext) -> str:
        """Asks while others run."""
        return ctx.continuation or await ctx.ask_user("still there?")

    cases = [
        [ToolCall(name="pick", input={"prompt": "colour?"})],
        [ToolCall(name="slow", input={"seconds": 100}), ToolCall(name="check_in")],
    ]
    for calls in cases:
        model = ScriptedModel([Reply(tool_calls=calls), Reply(text="after")])
        d = LoopDefinition(name="t", model=model, tools=[slow, pick, check_in])
        async with open_journal("memory:") as journal:
            async with Session.create(journal, d) as s:
                await s.submit("go")
                await trio.sleep(5)
                state = await s.snapshot()
                assert state.open_gates and state.status is LoopStatus.AWAITING_GATE
            cancelled = await events_of(journal, s.id, GateCancelled)
            ended = await events_of(journal, s.id, TurnEnded)
            async with Session.restore(journal, s.id, d) as s2:
                state = await s2.snapshot()
        assert [c.reason for c in cancelled] == ["shutdown"]
        assert [e.outcome for e in ended] == ["interrupted"]
        assert state.open_gates == [] and state.unknown_effects == []


async def test_questions_of_parallel_calls_leave_the_loop_quiet(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Two parallel calls ask at once, a third waits behind one of them on its
    # target, a fourth for a free slot: the loop has nothing to do without a
    # person, so wait_idle returns with both questions open; answered, the
    # rest runs.
    ran: list[str] = []

    @tool(permission="allow", concurrency="parallel", write_target=lambda i: i.get("path"))
    async def ask(ctx: ToolContext, *, name: str, path: str | None = None) -> str:
        """Asks, then says the answer."""
        answer = await ctx.ask_user(f"{name}?")
        ran.append(name)
        return f"{name}={answer}"

    @tool(permission="allow", concurrency="parallel", write_target=lambda i: i.get("path"))
    async def note(ctx: ToolContext, *, name: str, path: str | None = None) -> str:
        """Runs at once."""
        ran.append(name)
        return name

    calls = [
        ToolCall(name="ask", input={"name": "a", "path": "x"}),
        ToolCall(name="ask", input={"name": "b"}),
        ToolCall(name="note", input={"name": "after-a", "path": "x"}),
        ToolCall(name="note", input={"name": "later"}),
    ]
    model = ScriptedModel([Reply(tool_calls=calls), Reply(text="ok")])
    d = LoopDefinition(
        name="t", model=model, tools=[ask, note], limits=Limits(max_parallel_tool_calls=3)
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            gates = {g.prompt: g for g in (await s.snapshot()).open_gates}
            assert sorted(gates) == ["a?", "b?"] and ran == []
            await s.answer(gates["b?"].gate_id, "2")
            await s.wait_idle()
            assert ran == ["b", "later"]  # "later" took the slot b freed
            await s.answer(gates["a?"].gate_id, "1")
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"
        assert ran == ["b", "later", "a", "after-a"]
        assert not (await check(journal, s.id)).problems
    assert result_texts(model.requests[1]) == ["a=1", "b=2", "after-a", "later"]
