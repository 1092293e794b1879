"""Property: whatever commands arrive in whatever order, the live state equals
the fold of the journal, and the journal passes the checker."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import open_journal
from journal.content import Text, ToolResult, ToolUse
from journal.events import (
    CommandKeyed,
    InputQueued,
    ModelCallStarted,
    ToolAbandoned,
    ToolCompleted,
    ToolResolved,
    ToolStarted,
)
from loopruntime import (
    IdempotencyKeyError,
    Limits,
    LoopDefinition,
    LoopError,
    Mode,
    ToolContext,
    tool,
)
from loopruntime.context import merged
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.notices import DENIED_RESULT
from session import Session
from session.embedded.checkpoints import read_restored
from session.replay import check
from tests.compaction.support import TestCompactor, summary
from tests.support.loops import crashed_copy


@tool(permission="allow", concurrency="parallel")
async def nap(ctx: ToolContext, *, seconds: float) -> str:
    """Sleeps a little."""
    await trio.sleep(seconds)
    return "rested"


def brain(request: ModelRequest) -> Reply:
    # Deterministic variety from the conversation length: plain replies,
    # tool calls, and streams that break part-way.
    n = len(request.messages)
    if n % 5 == 1:
        return Reply(
            text="napping",
            tool_calls=[ToolCall(name="nap", input={"seconds": 0.5})] * 2,
            chunk_delay=0.1,
        )
    if n % 7 == 3:
        return Reply(text="this stream breaks", chunk_size=3, chunk_delay=0.1, fail_after_chunks=2)
    return Reply(text="reply " * (n % 4 + 1), chunk_size=5, chunk_delay=0.1)


op = st.one_of(
    st.tuples(st.just("submit"), st.none()),
    st.tuples(st.just("cancel"), st.integers(0, 5)),
    st.tuples(st.just("interrupt"), st.none()),
    st.tuples(st.sampled_from(["pause", "resume"]), st.none()),
    st.tuples(st.just("snapshot"), st.none()),
    st.tuples(st.just("steer"), st.none()),
    st.tuples(st.just("sleep"), st.sampled_from([0.05, 0.2, 0.7, 2.0])),
    # Keyed commands from a small pool of keys: repeats of a key on the same
    # command, and the same key on another command.
    st.tuples(
        st.just("keyed"),
        st.tuples(
            st.sampled_from(["submit", "steer", "interrupt", "compact", "pause", "resume"]),
            st.integers(0, 2),
        ),
    ),
)


async def keyed_command(s: Session, used: dict[str, tuple[str, Any]], arg: object) -> None:
    """Give a keyed command and check its answer against the key's first use."""
    assert isinstance(arg, tuple)
    name, k = arg
    key = f"key-{k}"
    calls = {
        "submit": lambda: s.submit(f"keyed input {k}", key=key),
        "steer": lambda: s.steer(f"keyed steer {k}", key=key),
        "interrupt": lambda: s.interrupt(key=key),
        "compact": lambda: s.compact(key=key),
        "pause": lambda: s.pause(key=key),
        "resume": lambda: s.resume(key=key),
    }
    first = used.get(key)
    if first is not None and first[0] != name:
        try:
            await calls[name]()
        except IdempotencyKeyError:
            return
        raise AssertionError(f"{key} was used for {first[0]}; {name} with it went through")
    result = await calls[name]()
    if first is None:
        used[key] = (name, result)
    else:
        assert result == first[1], (key, result, first)


def assert_no_key_took_effect_twice(records: list[Any], used: dict[str, tuple[str, Any]]) -> None:
    keyed = [r.event for r in records if isinstance(r.event, CommandKeyed)]
    assert sorted(e.key for e in keyed) == sorted(used)
    for key, (name, result) in used.items():
        if name == "submit":
            text = f"keyed input {key.removeprefix('key-')}"
            queued = [
                r.event
                for r in records
                if isinstance(r.event, InputQueued) and text in str(r.event.messages)
            ]
            assert [q.input_id for q in queued] == [result]


async def scenario(ops: list[tuple[str, object]]) -> None:
    d = LoopDefinition(name="prop", model=ScriptedModel(brain), tools=[nap])
    async with open_journal("memory:") as journal:
        # Checkpoints every few records, so that they land everywhere: inside
        # turns, at open gates, in the middle of a stream.
        async with Session.create(journal, d, checkpoint_every=7) as s:
            inputs: list[str] = []
            used: dict[str, tuple[str, Any]] = {}
            for name, arg in ops:
                if name == "keyed":
                    await keyed_command(s, used, arg)
                elif name == "submit":
                    inputs.append(await s.submit(f"message {len(inputs)}"))
                elif name == "cancel" and inputs:
                    assert isinstance(arg, int)
                    # Refused (nothing committed) when that input already ran.
                    with contextlib.suppress(LoopError):
                        await s.cancel_queued(inputs[arg % len(inputs)])
                elif name == "interrupt":
                    await s.interrupt()
                elif name == "pause":
                    await s.pause()
                elif name == "resume":
                    await s.resume()
                elif name == "snapshot":
                    await s.snapshot()
                elif name == "steer":
                    await s.steer("keep it short")
                elif name == "sleep":
                    assert isinstance(arg, float)
                    await trio.sleep(arg)
                await s.verify()
            await s.wait_idle()
            live = await s.snapshot()
            await s.verify()
        folded = await read_restored(journal, s.id, use_checkpoints=False)
        assert folded.checkpoint_seq == 0
        assert folded.states["main"] == live
        restored = await read_restored(journal, s.id)
        assert restored.states == folded.states
        chain = await journal.checkpoints(s.id)
        assert restored.checkpoint_seq == (chain[-1].seq if chain else 0)
        report = await check(journal, s.id)
        assert report.ok, report.summary()
        assert_no_key_took_effect_twice([r async for r in journal.read(s.id)], used)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=25))
def test_fold_of_journal_equals_live_state(ops: list[tuple[str, object]]) -> None:
    trio.run(scenario, ops, clock=trio.testing.MockClock(autojump_threshold=0))


# -- gates, failing tools, compaction, modes, and a crash anywhere ----------------

ran: list[str] = []
"""Execution ids of every call of a tool that is not replay-safe, as it began."""


@tool(permission="ask", concurrency="parallel")
async def deploy(ctx: ToolContext, *, target: str) -> str:
    """Deploys (needs approval)."""
    ran.append(ctx.execution_id)
    await trio.sleep(0.3)
    return f"deployed {target}"


@tool(permission="allow")
async def quiz(ctx: ToolContext) -> str:
    """Asks the person."""
    ran.append(ctx.execution_id)
    return await ctx.ask_user("go on?", ["yes", "no"])


@tool(permission="allow", concurrency="parallel")
async def boom(ctx: ToolContext) -> str:
    """Fails."""
    ran.append(ctx.execution_id)
    await trio.sleep(0.2)
    raise RuntimeError("boom")


def busy_brain(request: ModelRequest) -> Reply:
    n = len(request.messages)
    if n % 6 == 1:
        return Reply(
            text="deploying",
            tool_calls=[
                ToolCall(name="deploy", input={"target": "a"}),
                ToolCall(name="boom"),
                ToolCall(name="deploy", input={"target": "b"}),
            ],
            chunk_delay=0.1,
        )
    if n % 6 == 3:
        return Reply(tool_calls=[ToolCall(name="quiz"), ToolCall(name="nap", input={"seconds": 1})])
    if n % 6 == 5:
        return Reply(
            text="cut",
            tool_calls=[ToolCall(name="boom")],
            stop_reason="max_tokens",
            chunk_size=2,
            chunk_delay=0.1,
        )
    return Reply(text="fine " * (n % 3 + 1), chunk_size=3, chunk_delay=0.1)


def busy_definition() -> LoopDefinition:
    return LoopDefinition(
        name="busy",
        model=ScriptedModel(busy_brain),
        tools=[nap, deploy, quiz, boom],
        modes=[Mode(name="quiet", tools=["nap"])],
        compactor=TestCompactor(summary(), delay=0.5),
        limits=Limits(compact_at=None, retained_exchanges=1),
    )


gate_op = st.one_of(
    op,
    st.tuples(st.just("decide"), st.tuples(st.booleans(), st.sampled_from(["once", "session"]))),
    st.tuples(st.just("answer"), st.sampled_from(["yes", "no"])),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("mode"), st.sampled_from([None, "quiet"])),
    st.tuples(st.just("race"), st.sampled_from(["allow", "deny", "answer"])),
)


async def drive(s: Session, ops: list[tuple[str, object]], inputs: list[str]) -> None:
    for name, arg in ops:
        if name in ("decide", "answer", "race"):
            # A person answers what they were asked: wait until the loop asks.
            await s.wait_idle()
        gates = (await s.snapshot()).open_gates
        if name == "submit":
            inputs.append(await s.submit(f"message {len(inputs)}"))
        elif name == "cancel" and inputs:
            assert isinstance(arg, int)
            with contextlib.suppress(LoopError):
                await s.cancel_queued(inputs[arg % len(inputs)])
        elif name == "interrupt":
            await s.interrupt()
        elif name == "snapshot":
            pass
        elif name == "steer":
            await s.steer("keep it short")
        elif name == "sleep":
            assert isinstance(arg, float)
            await trio.sleep(arg)
        elif name == "decide":
            assert isinstance(arg, tuple)
            for g in gates:
                if g.kind == "permission":
                    # Refused when the gate closed meanwhile (an interrupt).
                    with contextlib.suppress(LoopError):
                        await s.decide(g.gate_id, allow=arg[0], scope=arg[1])
                    break
        elif name == "answer":
            assert isinstance(arg, str)
            for g in gates:
                if g.kind == "user_input":
                    with contextlib.suppress(LoopError):
                        await s.answer(g.gate_id, arg)
                    break
        elif name == "race":
            # A person's decision and an interrupt sent at the same moment.
            for g in gates:
                if (g.kind == "user_input") == (arg == "answer"):
                    await race(s, g.gate_id, arg)
                    break
        elif name == "compact":
            await s.compact()
        elif name == "mode":
            assert arg is None or isinstance(arg, str)
            await s.change_mode(arg)
        await s.verify()


async def race(s: Session, gate_id: str, how: object) -> None:
    async def close_gate() -> None:
        with contextlib.suppress(LoopError):
            if how == "answer":
                await s.answer(gate_id, "yes")
            else:
                await s.decide(gate_id, allow=how == "allow")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close_gate)
        nursery.start_soon(s.interrupt)


def assert_each_call_answered_once(events: list[Any]) -> None:
    """No call both started and denied; no call with two outcomes."""
    started = {e.tool_use_id for e in events if isinstance(e, ToolStarted)}
    outcomes: dict[str, int] = {}
    for e in events:
        if isinstance(e, ToolCompleted | ToolResolved) or (
            isinstance(e, ToolAbandoned) and e.reason == "interrupted"
        ):
            outcomes[e.tool_use_id] = outcomes.get(e.tool_use_id, 0) + 1
            if isinstance(e, ToolCompleted) and e.content == (Text(text=DENIED_RESULT),):
                assert e.tool_use_id not in started, "a call that ran was reported denied"
    assert all(n == 1 for n in outcomes.values()), outcomes


def assert_provider_accepts(messages: list[Any]) -> None:
    """Every tool_use answered exactly once, in the very next message; tool
    results answer only the calls just before them; no empty user message."""
    merged_messages = merged(messages)
    for i, m in enumerate(merged_messages):
        results = [b.tool_use_id for b in m.blocks if isinstance(b, ToolResult)]
        uses = [b.id for b in m.blocks if isinstance(b, ToolUse)]
        if m.role == "user":
            assert m.blocks, f"empty user message at {i}"
            before = merged_messages[i - 1] if i else None
            asked = [b.id for b in before.blocks if isinstance(b, ToolUse)] if before else []
            assert sorted(results) == sorted(asked), f"results at {i} do not answer the calls"
        else:
            assert not results
            if uses and i + 1 < len(merged_messages):
                nxt = merged_messages[i + 1]
                answered = [b.tool_use_id for b in nxt.blocks if isinstance(b, ToolResult)]
                assert sorted(answered) == sorted(uses), f"calls at {i} not answered once"


async def busy_scenario(ops: list[tuple[str, object]], crash_at: float) -> None:
    ran.clear()
    async with open_journal("memory:") as journal:
        d = busy_definition()
        async with Session.create(journal, d, checkpoint_every=7) as s:
            await drive(s, ops, [])
            await s.wait_idle()
            await s.verify()
        for request in d.model.requests:  # type: ignore[attr-defined]
            assert_provider_accepts(list(request.messages))
        report = await check(journal, s.id)
        assert report.ok, report.summary()
        assert_each_call_answered_once([r.event async for r in journal.read(s.id)])

        # A crash right after any record: restore settles it, runs nothing
        # twice, and stays equal to the fold of its journal.
        head = 0
        async for r in journal.read(s.id):
            head = r.seq
        last = max(1, int(head * crash_at))
        copy = await crashed_copy(journal, s.id, last)
        before = [r.event async for r in journal.read(copy)]
        started_before = {e.execution_id for e in before if isinstance(e, ToolStarted)}
        ran.clear()
        d2 = busy_definition()
        async with Session.restore(journal, copy, d2, checkpoint_every=7) as s2:
            await s2.wait_idle()
            await s2.verify()
            for round in range(6):
                state = await s2.snapshot()
                for u in state.unknown_effects:
                    await s2.resolve(u.execution_id, "resolved by the host")
                for g in state.open_gates:
                    if g.kind == "permission":
                        await s2.decide(g.gate_id, allow=round % 2 == 0)
                    else:
                        await s2.answer(g.gate_id, "no")
                await s2.wait_idle()
                await s2.verify()
        assert not started_before & set(ran), "a call started before the crash ran again"
        for request in d2.model.requests:  # type: ignore[attr-defined]
            assert_provider_accepts(list(request.messages))
        report = await check(journal, copy)
        assert report.ok, report.summary()
        assert_each_call_answered_once([r.event async for r in journal.read(copy)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(gate_op, max_size=25), st.floats(0.05, 1.0))
def test_gates_compaction_and_a_crash_keep_the_fold_and_the_transcript_valid(
    ops: list[tuple[str, object]], crash_at: float
) -> None:
    trio.run(busy_scenario, ops, crash_at, clock=trio.testing.MockClock(autojump_threshold=0))


# -- deploys: models, tools and prompts change between restores ------------------


@tool(name="extra", permission="allow")
async def extra_v1(ctx: ToolContext, *, text: str) -> str:
    """An extra tool."""
    return "extra"


@tool(name="extra", permission="allow")
async def extra_v2(ctx: ToolContext, *, text: str, loud: bool = False) -> str:
    """An extra tool whose schema grew."""
    return "EXTRA" if loud else "extra"


MODEL_NAMES = ("model-a", "model-b", "model-alt")

deploy_op = st.one_of(
    st.tuples(st.just("submit"), st.none()),
    st.tuples(st.just("interrupt"), st.none()),
    st.tuples(st.just("sleep"), st.sampled_from([0.05, 0.7, 2.0])),
    st.tuples(st.just("infer"), st.sampled_from([*MODEL_NAMES, None, "model-z"])),
    st.tuples(st.just("tools"), st.sampled_from([None, ("nap",), ("nap", "extra")])),
    st.tuples(st.just("mode"), st.sampled_from([None, "other"])),
    st.tuples(
        st.just("deploy"),
        st.tuples(
            st.sampled_from(["model-a", "model-b"]),
            st.sampled_from(["Be brief.", "Be thorough."]),
            st.booleans(),
            st.sampled_from([4096, 2048]),
        ),
    ),
)


def deployed(
    models: dict[str, ScriptedModel], model: str, system: str, v2: bool, max_tokens: int
) -> LoopDefinition:
    """One deploy: its own model, prompt, extra tool's schema and limits;
    every model name stays registered, so choices survive every deploy."""
    extra = extra_v2 if v2 else extra_v1
    return LoopDefinition(
        name="deployed",
        model=models[model],
        system=system,
        tools=[nap],
        tool_registry=[extra],
        models=[m for name, m in models.items() if name != model],
        modes=[Mode(name="other", model=models["model-alt"], system="Another voice.")],
        limits=Limits(max_tokens=max_tokens),
    )


async def deploy_scenario(ops: list[tuple[str, object]]) -> None:
    # One model object per name across every deploy, so what each was asked
    # can be counted against the journal.
    models = {name: ScriptedModel(brain, name=name) for name in MODEL_NAMES}
    async with open_journal("memory:") as journal:
        current = deployed(models, "model-a", "Be brief.", False, 4096)
        async with contextlib.AsyncExitStack() as stack:
            s = await stack.enter_async_context(
                Session.create(journal, current, checkpoint_every=7)
            )
            for name, arg in ops:
                if name == "submit":
                    await s.submit("hello")
                elif name == "interrupt":
                    await s.interrupt()
                elif name == "sleep":
                    assert isinstance(arg, float)
                    await trio.sleep(arg)
                elif name == "infer":
                    if arg == "model-z":
                        with contextlib.suppress(LoopError):
                            await s.change_inference(model="model-z")
                    elif arg is None:
                        await s.change_inference(reset=True)
                    else:
                        assert isinstance(arg, str)
                        await s.change_inference(model=arg)
                elif name == "tools":
                    assert arg is None or isinstance(arg, tuple)
                    await s.replace_tools(arg)
                elif name == "mode":
                    assert arg is None or isinstance(arg, str)
                    await s.change_mode(arg)
                elif name == "deploy":
                    assert isinstance(arg, tuple)
                    await stack.aclose()
                    current = deployed(models, *arg)
                    s = await stack.enter_async_context(
                        Session.restore(journal, s.id, current, checkpoint_every=7)
                    )
                    live = await s.snapshot()
                    # The fold names what the loop runs under, and the model in use.
                    assert live.configured is not None
                    assert live.configured.model == current.model.name
                    if live.chosen_model is None and live.mode is None and not live.turn_open:
                        assert live.model == current.model.name
                await s.verify()
            await s.wait_idle()
            live = await s.snapshot()
            await s.verify()
        folded = await read_restored(journal, s.id, use_checkpoints=False)
        assert folded.states["main"] == live
        report = await check(journal, s.id)
        assert report.ok, report.summary()
        # Each model call went to the model the journal says it used.
        calls = Counter(
            [
                r.event.model
                async for r in journal.read(s.id)
                if isinstance(r.event, ModelCallStarted)
            ]
        )
        assert calls == Counter({n: len(m.requests) for n, m in models.items() if m.requests})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(deploy_op, max_size=20))
def test_deploys_and_choices_keep_the_fold_the_checker_and_the_models_true(
    ops: list[tuple[str, object]],
) -> None:
    trio.run(deploy_scenario, ops, clock=trio.testing.MockClock(autojump_threshold=0))
