"""ScriptedModel: a deterministic, local model for the demo and for tests.

It plays back scripted ``Reply`` values (or asks a function of the request
for one), streaming text in chunks, tool calls as partial JSON, a stop reason
and usage.  ``chunk_delay`` paces the stream (use it with trio's
``autojump_clock`` to interrupt mid-reply); ``fail_after_chunks`` breaks the
stream part-way, like a dropped connection; ``stall_after_chunks`` makes it
stop sending without closing, like a connection that hangs.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from journal.content import (
    BlockStarted,
    BlockStopped,
    InputJsonDelta,
    Message,
    SignatureDelta,
    Text,
    TextDelta,
    ThinkingDelta,
    ToolResult,
    ToolUse,
    Usage,
)

from ..errors import ModelError, ScriptExhaustedError
from ..model import Delta, ModelRequest, StopDelta, UsageDelta

__all__ = ["Reply", "ScriptedModel", "ToolCall"]


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    raw_json: str | None = None
    """Send this text as the streamed input instead of ``input`` (to script
    malformed JSON)."""


@dataclass(frozen=True, kw_only=True)
class Reply:
    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    thinking: str = ""
    stop_reason: str | None = None
    """Defaults to ``tool_use`` when there are tool calls, else ``end_turn``."""
    usage: Usage | None = None
    """Defaults to a rough count of the request and reply characters / 4."""
    chunk_size: int = 16
    chunk_delay: float = 0.0
    """Seconds between chunks (trio time)."""
    fail_after_chunks: int | None = None
    """Break the stream (a connection error) after this many chunks."""
    error: ModelError | None = None
    """Fail the call before any output."""
    stall_after_chunks: int | None = None
    """Stop sending after this many chunks and never close (0: before any
    output at all), until the caller gives up."""


Script = Sequence[Reply] | Callable[[ModelRequest], Reply]


class ScriptedModel:
    """A model that answers from a script.  ``requests`` records what it was sent.

    A list plays one reply a call, across every loop that uses the model.
    Its first call may meet a conversation that already holds model replies:
    a loop restored in a new process, or a fork.  When the list opens with
    exactly those replies (the same text and tool calls, in order), it is the
    script of the whole conversation and goes on after them, so a restore
    never hears the first replies again (a tool call would run twice);
    otherwise the list is taken as the replies still to come.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        name: str = "scripted",
        context_window: int = 200_000,
    ) -> None:
        self._script = script
        self.name = name
        self.context_window = context_window
        self.requests: list[ModelRequest] = []
        self._played = 0
        """How many of the list's replies the conversation held before its first call."""

    @classmethod
    def echo(cls) -> ScriptedModel:
        """The "echo" brain of the interactive chat when no API key is set."""

        def answer(request: ModelRequest) -> Reply:
            last = _last_user_text(request)
            return Reply(
                text=f"(echo) {last}" if last else "(echo)", chunk_size=4, chunk_delay=0.02
            )

        return cls(answer, name="scripted:echo")

    def _next(self, request: ModelRequest) -> Reply:
        if callable(self._script):
            return self._script(request)
        if len(self.requests) == 1:
            self._played = _replies_already_given(self._script, request.messages)
        asked = self._played + len(self.requests)
        if asked > len(self._script):
            raise ScriptExhaustedError(asked, len(self._script))
        return self._script[asked - 1]

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Delta]]:
        self.requests.append(request)
        reply = self._next(request)
        if reply.error is not None:
            raise reply.error
        yield _play(reply, request)


def _replies_already_given(script: Sequence[Reply], messages: Sequence[Message]) -> int:
    """How many replies at the head of ``script`` the conversation already
    holds as its model replies, in order; 0 when it does not open with them
    all.  A reply that fails before any output leaves no message, so it
    matches nothing and is passed over; one cut off part-way leaves part of a
    message, which matches no reply, so such a list is played as given."""
    given = [m for m in messages if m.role == "assistant" and not m.synthetic]
    position = 0
    for message in given:
        while position < len(script) and _leaves_no_message(script[position]):
            position += 1
        if position == len(script) or not _is_reply(message, script[position]):
            return 0
        position += 1
    return position


def _leaves_no_message(reply: Reply) -> bool:
    return reply.error is not None or 0 in (reply.stall_after_chunks, reply.fail_after_chunks)


def _is_reply(message: Message, reply: Reply) -> bool:
    text = "".join(b.text for b in message.blocks if isinstance(b, Text))
    calls = [(b.name, b.input) for b in message.blocks if isinstance(b, ToolUse)]
    return text == reply.text and calls == [(c.name, c.input) for c in reply.tool_calls]


def _last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            texts = [b.text for b in message.blocks if isinstance(b, Text)]
            if texts:
                return " ".join(texts)
            if any(isinstance(b, ToolResult) for b in message.blocks):
                return ""
    return ""


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


async def _play(reply: Reply, request: ModelRequest) -> AsyncIterator[Delta]:
    sent = 0

    async def pace() -> None:
        nonlocal sent
        if reply.fail_after_chunks is not None and sent >= reply.fail_after_chunks:
            raise ModelError(
                f"scripted stream broke after {sent} chunks",
                kind="connection",
                code="model.connection_lost",
            )
        if reply.stall_after_chunks is not None and sent >= reply.stall_after_chunks:
            await trio.sleep_forever()
        if reply.chunk_delay:
            await trio.sleep(reply.chunk_delay)
        else:
            await trio.lowlevel.checkpoint()
        sent += 1

    # A rough, O(1) estimate: the scripted model must not make a step's cost
    # grow with the history (benchmarks rely on it).
    usage = reply.usage or Usage(input_tokens=20 * len(request.messages) + len(request.system) // 4)
    if reply.stall_after_chunks == 0:
        await trio.sleep_forever()  # the request went out; nothing ever comes back
    yield UsageDelta(
        usage=Usage(
            input_tokens=usage.input_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_creation_tokens=usage.cache_creation_tokens,
        )
    )
    index = 0
    if reply.thinking:
        yield BlockStarted(index=index, kind="thinking")
        for part in _chunks(reply.thinking, reply.chunk_size):
            await pace()
            yield ThinkingDelta(index=index, thinking=part)
        yield SignatureDelta(index=index, signature="scripted")
        yield BlockStopped(index=index)
        index += 1
    if reply.text:
        yield BlockStarted(index=index, kind="text")
        for part in _chunks(reply.text, reply.chunk_size):
            await pace()
            yield TextDelta(index=index, text=part)
        yield BlockStopped(index=index)
        index += 1
    for call in reply.tool_calls:
        call_id = call.id or "toolu_" + os.urandom(8).hex()
        yield BlockStarted(index=index, kind="tool_use", id=call_id, name=call.name)
        raw = (
            call.raw_json if call.raw_json is not None else msgspec.json.encode(call.input).decode()
        )
        for part in _chunks(raw, max(reply.chunk_size, 64)):
            await pace()
            yield InputJsonDelta(index=index, partial_json=part)
        yield BlockStopped(index=index)
        index += 1
    out_tokens = usage.output_tokens or max(1, (len(reply.text) + len(reply.thinking)) // 4)
    yield UsageDelta(usage=Usage(output_tokens=out_tokens))
    yield StopDelta(
        stop_reason=reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    )
