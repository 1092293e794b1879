"""OpenAIModel against a local server speaking the Chat Completions stream.

No mocks: the real ``openai.AsyncOpenAI`` client and its real HTTP stack talk
to ``tests.support.sse_server`` on 127.0.0.1 inside the test's trio run.
Chunks follow the shapes the API sends: ``data:`` lines of
``chat.completion.chunk`` objects, a tool call's arguments in pieces, the
usage chunk ``stream_options.include_usage`` asks for (no choices), and
``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from journal.content import (
    BlockStarted,
    BlockStopped,
    Image,
    InputJsonDelta,
    Message,
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
from loopruntime.models import OpenAIModel
from loopruntime.models.openai import api_messages, request_params
from tests.support.model_calls import HELLO, assemble, collect, collect_until_error
from tests.support.sse_server import (
    Drop,
    Hold,
    Raw,
    Reply,
    SSEServer,
    Status,
    Stream,
    open_sse_server,
)

KEY = "sk-proj-test-0123456789abcdef"
MODEL = "gpt-test-1"


# -- recorded-shape chunks ----------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
) -> Raw:
    """One ``data:`` line of a ``chat.completion.chunk``; with ``usage`` and
    no delta, the closing usage chunk (its ``choices`` is empty)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-01",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": MODEL,
        "choices": [],
    }
    if delta is not None or finish is not None:
        body["choices"] = [
            {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
        ]
    if usage is not None:
        body["usage"] = usage
    return Raw(f"data: {json.dumps(body)}\n\n".encode())


DONE = Raw(b"data: [DONE]\n\n")


def role() -> Raw:
    return chunk({"role": "assistant", "content": ""})


def usage_chunk(prompt: int = 25, completion: int = 12, cached: int = 0) -> Raw:
    return chunk(
        usage={
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
    )


def call_start(index: int, call_id: str, name: str) -> Raw:
    return chunk(
        {
            "tool_calls": [
                {
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
            ]
        }
    )


def call_arguments(index: int, part: str) -> Raw:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})


def text_reply(*parts: str, finish: str = "stop") -> Stream:
    return Stream(
        [
            role(),
            *(chunk({"content": p}) for p in parts),
            chunk(finish=finish),
            usage_chunk(),
            DONE,
        ]
    )


def tool_reply(call_id: str = "call_01", city: str = "Oslo") -> Stream:
    return Stream(
        [
            role(),
            chunk({"content": "Checking."}),
            call_start(0, call_id, "weather"),
            call_arguments(0, '{"city": '),
            call_arguments(0, f'"{city}"}}'),
            chunk(finish="tool_calls"),
            usage_chunk(),
            DONE,
        ]
    )


# -- helpers ------------------------------------------------------------------


@asynccontextmanager
async def serve(
    replies: list[Reply], **options: Any
) -> AsyncIterator[tuple[SSEServer, OpenAIModel]]:
    async with open_sse_server(replies) as server:
        options.setdefault("api_key", KEY)
        async with OpenAIModel(MODEL, base_url=server.url, **options) as model:
            yield server, model


# -- streams ------------------------------------------------------------------


async def test_text_reply_yields_pieces_stop_and_usage() -> None:
    async with serve([text_reply("Hel", "lo")]) as (server, model):
        assert isinstance(model, Model)
        deltas = await collect(model)

    assert deltas == [
        BlockStarted(index=0, kind="text"),
        TextDelta(index=0, text="Hel"),
        TextDelta(index=0, text="lo"),
        BlockStopped(index=0),
        StopDelta(stop_reason="end_turn"),
        UsageDelta(usage=Usage(input_tokens=25, output_tokens=12)),
    ]
    acc = assemble(deltas)
    assert acc.message().blocks == (Text(text="Hello"),)
    assert acc.stop_reason == "end_turn"
    [request] = server.requests
    assert (request.method, request.target) == ("POST", "/chat/completions")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["x-stainless-async"] == "async:trio"
    assert request.body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
        "max_completion_tokens": 4096,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_a_tool_call_streamed_in_pieces() -> None:
    reply = Stream(
        [
            role(),
            call_start(0, "call_a", "weather"),
            call_arguments(0, '{"ci'),
            call_arguments(0, 'ty": "Oslo"}'),
            call_start(1, "call_b", "weather"),
            call_arguments(1, '{"city": "Rome"}'),
            chunk(finish="tool_calls"),
            usage_chunk(prompt=40, completion=30, cached=32),
            DONE,
        ]
    )
    async with serve([reply]) as (_, model):
        deltas = await collect(model)

    assert deltas == [
        BlockStarted(index=0, kind="tool_use", id="call_a", name="weather"),
        InputJsonDelta(index=0, partial_json='{"ci'),
        InputJsonDelta(index=0, partial_json='ty": "Oslo"}'),
        BlockStarted(index=1, kind="tool_use", id="call_b", name="weather"),
        InputJsonDelta(index=1, partial_json='{"city": "Rome"}'),
        BlockStopped(index=0),
        BlockStopped(index=1),
        StopDelta(stop_reason="tool_use"),
        # Cached prompt tokens are counted apart, as Anthropic reports them.
        UsageDelta(usage=Usage(input_tokens=8, output_tokens=30, cache_read_tokens=32)),
    ]
    assert assemble(deltas).tool_uses() == [
        ToolUse(id="call_a", name="weather", input={"city": "Oslo"}),
        ToolUse(id="call_b", name="weather", input={"city": "Rome"}),
    ]


async def test_reasoning_then_text_then_a_tool_call_keep_their_order() -> None:
    reply = Stream(
        [
            role(),
            chunk({"reasoning_content": "The user wants "}),
            chunk({"reasoning_content": "weather."}),
            chunk({"content": "Let me look."}),
            call_start(0, "call_a", "weather"),
            call_arguments(0, '{"city": "Oslo"}'),
            # Some servers say "stop" after streaming tool calls.
            chunk(finish="stop"),
            DONE,
        ]
    )
    async with serve([reply], stream_usage=False) as (server, model):
        deltas = await collect(model)
    assert deltas[:6] == [
        BlockStarted(index=0, kind="thinking"),
        ThinkingDelta(index=0, thinking="The user wants "),
        ThinkingDelta(index=0, thinking="weather."),
        BlockStopped(index=0),
        BlockStarted(index=1, kind="text"),
        TextDelta(index=1, text="Let me look."),
    ]
    acc = assemble(deltas)
    assert acc.message().blocks == (
        Thinking(thinking="The user wants weather."),
        Text(text="Let me look."),
        ToolUse(id="call_a", name="weather", input={"city": "Oslo"}),
    )
    assert acc.stop_reason == "tool_use"
    assert "stream_options" not in server.requests[0].body


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        ("tool_calls", "tool_use"),
        ("eos", "eos"),  # a server's own reason is passed on
    ],
)
async def test_finish_reasons_map_to_stop_reasons(finish: str, stop_reason: str) -> None:
    async with serve([text_reply("x", finish=finish)]) as (_, model):
        deltas = await collect(model)
    assert assemble(deltas).stop_reason == stop_reason


async def test_a_server_without_a_key_is_sent_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with serve([text_reply("ok")], api_key=None) as (server, model):
        await collect(model)
    assert server.requests[0].headers["authorization"] == "Bearer no-key"


# -- request mapping ----------------------------------------------------------


def test_request_maps_conversation_tools_and_results() -> None:
    png = Image(media_type="image/png", data="iVBORw0KGgo=")
    messages = (
        Message(role="user", blocks=(Text(text="Weather in Oslo? Here is a map."), png)),
        Message(
            role="assistant",
            blocks=(
                Thinking(thinking="hidden", signature=""),
                Text(text="Checking."),
                ToolUse(id="call_a", name="weather", input={"city": "Oslo"}),
                ToolUse(id="call_b", name="camera", input={}),
            ),
        ),
        Message(
            role="user",
            blocks=(
                ToolResult(tool_use_id="call_a", content=(Text(text="sunny"),)),
                ToolResult(tool_use_id="call_b", content=(Text(text="a photo"), png)),
                Text(text="Also: is it warm?"),
            ),
        ),
        Message(role="assistant", blocks=(Thinking(thinking="only thinking"),)),
        Message(
            role="user",
            blocks=(ToolResult(tool_use_id="call_c", content=(), is_error=True),),
        ),
    )
    request = ModelRequest(
        system="Be brief.",
        messages=messages,
        tools=(
            ToolSchema(
                name="weather",
                description="Weather in a city.",
                input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
            ),
        ),
        tool_choice="any",
        max_tokens=500,
        options={"temperature": 0.2, "seed": 7},
    )
    params = request_params(request, model=MODEL, max_tokens_field="max_tokens")
    url = "data:image/png;base64,iVBORw0KGgo="
    assert params == {
        "model": MODEL,
        "max_tokens": 500,
        "stream_options": {"include_usage": True},
        "tool_choice": "required",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Weather in a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "extra_body": {"temperature": 0.2, "seed": 7},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather in Oslo? Here is a map."},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            },
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "camera", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_b", "content": "a photo"},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": "Also: is it warm?"},
                ],
            },
            # The thinking-only reply has nothing this API takes back.
            {"role": "tool", "tool_call_id": "call_c", "content": "[tool error] "},
        ],
    }
    assert api_messages("", messages[:1])[0]["role"] == "user"


async def test_option_the_adapter_owns_is_refused() -> None:
    async with serve([]) as (server, model):
        request = ModelRequest(system="", messages=HELLO.messages, options={"stream": False})
        with pytest.raises(ModelError) as caught:
            async with model.stream(request):
                pass
    assert caught.value.code == "model.invalid_option" and "stream" in str(caught.value)
    assert server.requests == []


async def test_options_reach_the_body() -> None:
    request = ModelRequest(system="", messages=HELLO.messages, options={"temperature": 0})
    async with serve([text_reply("ok")], max_tokens=99) as (server, model):
        await collect(model, request)
    body = server.requests[0].body
    assert body["temperature"] == 0 and body["max_completion_tokens"] == 99
    assert body["messages"] == [{"role": "user", "content": "hi"}]


# -- errors and retries -------------------------------------------------------


async def test_rate_limit_is_retried_after_retry_after(autojump_clock: trio.abc.Clock) -> None:
    replies: list[Reply] = [
        Status(429, "requests", "Rate limit reached", headers=[("retry-after", "7")]),
        text_reply("ok"),
    ]
    async with serve(replies) as (server, model):
        deltas = await collect(model)
    assert assemble(deltas).message().blocks == (Text(text="ok"),)
    first, second = server.requests
    assert second.at - first.at == pytest.approx(7.0)
    assert first.body == second.body
    # The SDK did not retry on its own: both attempts are its first.
    assert (
        first.headers["x-stainless-retry-count"] == second.headers["x-stainless-retry-count"] == "0"
    )


async def test_a_server_error_backs_off_then_gives_up(autojump_clock: trio.abc.Clock) -> None:
    failing = Status(500, "server_error", "The server had an error")
    replies: list[Reply] = [failing, failing, failing]
    async with serve([*replies, text_reply("never sent")]) as (server, model):
        deltas, err = await collect_until_error(model)
    assert deltas == []
    assert len(server.requests) == 3  # the first attempt and max_retries=2 retries
    assert (err.error_kind, err.status, err.retryable, err.code) == (
        "server",
        500,
        True,
        "model.server",
    )
    assert "HTTP 500: The server had an error" in str(err) and "attempt 3" in str(err)
    gaps = [b.at - a.at for a, b in zip(server.requests, server.requests[1:], strict=False)]
    assert 0.375 <= gaps[0] <= 0.5
    assert 0.75 <= gaps[1] <= 1.0


async def test_a_server_error_then_success(autojump_clock: trio.abc.Clock) -> None:
    replies: list[Reply] = [Status(500, "server_error", "oops"), text_reply("fine")]
    async with serve(replies) as (server, model):
        deltas = await collect(model)
    assert assemble(deltas).text() == "fine"
    assert len(server.requests) == 2


async def test_an_exhausted_quota_is_not_retried(autojump_clock: trio.abc.Clock) -> None:
    quota = Status(429, "insufficient_quota", "You exceeded your quota", code="insufficient_quota")
    async with serve([quota, text_reply("never sent")]) as (server, model):
        _, err = await collect_until_error(model)
    assert (err.error_kind, err.status, err.retryable) == ("permission", 429, False)
    assert len(server.requests) == 1


async def test_unauthorized_is_not_retried_and_never_shows_the_key() -> None:
    bad = Status(401, "invalid_request_error", f"Incorrect API key provided: {KEY}")
    async with serve([bad, text_reply("never sent")]) as (server, model):
        _, err = await collect_until_error(model)
    assert (err.error_kind, err.status, err.retryable) == ("authentication", 401, False)
    assert KEY not in str(err) and "[redacted]" in str(err)
    assert "OPENAI_API_KEY" in str(err)
    assert err.__cause__ is None  # the SDK's exception shows the key
    assert len(server.requests) == 1


async def test_not_found_names_the_model() -> None:
    missing = Status(404, "invalid_request_error", "The model does not exist")
    async with serve([missing]) as (_, model):
        _, err = await collect_until_error(model)
    assert err.error_kind == "not_found" and repr(MODEL) in str(err)


async def test_a_stream_cut_after_output_is_not_resent() -> None:
    cut = Stream([role(), chunk({"content": "The answer is"}), Drop()])
    async with serve([cut, text_reply("never sent")]) as (server, model):
        deltas, err = await collect_until_error(model)
    assert assemble(deltas).text() == "The answer is"
    assert (err.error_kind, err.retryable) == ("connection", False)
    assert "after part of the reply had arrived" in str(err)
    assert len(server.requests) == 1


async def test_a_stream_cut_before_output_is_retried(autojump_clock: trio.abc.Clock) -> None:
    cut = Stream([role(), Drop()])
    async with serve([cut, text_reply("again")]) as (server, model):
        deltas = await collect(model)
    assert assemble(deltas).text() == "again"
    assert len(server.requests) == 2


async def test_a_stream_cut_after_the_finish_reason_keeps_the_whole_reply() -> None:
    # Only the usage chunk and [DONE] were lost: the reply itself is whole.
    cut = Stream([role(), chunk({"content": "Done."}), chunk(finish="stop"), Drop()])
    async with serve([cut]) as (server, model):
        deltas = await collect(model)
    acc = assemble(deltas)
    assert (acc.text(), acc.stop_reason) == ("Done.", "end_turn")
    assert len(server.requests) == 1


async def test_a_refusal_is_kept_as_text_and_stops_as_one() -> None:
    reply = Stream(
        [
            role(),
            chunk({"content": None, "refusal": "I can't help with that."}),
            chunk(finish="stop"),
            DONE,
        ]
    )
    async with serve([reply]) as (_, model):
        acc = assemble(await collect(model))
    assert (acc.text(), acc.stop_reason) == ("I can't help with that.", "refusal")


async def test_a_stream_ending_without_a_finish_reason_is_incomplete() -> None:
    ended = Stream([role(), chunk({"content": "Half"}), DONE])
    async with serve([ended]) as (_, model):
        deltas, err = await collect_until_error(model)
    assert assemble(deltas).text() == "Half"
    assert err.code == "model.connection.incomplete_stream" and not err.retryable


async def test_an_error_object_in_the_stream_before_output_is_retried(
    autojump_clock: trio.abc.Clock,
) -> None:
    error = Raw(
        b'data: {"error": {"message": "The server is overloaded", "type": "server_error"}}\n\n'
    )
    async with serve([Stream([role(), error]), text_reply("ok")]) as (server, model):
        deltas = await collect(model)
    assert assemble(deltas).text() == "ok"
    assert len(server.requests) == 2


async def test_unreadable_chunk_is_a_protocol_error() -> None:
    async with serve([Stream([role(), Raw(b"data: {not json\n\n")])]) as (server, model):
        _, err = await collect_until_error(model)
    assert (err.error_kind, err.retryable) == ("protocol", False)
    assert len(server.requests) == 1


async def test_cancellation_mid_stream_closes_the_connection() -> None:
    reply = Stream([role(), chunk({"content": "Hel"}), Hold(), chunk({"content": "lo"}), DONE])
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


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIModel.from_env("gpt-x") is None
    local = OpenAIModel.from_env("llama3.2", base_url="http://127.0.0.1:11434/v1")
    assert local is not None and local.name == "openai:llama3.2"
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    model = OpenAIModel.from_env("gpt-x")
    assert model is not None and model.name == "openai:gpt-x"
    assert KEY not in repr(model) and KEY not in str(model.settings)


def test_constructor_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="no OpenAI API key"):
        OpenAIModel("gpt-x")
    with pytest.raises(ValueError, match="model name"):
        OpenAIModel("", api_key=KEY)
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIModel("gpt-x", api_key=KEY, max_retries=-1)
    with pytest.raises(ValueError, match="max_tokens_field"):
        OpenAIModel("gpt-x", api_key=KEY, max_tokens_field="tokens")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="control character") as caught:
        OpenAIModel("gpt-x", api_key="sk-one\nsk-two")
    assert "sk-one" not in str(caught.value)


def test_without_the_extra_the_import_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import sys

    from loopruntime.models import MissingExtraError

    # As if the SDK were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "openai", None)
    for name in [m for m in sys.modules if m.startswith("loopruntime.models.openai")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(MissingExtraError) as caught:
        importlib.import_module("loopruntime.models.openai")
    err = caught.value
    assert isinstance(err, ImportError)  # an `except ImportError` guard still works
    assert (err.extra, err.package, err.code) == ("openai", "openai", "model.extra_missing")
    assert "pip install 'loopruntime[openai]'" in str(err)
