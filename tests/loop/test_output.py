"""Typed outputs: the final-answer tool, retries, invalid_output, Session.result."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from journal import open_journal
from journal.content import ToolResult
from journal.events import Notice, SteerQueued, TurnEnded
from loopruntime import Limits, LoopDefinition, Mode, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.output import FINAL_ANSWER, OUTPUT_REMINDER
from session import NoResultError, Session
from session.replay import check
from tests.support.loops import events_of


class Weather(msgspec.Struct, forbid_unknown_fields=True):
    city: str
    celsius: int


def answer(**fields: object) -> Reply:
    return Reply(tool_calls=[ToolCall(name=FINAL_ANSWER, input=dict(fields))])


def weather_loop(*replies: Reply, retries: int = 3) -> tuple[LoopDefinition, ScriptedModel]:
    model = ScriptedModel(list(replies))
    return (
        LoopDefinition(
            name="weather",
            model=model,
            output=Weather,
            limits=Limits(max_output_retries=retries),
        ),
        model,
    )


async def test_valid_first_time(tmp_path: Path) -> None:
    definition, model = weather_loop(answer(city="Oslo", celsius=4))
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("weather in Oslo?")
            await s.wait_idle()
            assert await s.result() == Weather(city="Oslo", celsius=4)
            assert await s.result(1) == Weather(city="Oslo", celsius=4)
        ended = await events_of(journal, "s", TurnEnded)
        assert [(e.outcome, e.output) for e in ended] == [
            ("completed", {"city": "Oslo", "celsius": 4})
        ]
        # The model was offered the final-answer tool with the type's schema.
        (tool,) = model.requests[0].tools
        assert tool.name == FINAL_ANSWER
        assert tool.input_schema["properties"] == {
            "city": {"type": "string"},
            "celsius": {"type": "integer"},
        }
        assert tool.input_schema["required"] == ["city", "celsius"]
        assert len(model.requests) == 1  # the accepted answer ends the turn
        assert not (await check(journal, "s")).problems


async def test_invalid_then_valid(tmp_path: Path) -> None:
    definition, model = weather_loop(
        answer(city="Oslo", celsius="cold"),
        Reply(text="It is cold in Oslo."),  # no final answer at all: reminded
        answer(city="Oslo", celsius=4),
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("weather in Oslo?")
            await s.wait_idle()
            assert await s.result() == Weather(city="Oslo", celsius=4)
            state = await s.snapshot()
            assert state.turn_output_failures == 2
        # The validation error named the field, and the model saw it.
        second = model.requests[1].messages[-1]
        (result,) = [b for b in second.blocks if isinstance(b, ToolResult)]
        assert result.is_error
        assert "$.celsius" in result.content[0].text  # type: ignore[union-attr]
        # The reply without an answer got the reminder, as steering.
        assert any(q.text == OUTPUT_REMINDER for q in await events_of(journal, "s", SteerQueued))
        third = model.requests[2].messages[-1]
        assert third.blocks[0].text == OUTPUT_REMINDER  # type: ignore[union-attr]
        (ended,) = await events_of(journal, "s", TurnEnded)
        assert ended.outcome == "completed"
        assert not (await check(journal, "s")).problems


async def test_never_valid_ends_with_invalid_output(tmp_path: Path) -> None:
    definition, model = weather_loop(
        answer(city="Oslo"),
        answer(town="Oslo", celsius=1),
        Reply(text="sunny"),
        answer(city=3, celsius=1),
        retries=2,
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("weather?")
            await s.wait_idle()
            with pytest.raises(NoResultError, match="invalid_output"):
                await s.result()
        (ended,) = await events_of(journal, "s", TurnEnded)
        assert (ended.outcome, ended.code, ended.output) == (
            "invalid_output",
            "output.invalid",
            None,
        )
        assert "max_output_retries=2" in ended.detail
        assert len(model.requests) == 3  # 1 try + 2 retries; the fourth reply is never asked for
        assert [n.code for n in await events_of(journal, "s", Notice)] == ["output_required"]
        assert not (await check(journal, "s")).problems


async def test_output_after_restore(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    definition, _ = weather_loop(answer(city="Oslo", celsius=4), answer(city="Rome", celsius=20))
    async with open_journal(url) as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("Oslo?")
            await s.wait_idle()
            await s.submit("Rome?")
            await s.wait_idle()
    restored, _ = weather_loop()
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", restored) as s:
            assert await s.result() == Weather(city="Rome", celsius=20)
            assert await s.result(1) == Weather(city="Oslo", celsius=4)
            with pytest.raises(NoResultError, match="no ended turn 3"):
                await s.result(3)
            assert (await s.snapshot()).last_output == {"city": "Rome", "celsius": 20}


async def test_a_mode_drops_or_changes_the_output_type(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            Reply(text="plain words"),
            Reply(tool_calls=[ToolCall(name=FINAL_ANSWER, input={"value": 7})]),
        ]
    )
    definition = LoopDefinition(
        name="modes",
        model=model,
        output=Weather,
        modes=[Mode(name="text", output=None), Mode(name="count", output=int)],
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.change_mode("text")
            await s.submit("talk")
            await s.wait_idle()
            assert await s.result() == "plain words"
            assert model.requests[0].tools == ()
            await s.change_mode("count")
            await s.submit("count")
            await s.wait_idle()
            assert await s.result() == 7
            assert await s.result(1) == "plain words"
            schema = model.requests[1].tools[0].input_schema
            assert schema == {
                "type": "object",
                "properties": {"value": {"type": "integer"}},
                "required": ["value"],
            }


async def test_text_output_stays_the_default(tmp_path: Path) -> None:
    model = ScriptedModel([Reply(text="hello")])
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(
            journal, LoopDefinition(name="t", model=model), session_id="s"
        ) as s:
            with pytest.raises(NoResultError, match="has not ended a turn"):
                await s.result()
            await s.submit("hi")
            await s.wait_idle()
            assert await s.result() == "hello"
            assert model.requests[0].tools == ()


class NotDescribable:
    pass


def test_an_output_type_msgspec_cannot_describe_is_refused() -> None:
    with pytest.raises(TypeError, match=r"loop definition 'bad'.*NotDescribable"):
        LoopDefinition(name="bad", model=ScriptedModel(), output=NotDescribable)
    with pytest.raises(TypeError, match=r"mode 'm'.*NotDescribable"):
        Mode(name="m", output=NotDescribable)


def test_a_tool_named_like_the_final_answer_tool_is_refused() -> None:
    @tool(permission="allow")
    async def final_answer(ctx: ToolContext, *, x: int) -> str:
        """Clashes."""
        return ""

    with pytest.raises(ValueError, match="final_answer"):
        LoopDefinition(name="c", model=ScriptedModel(), output=Weather, tools=[final_answer])


def test_max_output_retries_is_checked() -> None:
    with pytest.raises(ValueError, match="max_output_retries"):
        Limits(max_output_retries=-1)
