"""A Session driving Claude through the real SDK against the local SSE server:
tools, the exact requests on the wire, and a stream dying after output."""

from __future__ import annotations

from typing import Any

import msgspec

from journal import open_journal
from journal.content import Text
from loopruntime import LoopDefinition
from loopruntime.models.anthropic import AnthropicModel
from session import Session
from session.replay import check
from tests.models.test_anthropic import (
    KEY,
    MODEL,
    block_delta,
    block_start,
    block_stop,
    message_delta,
    message_start,
    message_stop,
    text,
    text_reply,
)
from tests.support.model_calls import assert_cut_short, one_turn_records, weather_turn
from tests.support.sse_server import Drop, Stream, open_sse_server


def tool_reply() -> Stream:
    return Stream(
        [
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            text(0, "Checking."),
            block_stop(0),
            block_start(1, {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {}}),
            block_delta(1, {"type": "input_json_delta", "partial_json": '{"city": '}),
            block_delta(1, {"type": "input_json_delta", "partial_json": '"Oslo"}'}),
            block_stop(1),
            message_delta("tool_use"),
            message_stop(),
        ]
    )


async def test_a_tool_turn_over_the_real_sdk() -> None:
    async with open_sse_server([tool_reply(), text_reply("Oslo is sunny.")]) as server:
        async with AnthropicModel(MODEL, api_key=KEY, base_url=server.url) as model:
            state, report, serialized = await weather_turn(model)
    assert report.ok, report.summary()
    assert state.messages[-1].blocks == (Text(text="Oslo is sunny."),)
    first, second = (r.body for r in server.requests)
    assert first["tools"][0]["name"] == "weather"
    assert first["tools"][0]["input_schema"]["properties"] == {"city": {"type": "string"}}
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    # The second request answers the tool_use, in the next user message.
    assistant, results = second["messages"][-2], second["messages"][-1]
    assert assistant["role"] == "assistant"
    assert [b["type"] for b in assistant["content"]] == ["text", "tool_use"]
    result: dict[str, Any] = results["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_01"
    assert "Oslo: sunny" in str(result["content"])
    assert KEY.encode() not in serialized  # the key never reaches the journal


async def test_a_stream_dying_after_output_leaves_the_truncated_notice() -> None:
    dying = Stream(
        [
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            text(0, "The answer is"),
            Drop(),
        ]
    )
    async with open_sse_server([dying]) as server:
        async with AnthropicModel(MODEL, api_key=KEY, base_url=server.url) as model:
            records = await one_turn_records(model, "What is the answer?")
    assert len(server.requests) == 1  # never resent after output began
    assert_cut_short(records, "The answer is")


async def test_a_paused_reply_is_continued_without_trailing_whitespace() -> None:
    # pause_turn makes the next call end with the assistant's own message; the
    # API refuses a final assistant message whose content ends in whitespace.
    paused = Stream(
        [
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            text(0, "Searching the web.\n\n"),
            block_stop(0),
            message_delta("pause_turn"),
            message_stop(),
        ]
    )
    async with open_sse_server([paused, text_reply("Found it.")]) as server:
        async with AnthropicModel(MODEL, api_key=KEY, base_url=server.url) as model:
            d = LoopDefinition(name="claude", model=model)
            async with open_journal("memory:") as journal:
                async with Session.create(journal, d) as s:
                    await s.submit("Search for it.")
                    await s.wait_idle()
                    state = await s.snapshot()
    second = server.requests[1].body
    last = second["messages"][-1]
    assert last["role"] == "assistant"
    assert [b["text"] for b in last["content"]] == ["Searching the web."]
    # The journal keeps the reply as it arrived.
    assert state.messages[1].blocks == (Text(text="Searching the web.\n\n"),)
    assert state.messages[-1].blocks == (Text(text="Found it."),)


class Forecast(msgspec.Struct):
    city: str
    celsius: int
    tags: list[str] = []


def final_answer_reply(partial: str) -> Stream:
    return Stream(
        [
            message_start(),
            block_start(
                0, {"type": "tool_use", "id": "toolu_02", "name": "final_answer", "input": {}}
            ),
            block_delta(0, {"type": "input_json_delta", "partial_json": partial}),
            block_stop(0),
            message_delta("tool_use"),
            message_stop(),
        ]
    )


async def test_a_typed_output_over_the_real_sdk() -> None:
    replies = [
        final_answer_reply('{"city": "Oslo", "celsius": "mild"}'),
        final_answer_reply('{"city": "Oslo", "celsius": 4}'),
    ]
    async with open_sse_server(replies) as server:
        async with AnthropicModel(MODEL, api_key=KEY, base_url=server.url) as model:
            d = LoopDefinition(name="claude", model=model, output=Forecast)
            async with open_journal("memory:") as journal:
                async with Session.create(journal, d) as s:
                    await s.submit("Forecast for Oslo?")
                    await s.wait_idle()
                    assert await s.result() == Forecast(city="Oslo", celsius=4)
                report = await check(journal, s.id)
    assert report.ok, report.summary()
    first, second = (r.body for r in server.requests)
    (offered,) = first["tools"]
    assert offered["name"] == "final_answer"
    assert offered["input_schema"] == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "celsius": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        },
        "required": ["city", "celsius"],
    }
    # The validation error reached the model on the wire, naming the field.
    result = second["messages"][-1]["content"][0]
    assert result["is_error"] is True
    assert "$.celsius" in str(result["content"])
