"""AnthropicModel against a local server speaking the Messages SSE protocol.

No mocks: the real ``anthropic.AsyncAnthropic`` client and its real HTTP
stack talk to ``tests.support.sse_server`` on 127.0.0.1 inside the test's
trio run.  Event payloads follow the shapes the API records (message_start
with usage, content_block_* with index, message_delta with stop_reason and
cumulative usage).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import msgspec
import pytest
import trio

from journal.content import (
    BlockStarted,
    BlockStopped,
    Image,
    InputJsonDelta,
    Message,
    RedactedThinking,
    SignatureDelta,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolResult,
    ToolUse,
    Usage,
)
from loopruntime.errors import ModelError
from loopruntime.model import (
    Delta,
    Model,
    ModelRequest,
    StopDelta,
    ToolSchema,
    UsageDelta,
)
from loopruntime.models.anthropic import AnthropicModel, api_messages, request_params
from tests.support.model_calls import HELLO, assemble, collect, collect_until_error
from tests.support.sse_server import (
    Drop,
    Event,
    Hangup,
    Hold,
    Raw,
    Reply,
    SSEServer,
    Status,
    Stream,
    open_sse_server,
)

KEY = "sk-ant-test-0123456789abcdef"
MODEL = "claude-test-1"
EPHEMERAL = {"type": "ephemeral"}


# -- recorded-shape events ----------------------------------------------------


def message_start(input_tokens: int = 25, cache_read: int = 0, cache_creation: int = 0) -> Event:
    return Event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": 1,
                    "cache_read_input_tokens": cache_read,
                    "cache_creation_input_tokens": cache_creation,
                },
            },
        },
    )


def block_start(index: int, block: dict[str, Any]) -> Event:
    return Event(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_delta(index: int, delta: dict[str, Any]) -> Event:
    return Event(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def text(index: int, value: str) -> Event:
    return block_delta(index, {"type": "text_delta", "text": value})


def block_stop(index: int) -> Event:
    return Event("content_block_stop", {"type": "content_block_stop", "index": index})


def message_delta(stop_reason: str, output_tokens: int = 12) -> Event:
    return Event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
    )


def message_stop() -> Event:
    return Event("message_stop", {"type": "message_stop"})


def ping() -> Event:
    return Event("ping", {"type": "ping"})


def error_event(error_type: str, message: str) -> Event:
    return Event("error", {"type": "error", "error": {"type": error_type, "message": message}})


TEXT_START = {"type": "text", "text": ""}


def text_reply(*parts: str, stop_reason: str = "end_turn") -> Stream:
    return Stream(
        [
            message_start(),
            block_start(0, TEXT_START),
            ping(),
            *(text(0, p) for p in parts),
            block_stop(0),
            message_delta(stop_reason),
            message_stop(),
        ]
    )


# -- helpers ------------------------------------------------------------------


@asynccontextmanager
async def serve(
    replies: list[Reply], **options: Any
) -> AsyncIterator[tuple[SSEServer, AnthropicModel]]:
    async with open_sse_server(replies) as server:
        async with AnthropicModel(MODEL, api_key=KEY, base_url=server.url, **options) as model:
            yield server, model


def usage(**fields: int) -> UsageDelta:
    return UsageDelta(usage=Usage(**fields))


# -- streams ------------------------------------------------------------------


async def test_text_reply_yields_pieces_usage_and_stop() -> None:
    reply = Stream(
        [
            message_start(input_tokens=2100, cache_read=1800, cache_creation=300),
            block_start(0, TEXT_START),
            ping(),
            text(0, "Hello"),
            text(0, ", world"),
            block_stop(0),
            message_delta("end_turn", output_tokens=7),
            message_stop(),
        ]
    )
    async with serve([reply]) as (server, model):
        deltas = await collect(model)

    assert deltas == [
        usage(
            input_tokens=2100, output_tokens=1, cache_read_tokens=1800, cache_creation_tokens=300
        ),
        BlockStarted(index=0, kind="text"),
        TextDelta(index=0, text="Hello"),
        TextDelta(index=0, text=", world"),
        BlockStopped(index=0),
        usage(output_tokens=7),
        StopDelta(stop_reason="end_turn"),
    ]
    acc = assemble(deltas)
    assert acc.message() == Message(role="assistant", blocks=(Text(text="Hello, world"),))
    assert acc.stop_reason == "end_turn"
    assert acc.usage == Usage(
        input_tokens=2100, output_tokens=7, cache_read_tokens=1800, cache_creation_tokens=300
    )
    assert len(server.requests) == 1


async def test_thinking_with_signature_then_text() -> None:
    reply = Stream(
        [
            message_start(),
            block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            block_delta(0, {"type": "thinking_delta", "thinking": "The user greets; "}),
            block_delta(0, {"type": "thinking_delta", "thinking": "greet back."}),
            block_delta(0, {"type": "signature_delta", "signature": "EqQBCkYIBRgC"}),
            block_stop(0),
            block_start(1, TEXT_START),
            text(1, "Hi!"),
            block_stop(1),
            message_delta("end_turn"),
            message_stop(),
        ]
    )
    async with serve([reply]) as (_, model):
        deltas = await collect(model)

    assert deltas[1:6] == [
        BlockStarted(index=0, kind="thinking"),
        ThinkingDelta(index=0, thinking="The user greets; "),
        ThinkingDelta(index=0, thinking="greet back."),
        SignatureDelta(index=0, signature="EqQBCkYIBRgC"),
        BlockStopped(index=0),
    ]
    assert assemble(deltas).message().blocks == (
        Thinking(thinking="The user greets; greet back.", signature="EqQBCkYIBRgC"),
        Text(text="Hi!"),
    )


async def test_redacted_thinking_carries_its_data() -> None:
    reply = Stream(
        [
            message_start(),
            block_start(0, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}),
            block_stop(0),
            block_start(1, TEXT_START),
            text(1, "Done."),
            block_stop(1),
            message_delta("end_turn"),
            message_stop(),
        ]
    )
    async with serve([reply]) as (_, model):
        deltas = await collect(model)

    assert BlockStarted(index=0, kind="redacted_thinking", data="EmwKAhgBEgy3va3pzix") in deltas
    assert assemble(deltas).message().blocks == (
        RedactedThinking(data="EmwKAhgBEgy3va3pzix"),
        Text(text="Done."),
    )


async def test_tool_use_streams_partial_json() -> None:
    reply = Stream(
        [
            message_start(),
            block_start(0, TEXT_START),
            text(0, "Let me look."),
            block_stop(0),
            block_start(1, {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {}}),
            block_delta(1, {"type": "input_json_delta", "partial_json": ""}),
            block_delta(1, {"type": "input_json_delta", "partial_json": '{"path": "a.t'}),
            block_delta(1, {"type": "input_json_delta", "partial_json": 'oml", "limit": 3}'}),
            block_stop(1),
            message_delta("tool_use"),
            message_stop(),
        ]
    )
    async with serve([reply]) as (_, model):
        deltas = await collect(model)

    assert deltas[4:9] == [
        BlockStarted(index=1, kind="tool_use", id="toolu_01", name="lookup"),
        InputJsonDelta(index=1, partial_json=""),
        InputJsonDelta(index=1, partial_json='{"path": "a.t'),
        InputJsonDelta(index=1, partial_json='oml", "limit": 3}'),
        BlockStopped(index=1),
    ]
    acc = assemble(deltas)
    assert acc.stop_reason == "tool_use"
    assert acc.tool_uses() == [
        ToolUse(id="toolu_01", name="lookup", input={"path": "a.toml", "limit": 3})
    ]
    assert acc.invalid_tool_inputs == {}


async def test_invalid_tool_json_is_passed_through_unchanged() -> None:
    reply = Stream(
        [
            message_start(),
            block_start(0, {"type": "tool_use", "id": "toolu_02", "name": "lookup", "input": {}}),
            block_delta(0, {"type": "input_json_delta", "partial_json": '{"path": '}),
            block_delta(0, {"type": "input_json_delta", "partial_json": "a.toml}"}),
            block_stop(0),
            message_delta("tool_use"),
            message_stop(),
        ]
    )
    async with serve([reply]) as (_, model):
        deltas = await collect(model)

    assert [d.partial_json for d in deltas if isinstance(d, InputJsonDelta)] == [
        '{"path": ',
        "a.toml}",
    ]
    acc = assemble(deltas)
    acc.message()
    assert "not valid JSON" in acc.invalid_tool_inputs["toolu_02"]


@pytest.mark.parametrize(
    "stop_reason",
    ["end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"],
)
async def test_every_stop_reason_is_reported(stop_reason: str) -> None:
    async with serve([text_reply("ok", stop_reason=stop_reason)]) as (_, model):
        deltas = await collect(model)
    assert deltas[-1] == StopDelta(stop_reason=stop_reason)
    assert assemble(deltas).stop_reason == stop_reason


async def test_unknown_block_and_event_types_are_skipped_without_losing_text() -> None:
    reply = Stream(
        [
            message_start(),
            block_start(0, TEXT_START),
            text(0, "Before. "),
            block_stop(0),
            # A server-tool block the runtime does not model: skipped whole.
            block_start(
                1,
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            ),
            block_delta(1, {"type": "input_json_delta", "partial_json": '{"query": "trio"}'}),
            block_stop(1),
            # A block type from a newer API version that streams text: text kept.
            block_start(2, {"type": "hologram", "frames": 3}),
            block_delta(2, {"type": "hologram_delta", "frame": "AAAA"}),
            block_delta(2, {"type": "text_delta", "text": "Inside. "}),
            block_stop(2),
            Event("message_annotation", {"type": "message_annotation", "note": "new event type"}),
            block_start(3, TEXT_START),
            block_delta(3, {"type": "citations_delta", "citation": {"type": "char_location"}}),
            text(3, "After."),
            block_stop(3),
            message_delta("end_turn"),
            message_stop(),
        ]
    )
    async with serve([reply]) as (_, model):
        deltas = await collect(model)

    assert not any(getattr(d, "index", None) == 1 for d in deltas)
    assert [d for d in deltas if getattr(d, "index", None) == 2] == [
        BlockStarted(index=2, kind="text"),
        TextDelta(index=2, text="Inside. "),
        BlockStopped(index=2),
    ]
    acc = assemble(deltas)
    assert acc.message().blocks == (
        Text(text="Before. "),
        Text(text="Inside. "),
        Text(text="After."),
    )
    assert acc.stop_reason == "end_turn"


async def test_empty_response_yields_usage_only() -> None:
    async with serve([Stream([message_start(input_tokens=9), message_stop()])]) as (_, model):
        deltas = await collect(model)
    assert deltas == [usage(input_tokens=9, output_tokens=1)]
    acc = assemble(deltas)
    assert acc.empty
    assert acc.stop_reason is None


# -- the request on the wire --------------------------------------------------


class Lookup(msgspec.Struct, kw_only=True):
    """Look a file up."""

    path: str
    limit: int = 10


PNG = "iVBORw0KGgo="


async def test_request_maps_conversation_tools_and_cache_breakpoints() -> None:
    schema = msgspec.json.schema(Lookup)
    request = ModelRequest(
        system="You are a careful assistant.",
        messages=(
            Message(
                role="user",
                blocks=(Text(text="Find the config."), Image(media_type="image/png", data=PNG)),
            ),
            Message(
                role="assistant",
                blocks=(
                    Thinking(thinking="Look in a.toml.", signature="sig-1"),
                    Thinking(thinking="cut off before its signature"),
                    Text(text="Looking."),
                    ToolUse(id="toolu_1", name="lookup", input={"path": "a.toml"}),
                ),
            ),
            Message(
                role="user",
                blocks=(
                    ToolResult(
                        tool_use_id="toolu_1",
                        content=(Text(text="found"), Image(media_type="image/png", data=PNG)),
                    ),
                ),
            ),
            Message(role="user", blocks=(Text(text="Also check b.toml."),)),
            Message(
                role="assistant",
                blocks=(
                    RedactedThinking(data="opaque"),
                    ToolUse(id="toolu_2", name="lookup", input={"path": "b.toml"}),
                ),
            ),
            Message(
                role="user",
                blocks=(
                    ToolResult(
                        tool_use_id="toolu_2", content=(Text(text="no such file"),), is_error=True
                    ),
                ),
            ),
            Message(
                role="user",
                blocks=(
                    Text(text="[interrupted: notice text is sent like any text]"),
                    Text(text="  "),
                ),
                synthetic=True,
            ),
        ),
        tools=(ToolSchema(name="lookup", description="Look a file up.", input_schema=schema),),
        tool_choice="any",
        max_tokens=1000,
        options={"metadata": {"user_id": "u-1"}},
    )
    async with serve([text_reply("ok")], max_tokens=8192, thinking=2048) as (server, model):
        await collect(model, request)

    [sent] = server.requests
    assert (sent.method, sent.target) == ("POST", "/v1/messages")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", sent.headers["anthropic-version"])
    assert sent.headers["content-type"] == "application/json"
    # The SDK saw trio (via sniffio) and its retries are off: ours decide.
    assert sent.headers["x-stainless-async"] == "async:trio"
    assert sent.headers["x-stainless-retry-count"] == "0"
    # The key travels in the authorization header and nowhere else.
    assert [k for k, v in sent.headers.items() if KEY in v] == ["authorization"]

    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert sent.body == {
        "model": MODEL,
        "max_tokens": 8192,
        "stream": True,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "metadata": {"user_id": "u-1"},
        "system": [
            {"type": "text", "text": "You are a careful assistant.", "cache_control": EPHEMERAL}
        ],
        "tools": [{"name": "lookup", "description": "Look a file up.", "input_schema": schema}],
        "tool_choice": {"type": "any"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Find the config."}, png]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Look in a.toml.", "signature": "sig-1"},
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "lookup",
                        "input": {"path": "a.toml"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "found"}, png],
                    },
                    # The previous request ended here: read from the cache.
                    {"type": "text", "text": "Also check b.toml.", "cache_control": EPHEMERAL},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": "opaque"},
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "lookup",
                        "input": {"path": "b.toml"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "no such file"}],
                        "is_error": True,
                    },
                    # The newest message: written to the cache for the next call.
                    {
                        "type": "text",
                        "text": "[interrupted: notice text is sent like any text]",
                        "cache_control": EPHEMERAL,
                    },
                ],
            },
        ],
    }


async def test_request_defaults_without_tools_or_cache() -> None:
    async with serve([text_reply("ok")], prompt_cache=False) as (server, model):
        await collect(model, ModelRequest(system="", messages=HELLO.messages, max_tokens=321))
    assert server.requests[0].body == {
        "model": MODEL,
        "max_tokens": 321,
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


def test_cache_breakpoints_follow_the_conversation() -> None:
    def marked(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
        return [
            (i, j)
            for i, m in enumerate(messages)
            for j, b in enumerate(m["content"])
            if "cache_control" in b
        ]

    user = Message(role="user", blocks=(Text(text="q"),))
    first_turn = api_messages([user])
    assert marked(first_turn) == [(0, 0)]

    # An assistant reply ending in thinking: the breakpoint skips to the text
    # before it (thinking blocks cannot carry cache_control).
    reply = Message(
        role="assistant",
        blocks=(Text(text="a"), Thinking(thinking="t", signature="s")),
    )
    assert marked(api_messages([user, reply])) == [(1, 0)]
    assert marked(api_messages([user, reply, user])) == [(0, 0), (2, 0)]
    assert marked(api_messages([user, reply, user, reply, user])) == [(2, 0), (4, 0)]
    assert marked(api_messages([user, reply, user], prompt_cache=False)) == []


def test_thinking_budget_and_max_tokens() -> None:
    request = ModelRequest(system="", messages=HELLO.messages, max_tokens=1000)
    budget = {"type": "enabled", "budget_tokens": 2048}
    # No max_tokens configured: the budget comes on top of the reply's allowance.
    params = request_params(request, model=MODEL, thinking=budget)
    assert (params["max_tokens"], params["thinking"]) == (3048, budget)
    # A configured max_tokens is taken as given.
    assert (
        request_params(request, model=MODEL, max_tokens=9000, thinking=budget)["max_tokens"] == 9000
    )
    # options["thinking"] overrides the configured thinking for one call.
    adaptive = ModelRequest(
        system="",
        messages=HELLO.messages,
        max_tokens=1000,
        options={"thinking": {"type": "adaptive"}},
    )
    params = request_params(adaptive, model=MODEL, thinking=budget)
    assert (params["max_tokens"], params["thinking"]) == (1000, {"type": "adaptive"})
    assert "extra_body" not in params


async def test_option_the_adapter_owns_is_refused() -> None:
    async with serve([]) as (server, model):
        request = ModelRequest(system="", messages=HELLO.messages, options={"model": "other"})
        with pytest.raises(ModelError) as caught:
            await collect(model, request)
    assert caught.value.error_kind == "invalid_request"
    assert "model" in str(caught.value)
    assert server.requests == []


# -- errors and retries -------------------------------------------------------


async def test_rate_limit_is_retried_after_retry_after(autojump_clock: trio.abc.Clock) -> None:
    replies: list[Reply] = [
        Status(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
            headers=[("retry-after", "3")],
        ),
        text_reply("ok"),
    ]
    async with serve(replies) as (server, model):
        deltas = await collect(model)

    assert assemble(deltas).message().blocks == (Text(text="ok"),)
    first, second = server.requests
    assert second.at - first.at == pytest.approx(3.0)
    assert first.body == second.body
    # The SDK did not retry on its own: both attempts are its first.
    assert (
        first.headers["x-stainless-retry-count"] == second.headers["x-stainless-retry-count"] == "0"
    )


async def test_retry_after_ms_is_preferred(autojump_clock: trio.abc.Clock) -> None:
    replies: list[Reply] = [
        Status(
            429,
            "rate_limit_error",
            "slow down",
            headers=[("retry-after-ms", "1500"), ("retry-after", "2")],
        ),
        text_reply("ok"),
    ]
    async with serve(replies) as (server, model):
        await collect(model)
    first, second = server.requests
    assert second.at - first.at == pytest.approx(1.5)


async def test_overloaded_backs_off_then_gives_up(autojump_clock: trio.abc.Clock) -> None:
    replies: list[Reply] = [Status(529, "overloaded_error", "Overloaded") for _ in range(3)]
    async with serve([*replies, text_reply("never sent")]) as (server, model):
        deltas, err = await collect_until_error(model)

    assert deltas == []
    assert len(server.requests) == 3  # the first attempt and max_retries=2 retries
    assert (err.error_kind, err.status, err.retryable, err.code) == (
        "overloaded",
        529,
        True,
        "model.overloaded",
    )
    assert "HTTP 529" in str(err) and "attempt 3" in str(err) and "try again" in str(err)
    gaps = [b.at - a.at for a, b in zip(server.requests, server.requests[1:], strict=False)]
    # Exponential backoff without retry-after: 0.5 s then 1 s, less up to 25 % jitter.
    assert 0.375 <= gaps[0] <= 0.5
    assert 0.75 <= gaps[1] <= 1.0


@pytest.mark.parametrize("value", ["nan", "NaN", "inf"])
async def test_retry_after_that_is_not_a_number_of_seconds_is_ignored(
    autojump_clock: trio.abc.Clock, value: str
) -> None:
    replies: list[Reply] = [
        Status(529, "overloaded_error", "Overloaded", headers=[("retry-after", value)]),
        text_reply("ok"),
    ]
    async with serve(replies) as (server, model):
        deltas = await collect(model)
    assert assemble(deltas).message().blocks == (Text(text="ok"),)
    # The unreadable header is treated as absent: the default backoff applies.
    first, second = server.requests
    assert 0.375 <= second.at - first.at <= 0.5


async def test_overloaded_then_success(autojump_clock: trio.abc.Clock) -> None:
    async with serve([Status(529, "overloaded_error", "Overloaded"), text_reply("ok")]) as (
        server,
        model,
    ):
        deltas = await collect(model)
    assert assemble(deltas).message().blocks == (Text(text="ok"),)
    assert len(server.requests) == 2


async def test_server_says_do_not_retry(autojump_clock: trio.abc.Clock) -> None:
    replies: list[Reply] = [
        Status(529, "overloaded_error", "Overloaded", headers=[("x-should-retry", "false")]),
        text_reply("never sent"),
    ]
    async with serve(replies) as (server, model):
        _, err = await collect_until_error(model)
    assert (err.error_kind, err.retryable) == ("overloaded", False)
    assert len(server.requests) == 1


async def test_retry_after_longer_than_allowed_is_raised(autojump_clock: trio.abc.Clock) -> None:
    replies: list[Reply] = [
        Status(429, "rate_limit_error", "slow down", headers=[("retry-after", "120")]),
        text_reply("never sent"),
    ]
    async with serve(replies, max_retry_wait=60.0) as (server, model):
        _, err = await collect_until_error(model)
    assert (err.error_kind, err.status, err.retryable, err.retry_after) == (
        "rate_limited",
        429,
        True,
        120.0,
    )
    assert "retry after 120 s" in str(err)
    assert len(server.requests) == 1


async def test_unauthorized_is_not_retried() -> None:
    replies: list[Reply] = [
        Status(401, "authentication_error", "invalid x-api-key"),
        text_reply("never sent"),
    ]
    async with serve(replies) as (server, model):
        _, err = await collect_until_error(model)
    assert (err.error_kind, err.status, err.retryable, err.code) == (
        "authentication",
        401,
        False,
        "model.authentication",
    )
    assert "ANTHROPIC_API_KEY" in str(err)
    assert KEY not in str(err)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("status", "error_type", "kind", "retryable"),
    [
        (400, "invalid_request_error", "invalid_request", False),
        (403, "permission_error", "permission", False),
        (404, "not_found_error", "not_found", False),
        (413, "request_too_large", "invalid_request", False),
        (500, "api_error", "server", True),
        (503, "api_error", "server", True),
    ],
)
async def test_status_errors_map_to_kinds(
    status: int, error_type: str, kind: str, retryable: bool
) -> None:
    async with serve([Status(status, error_type, "details from the API")], max_retries=0) as (
        server,
        model,
    ):
        _, err = await collect_until_error(model)
    assert (err.error_kind, err.status, err.retryable) == (kind, status, retryable)
    assert "details from the API" in str(err)
    assert len(server.requests) == 1


async def test_not_found_names_the_model() -> None:
    async with serve([Status(404, "not_found_error", "model: claude-test-1")]) as (_, model):
        _, err = await collect_until_error(model)
    assert f"model {MODEL!r}" in str(err)


async def test_error_event_after_output_is_not_retried() -> None:
    replies: list[Reply] = [
        Stream(
            [
                message_start(),
                block_start(0, TEXT_START),
                text(0, "Partial"),
                error_event("overloaded_error", "Overloaded"),
            ]
        ),
        text_reply("never sent"),
    ]
    async with serve(replies) as (server, model):
        deltas, err = await collect_until_error(model)

    assert TextDelta(index=0, text="Partial") in deltas
    assert (err.error_kind, err.retryable, err.status) == ("overloaded", False, None)
    assert "was not resent" in str(err)
    assert len(server.requests) == 1
    assert len(server.replies) == 1
    notice = "[truncated]"
    assert assemble(deltas).message(notice=notice).blocks == (
        Text(text="Partial"),
        Text(text=notice),
    )


async def test_error_event_before_content_is_retried(autojump_clock: trio.abc.Clock) -> None:
    replies: list[Reply] = [
        Stream(
            [message_start(input_tokens=111), ping(), error_event("overloaded_error", "Overloaded")]
        ),
        text_reply("ok"),
    ]
    async with serve(replies) as (server, model):
        deltas = await collect(model)

    assert len(server.requests) == 2
    # Only the successful attempt's usage reached the caller.
    assert deltas[0] == usage(input_tokens=25, output_tokens=1)
    assert usage(input_tokens=111, output_tokens=1) not in deltas
    assert assemble(deltas).message().blocks == (Text(text="ok"),)


async def test_dropped_connection_mid_stream_is_a_connection_error() -> None:
    replies: list[Reply] = [
        Stream([message_start(), block_start(0, TEXT_START), text(0, "Half a thou"), Drop()]),
        text_reply("never sent"),
    ]
    async with serve(replies) as (server, model):
        deltas, err = await collect_until_error(model)

    assert deltas == [
        usage(input_tokens=25, output_tokens=1),
        BlockStarted(index=0, kind="text"),
        TextDelta(index=0, text="Half a thou"),
    ]
    assert (err.error_kind, err.retryable, err.code) == ("connection", False, "model.connection")
    assert "RemoteProtocolError" in str(err)
    assert len(server.requests) == 1
    notice = "[truncated]"
    assert assemble(deltas).message(notice=notice).blocks == (
        Text(text="Half a thou"),
        Text(text=notice),
    )


async def test_stream_ending_before_message_stop_is_incomplete() -> None:
    replies: list[Reply] = [
        Stream([message_start(), block_start(0, TEXT_START), text(0, "Half"), block_stop(0)]),
        text_reply("never sent"),
    ]
    async with serve(replies) as (server, model):
        deltas, err = await collect_until_error(model)
    assert TextDelta(index=0, text="Half") in deltas
    assert (err.error_kind, err.code, err.retryable) == (
        "connection",
        "model.connection.incomplete_stream",
        False,
    )
    assert len(server.requests) == 1


async def test_hangup_before_a_response_is_retried(autojump_clock: trio.abc.Clock) -> None:
    async with serve([Hangup(), text_reply("ok")]) as (server, model):
        deltas = await collect(model)
    assert assemble(deltas).message().blocks == (Text(text="ok"),)
    assert len(server.requests) == 2


async def test_unreadable_event_data_is_a_protocol_error() -> None:
    replies: list[Reply] = [
        Stream([Raw(b"event: message_start\ndata: {not json\n\n")]),
        text_reply("never sent"),
    ]
    async with serve(replies) as (server, model):
        _, err = await collect_until_error(model)
    assert (err.error_kind, err.retryable) == ("protocol", False)
    assert "could not be read" in str(err)
    assert len(server.requests) == 1


async def test_cancellation_mid_stream_closes_the_connection() -> None:
    reply = Stream(
        [
            message_start(),
            block_start(0, TEXT_START),
            text(0, "Hel"),
            Hold(),
            text(0, "lo"),
            block_stop(0),
            message_delta("end_turn"),
            message_stop(),
        ]
    )
    async with serve([reply]) as (server, model):
        got: list[Delta] = []
        with trio.CancelScope() as scope:
            async with model.stream(HELLO) as deltas:
                async for delta in deltas:
                    got.append(delta)
                    if isinstance(delta, TextDelta):
                        scope.cancel()
        assert scope.cancelled_caught  # Cancelled propagated; not turned into a ModelError
        assert got[-1] == TextDelta(index=0, text="Hel")
        # A guard so a broken build fails instead of hanging, not a timing
        # assertion: the disconnect normally arrives at once.
        with trio.fail_after(120):
            await server.disconnected.wait()


# -- configuration ------------------------------------------------------------


def test_from_env_needs_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_MODEL", raising=False)
    assert AnthropicModel.from_env() is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", "  ")
    assert AnthropicModel.from_env() is None

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    model = AnthropicModel.from_env("claude-sonnet-4-6")
    assert model is not None
    assert model.name == "anthropic:claude-sonnet-4-6"
    assert model.context_window == 200_000
    assert isinstance(model, Model)
    assert KEY not in repr(model) and KEY not in model.name
    assert KEY not in repr(vars(model))

    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-opus-5-5")
    chosen = AnthropicModel.from_env()
    assert chosen is not None and chosen.name == "anthropic:claude-opus-5-5"


def test_constructor_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(MODEL)
    with pytest.raises(ValueError, match="must be below max_tokens"):
        AnthropicModel(MODEL, api_key=KEY, max_tokens=2000, thinking=4000)
    assert AnthropicModel(MODEL, api_key=KEY, context_window=1_000_000).context_window == 1_000_000
    assert AnthropicModel(MODEL, api_key=KEY, thinking="adaptive").thinking == {"type": "adaptive"}
    client = anthropic.AsyncAnthropic(api_key=KEY, max_retries=0)
    with pytest.raises(ValueError, match="either client= or api_key"):
        AnthropicModel(MODEL, client=client, base_url="http://127.0.0.1:9")


def test_a_key_that_cannot_be_a_header_value_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for bad in (f"{KEY}\nsk-ant-second-key", f"{KEY} {KEY}", f"{KEY}\x00"):
        with pytest.raises(ValueError, match="API key") as caught:
            AnthropicModel(MODEL, api_key=bad)
        assert KEY not in str(caught.value)
        if "\x00" in bad:
            continue  # the environment cannot hold a NUL
        monkeypatch.setenv("ANTHROPIC_API_KEY", bad)
        with pytest.raises(ValueError, match="ANTHROPIC_API_KEY") as caught:
            AnthropicModel.from_env()
        assert KEY not in str(caught.value)


async def test_a_key_the_transport_refuses_never_reaches_the_error() -> None:
    # h11 names the offending header value in its error; a client passed in
    # is not checked by the constructor, so the error itself must not tell it.
    bad = f"{KEY}\nsk-ant-second-key"
    async with open_sse_server([text_reply("never sent")]) as server:
        async with anthropic.AsyncAnthropic(
            api_key=bad, base_url=server.url, max_retries=0
        ) as client:
            model = AnthropicModel(MODEL, client=client, max_retries=0)
            _, err = await collect_until_error(model)
    assert err.error_kind == "connection"
    chain: list[BaseException] = []
    shown: BaseException | None = err
    while shown is not None:
        chain.append(shown)
        shown = None if shown.__suppress_context__ else (shown.__cause__ or shown.__context__)
    assert all(KEY not in str(e) and "second-key" not in str(e) for e in chain), chain
    assert "[redacted]" in str(err)


async def test_a_client_passed_in_is_used_and_left_open() -> None:
    async with open_sse_server([text_reply("ok")]) as server:
        client = anthropic.AsyncAnthropic(api_key="sk-other", base_url=server.url, max_retries=0)
        model = AnthropicModel(MODEL, client=client)
        await collect(model)
        await model.aclose()
        assert not client.is_closed()
        await client.close()
    assert server.requests[0].headers["authorization"] == "Bearer sk-other"
