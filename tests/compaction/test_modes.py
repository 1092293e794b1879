"""Modes: named variants of a definition, switched by a journaled event that
takes effect at the next turn, and re-resolved by name on restore."""

from __future__ import annotations

import pytest
import trio

from journal import open_journal
from journal.events import LoopModeChanged
from loopruntime import Limits, LoopDefinition, Mode, ModeNotFoundError, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.loops import events_of, tags


@tool(permission="allow")
async def add(ctx: ToolContext, *, a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@tool(permission="allow")
async def shout(ctx: ToolContext, *, text: str) -> str:
    """Say it loudly."""
    return text.upper()


def definition(default: ScriptedModel, review: ScriptedModel) -> LoopDefinition:
    return LoopDefinition(
        name="modal",
        model=default,
        system="default instructions",
        tools=[add, shout],
        modes=[
            Mode(
                name="review",
                model=review,
                system="review carefully",
                tools=["add"],
                limits=Limits(max_tokens=123),
            ),
            Mode(name="quiet", system="say little"),
        ],
    )


async def test_change_mode_applies_at_the_next_turn_not_the_running_one(
    autojump_clock: trio.abc.Clock,
) -> None:
    default = ScriptedModel(
        [
            Reply(
                text="let me add these two numbers",
                tool_calls=[ToolCall(name="add", input={"a": 1, "b": 2})],
                chunk_size=4,
                chunk_delay=1.0,
            ),
            Reply(text="3"),
        ]
    )
    review = ScriptedModel([Reply(text="reviewed")])
    d = definition(default, review)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("add 1 and 2")
            await trio.sleep(1.5)  # the first reply is streaming
            await s.change_mode("review")
            running = await s.snapshot()
            assert running.mode == "review"  # committed at once
            assert running.turn_open and running.open_call is not None
            await s.wait_idle()
            await s.submit("check it")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        [changed] = await events_of(journal, s.id, LoopModeChanged)
        seq = await tags(journal, s.id)
    assert changed.mode == "review"
    # The running turn finished on the default model, both of its steps.
    assert [r.system for r in default.requests] == ["default instructions"] * 2
    assert [[t.name for t in r.tools] for r in default.requests] == [["add", "shout"]] * 2
    assert seq.index("loop.mode_changed") < seq.index("turn.ended")
    # The next turn used the mode's model, instructions, tools and limits.
    [request] = review.requests
    assert request.system == "review carefully"
    assert [t.name for t in request.tools] == ["add"]
    assert request.max_tokens == 123
    assert state.mode == "review" and state.turn_index == 2


async def test_mode_fields_fall_back_to_the_definition_and_none_returns_to_it() -> None:
    default = ScriptedModel([Reply(text="one"), Reply(text="two")])
    d = definition(default, ScriptedModel())
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.change_mode("quiet")
            await s.submit("a")
            await s.wait_idle()
            await s.change_mode(None)
            await s.submit("b")
            await s.wait_idle()
            state = await s.snapshot()
        changes = await events_of(journal, s.id, LoopModeChanged)
    assert [c.mode for c in changes] == ["quiet", None]
    quiet, back = default.requests
    assert quiet.system == "say little" and [t.name for t in quiet.tools] == ["add", "shout"]
    assert back.system == "default instructions"
    assert state.mode is None


async def test_unknown_mode_is_a_named_error_and_commits_nothing() -> None:
    default = ScriptedModel([Reply(text="still here")])
    d = definition(default, ScriptedModel())
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            before = await tags(journal, s.id)
            with pytest.raises(ModeNotFoundError, match="has no mode 'nope'") as info:
                await s.change_mode("nope")
            assert info.value.code == "mode.unknown"
            assert "review, quiet" in str(info.value)
            assert await tags(journal, s.id) == before
            await s.submit("hello")  # the loop is still usable
            await s.wait_idle()
            state = await s.snapshot()
    assert state.mode is None and state.last_outcome == "completed"


async def test_restore_re_resolves_the_mode_by_name_from_the_current_definition() -> None:
    async with open_journal("memory:") as journal:
        d = definition(ScriptedModel([Reply(text="x")]), ScriptedModel())
        async with Session.create(journal, d) as s:
            await s.change_mode("review")
        newer_review = ScriptedModel([Reply(text="from the new review model")])
        restored = LoopDefinition(
            name="modal",
            model=ScriptedModel(),
            system="default instructions",
            tools=[add, shout],
            modes=[Mode(name="review", model=newer_review, system="review, version 2")],
        )
        async with Session.restore(journal, s.id, restored) as r:
            assert (await r.snapshot()).mode == "review"
            await r.submit("go")
            await r.wait_idle()
            await r.verify()
    [request] = newer_review.requests
    assert request.system == "review, version 2"
    assert [t.name for t in request.tools] == ["add", "shout"]


async def test_restore_fails_when_the_definition_lost_the_journaled_mode() -> None:
    async with open_journal("memory:") as journal:
        d = definition(ScriptedModel(), ScriptedModel())
        async with Session.create(journal, d) as s:
            await s.change_mode("review")
        head = len(await tags(journal, s.id))
        lacking = LoopDefinition(name="modal", model=ScriptedModel(), modes=[Mode(name="quiet")])
        with pytest.raises(ModeNotFoundError) as info:
            async with Session.restore(journal, s.id, lacking):
                raise AssertionError("restore should have failed")
        assert len(await tags(journal, s.id)) == head  # nothing committed
    message = str(info.value)
    assert "'review'" in message and "loop main" in message and s.id in message
    assert "modes: quiet" in message


def test_limits_under_a_mode_are_those_the_mode_resolves_to() -> None:
    d = definition(ScriptedModel([]), ScriptedModel([]))
    for name in (None, "review"):
        assert d.limits_under(name) == d.resolved(name).limits
    assert d.limits_under("review") != d.limits_under(None)
    with pytest.raises(ModeNotFoundError):
        d.limits_under("nope")
