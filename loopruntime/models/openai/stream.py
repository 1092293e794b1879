"""Translating Chat Completions stream chunks into runtime deltas (pure).

Rules: only the first choice is read; a chunk is read through its attributes,
never its SDK class, so a server's extra or missing fields do no harm; empty
text starts no block (a first chunk carrying only the role is no output);
reasoning a server streams (``reasoning_content`` or ``reasoning``) is a
thinking block; each tool call is a block found by its ``index``, its
argument text passed on unchanged, valid or not; a ``refusal`` text is kept
as text and makes the reply a refusal; every open block stops at the finish
reason, which is mapped to the runtime's stop reasons (a server that says
``stop`` after streaming tool calls means ``tool_calls``).
"""

from __future__ import annotations

import os
from typing import Any, Final, Literal

from journal.content import (
    BlockStarted,
    BlockStopped,
    InputJsonDelta,
    TextDelta,
    ThinkingDelta,
    Usage,
)
from loopruntime.model import Delta, StopDelta, UsageDelta

__all__ = ["STOP_REASONS", "ChunkTranslator"]

STOP_REASONS: Final = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
"""Chat Completions finish reasons as the runtime's stop reasons; any other
reason is passed on as it came."""


class ChunkTranslator:
    """Turns ``ChatCompletionChunk`` values into runtime deltas.  Pure: no I/O
    (a tool call a server sent without an id gets a fresh random one).

    ``feed(chunk)`` returns the deltas a chunk stands for, possibly none.
    ``finished`` turns true once a finish reason arrived; the usage chunk
    that ``include_usage`` asks for may still follow it.
    """

    def __init__(self) -> None:
        self.finished = False
        self._next_index = 0
        self._open: list[int] = []
        """Blocks started and not yet stopped, in order."""
        self._prose: tuple[Literal["text", "thinking"], int] | None = None
        """The text or thinking block that streamed text goes on in."""
        self._calls: dict[int, int] = {}
        """A tool call's index in the stream -> its block index."""
        self._refused = False
        """Whether the model sent a ``refusal`` text instead of content."""

    def feed(self, chunk: Any) -> list[Delta]:
        out: list[Delta] = []
        usage = getattr(chunk, "usage", None)
        choices = getattr(chunk, "choices", None) or ()
        choice = choices[0] if choices else None
        if choice is not None:
            delta = getattr(choice, "delta", None)
            for field in ("reasoning_content", "reasoning"):
                self._prose_delta(out, "thinking", _str(delta, field))
            self._prose_delta(out, "text", _str(delta, "content"))
            refusal = _str(delta, "refusal")
            if refusal:
                self._refused = True
                self._prose_delta(out, "text", refusal)
            for position, call in enumerate(getattr(delta, "tool_calls", None) or ()):
                self._tool_call(out, position, call)
            finish = _str(choice, "finish_reason")
            if finish:
                out.extend(BlockStopped(index=i) for i in self._open)
                self._open.clear()
                self._prose = None
                if finish == "stop" and self._calls:
                    finish = "tool_calls"
                elif finish == "stop" and self._refused:
                    finish = "content_filter"
                out.append(StopDelta(stop_reason=STOP_REASONS.get(finish, finish)))
                self.finished = True
        if usage is not None:
            out.append(UsageDelta(usage=_usage(usage)))
        return out

    def _start(self, out: list[Delta], started: BlockStarted) -> None:
        out.append(started)
        self._open.append(started.index)
        self._next_index += 1

    def _prose_delta(self, out: list[Delta], kind: Literal["text", "thinking"], text: str) -> None:
        if not text:
            return
        if self._prose is None or self._prose[0] != kind:
            if self._prose is not None:
                # Text after thinking (or the reverse) is a new block; the
                # one before it is done.
                out.append(BlockStopped(index=self._prose[1]))
                self._open.remove(self._prose[1])
            self._prose = (kind, self._next_index)
            self._start(out, BlockStarted(index=self._next_index, kind=kind))
        index = self._prose[1]
        out.append(
            TextDelta(index=index, text=text)
            if kind == "text"
            else ThinkingDelta(index=index, thinking=text)
        )

    def _tool_call(self, out: list[Delta], position: int, call: Any) -> None:
        number = getattr(call, "index", None)
        if not isinstance(number, int) or isinstance(number, bool):
            number = position  # a server that leaves out the index
        function = getattr(call, "function", None)
        index = self._calls.get(number)
        if index is None:
            # Prose after a tool call starts a new block, so the reply keeps its order.
            self._prose = None
            index = self._calls[number] = self._next_index
            call_id = _str(call, "id") or "call_" + os.urandom(12).hex()
            name = _str(function, "name")
            self._start(out, BlockStarted(index=index, kind="tool_use", id=call_id, name=name))
        arguments = _str(function, "arguments")
        if arguments:
            out.append(InputJsonDelta(index=index, partial_json=arguments))


def _usage(usage: Any) -> Usage:
    prompt = _int(usage, "prompt_tokens")
    # OpenAI counts cached prompt tokens inside prompt_tokens; the runtime's
    # input_tokens, like Anthropic's, excludes them.
    cached = min(_int(getattr(usage, "prompt_tokens_details", None), "cached_tokens"), prompt)
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=_int(usage, "completion_tokens"),
        cache_read_tokens=cached,
    )


def _int(obj: Any, name: str) -> int:
    value = getattr(obj, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(obj: Any, name: str) -> str:
    value = getattr(obj, name, None)
    return value if isinstance(value, str) else ""
