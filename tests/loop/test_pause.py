"""Pause and resume: only a resume releases a pause.  Each rule on the memory
and the SQLite journal; across SIGKILL and restore in tests/crash, through a
host in tests/host."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from journal import Journal, open_journal
from journal.events import ChildStarted, LoopPaused, LoopResumed, TurnEnded
from loopruntime import (
    Delegate,
    Limits,
    LoopDefinition,
    LoopStatus,
    LoopStoppedError,
    ToolContext,
    UnknownLoopError,
    tool,
)
from loopruntime.model import Delta, ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session, Status
from session.embedded.status import describe
from session.replay import check, render_transcript
from tests.host.support import wait_for
from tests.support.loops import events_of, records, squash, tags


@pytest.fixture(params=["memory", "sqlite"])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Journal]:
    url = "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as opened:
        yield opened


async def _tags_of(journal: Journal, session_id: str, loop: str = "main") -> list[str]:
    return squash(await tags(journal, session_id, loop=loop))


class Gate:
    """A tool's run held until the test lets it go."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()


def slow_tool(gate: Gate) -> object:
    @tool(permission="allow")
    async def slow(ctx: ToolContext) -> str:
        """Takes its time."""
        gate.entered.set()
        await gate.release.wait()
        return "slow done"

    return slow


async def test_a_paused_loop_begins_no_turn_and_its_input_runs_after_resume(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel([Reply(text="hello")])
    async with Session.create(journal, LoopDefinition(name="d", model=model), session_id="s") as s:
        assert await s.pause(principal="ann") is True
        await s.submit("hi")
        await s.wait_idle()
        state = await s.snapshot()
        assert state.paused and state.status is LoopStatus.PAUSED
        assert [q.input_id for q in state.queued] and not model.requests
        assert await s.resume(principal="bob") is True
        await s.wait_idle()
        await s.verify()
    assert await _tags_of(journal, "s") == [
        "loop.started",
        "loop.configured",
        "loop.paused",
        "input.queued",
        "loop.resumed",
        "turn.started",
        "model.call_started",
        "model.output",
        "model.message_committed",
        "context.measured",
        "turn.ended",
    ]
    [paused] = await events_of(journal, "s", LoopPaused)
    [resumed] = await events_of(journal, "s", LoopResumed)
    assert (paused.principal, resumed.principal) == ("ann", "bob")
    text = render_transcript(await records(journal, "s"))
    assert "⏸ loop main paused [ann]" in text and "▶ loop main resumed [bob]" in text
    assert (await check(journal, "s")).ok


async def test_a_running_step_finishes_and_is_recorded_and_the_next_waits(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    gate = Gate()
    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="slow")]), Reply(text="after")])
    d = LoopDefinition(name="d", model=model, tools=[slow_tool(gate)])
    async with Session.create(journal, d, session_id="s") as s:
        await s.submit("go")
        await gate.entered.wait()
        await s.pause()
        gate.release.set()
        await s.wait_idle()
        # The tool's completion is recorded; no model call started after it.
        assert len(model.requests) == 1
        state = await s.snapshot()
        assert state.turn_open and state.paused

        async def tool_completed() -> bool:
            return (await _tags_of(journal, "s"))[-2:] == ["loop.paused", "tool.completed"]

        await wait_for(tool_completed)
        await s.resume()
        await s.wait_idle()
        assert len(model.requests) == 2
        assert not (await s.snapshot()).turn_open
        await s.verify()
    assert (await check(journal, "s")).ok


async def test_commands_queue_while_paused_and_run_after_resume(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel([Reply(text="one"), Reply(text="two")])
    d = LoopDefinition(name="d", model=model)
    async with Session.create(journal, d, session_id="s") as s:
        await s.pause()
        await s.submit("first")
        await s.steer("and mind this")
        attempt = await s.compact()
        await s.wait_idle()
        assert not model.requests
        tags_before = await _tags_of(journal, "s")
        assert "compaction.started" not in tags_before and "turn.started" not in tags_before
        await s.resume()
        await s.wait_idle()
        assert attempt
        assert model.requests, "the queued input ran after the resume"
        seen = model.requests[0].messages
        assert "first" in str(seen) and "and mind this" in str(seen)
        await s.verify()


async def test_an_open_gate_stays_answerable_and_its_answer_waits_for_resume(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    @tool(permission="allow")
    async def confirm(ctx: ToolContext) -> str:
        """Asks a person."""
        answer = await ctx.ask_user("sure?")
        return f"told {answer}"

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="confirm")]), Reply(text="ok")])
    d = LoopDefinition(name="d", model=model, tools=[confirm])
    async with Session.create(journal, d, session_id="s") as s:
        await s.submit("go")
        await s.wait_idle()
        (gate,) = (await s.snapshot()).open_gates
        await s.pause()
        await s.answer(gate.gate_id, "yes")
        await s.wait_idle()
        assert (await _tags_of(journal, "s"))[-2:] == ["loop.paused", "gate.resolved"]
        assert len(model.requests) == 1
        await s.resume()
        await s.wait_idle()
        assert "told yes" in str(model.requests[1].messages[-1])
        await s.verify()


async def test_a_parents_pause_holds_its_child(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    gate = Gate()
    child_model = ScriptedModel([Reply(tool_calls=[ToolCall(name="slow")]), Reply(text="found")])
    child = LoopDefinition(name="child", model=child_model, tools=[slow_tool(gate)])
    lead_model = ScriptedModel(
        [Reply(tool_calls=[ToolCall(name="research", input={"task": "x"})]), Reply(text="done")]
    )
    lead = LoopDefinition(
        name="lead",
        model=lead_model,
        delegates=[Delegate(name="research", description="Research", definition=child)],
    )
    async with Session.create(journal, lead, session_id="s") as s:
        await s.submit("go")
        await gate.entered.wait()
        await s.pause()
        gate.release.set()
        await s.wait_idle()
        # The child's running tool finished; its next model call waits.
        assert len(child_model.requests) == 1
        [started] = await events_of(journal, "s", ChildStarted)

        async def child_tool_completed() -> bool:
            # Pipelined: durable with the next barrier, or once it lingered.
            return (await _tags_of(journal, "s", started.child_loop))[-1] == "tool.completed"

        await wait_for(child_tool_completed)
        await s.resume()
        await s.wait_idle()
        assert len(child_model.requests) == 2 and len(lead_model.requests) == 2
        await s.verify()
    assert (await check(journal, "s")).ok


async def test_pausing_twice_and_resuming_a_running_loop_record_nothing(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    d = LoopDefinition(name="d", model=ScriptedModel([]))
    async with Session.create(journal, d, session_id="s") as s:
        assert await s.resume() is False
        assert await s.pause(key="p1") is True
        assert await s.pause() is False
        assert await s.pause(key="p1") is True  # a keyed repeat answers the first call
        assert await s.resume() is True
        assert await s.resume() is False
    assert await _tags_of(journal, "s") == [
        "loop.started",
        "loop.configured",
        "command.keyed",
        "loop.paused",
        "loop.resumed",
    ]


async def test_a_pause_of_an_unknown_or_stopped_loop_is_refused_and_commits_nothing(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    child = LoopDefinition(name="child", model=ScriptedModel([Reply(text="found")]))
    lead_model = ScriptedModel(
        [Reply(tool_calls=[ToolCall(name="research", input={"task": "x"})]), Reply(text="done")]
    )
    lead = LoopDefinition(
        name="lead",
        model=lead_model,
        delegates=[Delegate(name="research", description="Research", definition=child)],
    )
    async with Session.create(journal, lead, session_id="s") as s:
        await s.submit("go")
        await s.wait_idle()
        [started] = await events_of(journal, "s", ChildStarted)
        head = len(await records(journal, "s"))
        for call in (s.pause, s.resume):
            with pytest.raises(UnknownLoopError, match="has no loop 'nope'") as unknown:
                await call("nope", key="k")
            assert (unknown.value.session, unknown.value.loop) == ("s", "nope")
        for call in (s.pause, s.resume):
            with pytest.raises(LoopStoppedError, match="stopped for good") as stopped:
                await call(started.child_loop, key="k2")
            assert stopped.value.loop == started.child_loop
        assert len(await records(journal, "s")) == head


async def test_status_says_paused(journal: Journal, autojump_clock: trio.abc.Clock) -> None:
    d = LoopDefinition(name="d", model=ScriptedModel([]))
    async with Session.create(journal, d, session_id="s") as s:
        await s.pause()
        states = {"main": await s.snapshot()}
    [info] = [i for i in await journal.sessions() if i.session == "s"]
    status = describe(info, states)
    assert status.status is Status.PAUSED
    assert "loopruntime resume" in status.detail


async def test_a_turn_held_by_a_pause_survives_a_clean_close_and_resumes_after_restore(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    gate = Gate()
    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="slow")]), Reply(text="after")])
    d = LoopDefinition(name="d", model=model, tools=[slow_tool(gate)])
    async with Session.create(journal, d, session_id="s") as s:
        await s.submit("go")
        await gate.entered.wait()
        await s.pause()
        gate.release.set()
        await wait_for(lambda: s.loops["main"].state.running == {})
        await s.wait_idle()
    # The held turn was left open as the journal holds it (nothing of it ran).
    assert "turn.ended" not in await _tags_of(journal, "s")
    async with Session.restore(journal, "s", d) as s:
        await s.wait_idle()
        state = await s.snapshot()
        assert state.paused and state.turn_open and len(model.requests) == 1
        await s.resume()
        await s.wait_idle()
        assert not (await s.snapshot()).turn_open and len(model.requests) == 2
        await s.verify()
    assert (await check(journal, "s")).ok


class HeldModel(ScriptedModel):
    """A scripted model whose first call waits for the test before it answers."""

    def __init__(self, replies: list[Reply]) -> None:
        super().__init__(replies)
        self.streaming = trio.Event()
        self.release = trio.Event()

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Delta]]:
        if not self.streaming.is_set():
            self.streaming.set()
            await self.release.wait()
        async with super().stream(request) as deltas:
            yield deltas


async def test_a_continuation_the_provider_asks_for_waits_for_the_resume(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    model = HeldModel([Reply(text="part one", stop_reason="pause_turn"), Reply(text="part two")])
    async with Session.create(journal, LoopDefinition(name="d", model=model), session_id="s") as s:
        await s.submit("go")
        await model.streaming.wait()
        await s.pause()
        model.release.set()
        await s.wait_idle()
        # The call that was streaming finished and was recorded; its
        # continuation (the provider's pause_turn) waits for the resume.
        assert len(model.requests) == 1
        assert (await s.snapshot()).messages[-1].role == "assistant"
        await s.resume()
        await s.wait_idle()
        assert len(model.requests) == 2 and not (await s.snapshot()).turn_open
        await s.verify()


async def test_the_time_a_turn_is_held_counts_against_no_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The memory journal: timing matters here, and under the autojump clock a
    # SQLite commit in its thread lets virtual time jump past the deadline.
    gate = Gate()
    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="slow")]), Reply(text="after")])
    limits = Limits(turn_timeout=30)
    d = LoopDefinition(name="d", model=model, tools=[slow_tool(gate)], limits=limits)
    async with open_journal("memory:") as journal, Session.create(journal, d, session_id="s") as s:
        await s.submit("go")
        await gate.entered.wait()
        await s.pause()
        gate.release.set()
        await s.wait_idle()
        await trio.sleep(3600)  # a person's hour away, far past the turn's deadline
        assert (await s.snapshot()).turn_open
        await s.resume()
        await s.wait_idle()
        [ended] = await events_of(journal, "s", TurnEnded)
    assert ended.outcome == "completed"
