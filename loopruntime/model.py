"""The Model protocol, request and delta types, and the stream accumulator.

A model adapter turns a ``ModelRequest`` into a stream of ``Delta`` values:
the content pieces of ``journal.content`` plus usage and a stop reason.  The
``Accumulator`` is the one pure state machine that turns deltas into the
assistant ``Message``; it runs live during a turn and again on restore over
the journaled ``model.output`` pieces, so both build the same message.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from journal.content import (
    Block,
    BlockStarted,
    BlockStopped,
    InputJsonDelta,
    Message,
    Piece,
    RedactedThinking,
    SignatureDelta,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolUse,
    Usage,
)

from .errors import ModelError

__all__ = [
    "Accumulator",
    "Delta",
    "Model",
    "ModelRequest",
    "StopDelta",
    "ToolSchema",
    "UsageDelta",
    "coalesce",
]


class UsageDelta(msgspec.Struct, frozen=True, kw_only=True, tag="usage"):
    """Token counts so far.  A non-zero field replaces the earlier value (the
    provider reports input at the start and cumulative output at the end)."""

    usage: Usage


class StopDelta(msgspec.Struct, frozen=True, kw_only=True, tag="stop"):
    """Why the model stopped: ``end_turn``, ``tool_use``, ``max_tokens``,
    ``stop_sequence``, ``pause_turn``, ``refusal``..."""

    stop_reason: str


Delta = Piece | UsageDelta | StopDelta


class ToolSchema(msgspec.Struct, frozen=True, kw_only=True):
    """What the model is told about one tool."""

    name: str
    description: str
    input_schema: dict[str, Any]


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one model call sends: plain data (msgspec encodes it, to log
    or record a request).  ``messages`` alternate roles and every ``tool_use``
    is answered by a ``tool_result`` in the next user message."""

    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    max_tokens: int = 4096
    tool_choice: Literal["auto", "any", "none"] = "auto"
    options: dict[str, Any] = {}


@runtime_checkable
class Model(Protocol):
    """A source of streamed replies.

    ``stream(request)`` is an async context manager yielding an async iterator
    of deltas.  Errors are raised as ``loopruntime.errors.ModelError``; an
    adapter may retry only before it has yielded anything.
    """

    name: str
    context_window: int

    def stream(self, request: ModelRequest) -> AbstractAsyncContextManager[Any]: ...


class _Block:
    __slots__ = ("data", "done", "id", "kind", "name", "parts", "signature")

    def __init__(self, started: BlockStarted) -> None:
        self.kind = started.kind
        self.id = started.id
        self.name = started.name
        self.data = started.data
        self.parts: list[str] = []
        self.signature = ""
        self.done = False


class Accumulator:
    """Builds the assistant message from deltas.  Pure: no I/O, no clock.

    Feed it every delta in order, then call ``message()``.  When the reply did
    not complete, ``message(notice=...)`` keeps what can be sent back to the
    provider and appends the notice as the last text block: unfinished or
    unanswerable ``tool_use`` blocks and unsigned, unfinished thinking are
    left out of the message (the journal's ``model.output`` keeps them).

    Bounds (None: none), in bytes of UTF-8: ``max_response_bytes`` for the
    whole reply's text, thinking, signatures and tool input; the piece that
    passes it makes ``feed`` drop everything held and raise ``ModelError``
    (code ``model.response_too_large``), so no part of the reply can be made
    into a message.  ``max_tool_input_bytes`` for one call's input: a larger
    one is kept as ``{}`` and listed in ``invalid_tool_inputs``.
    """

    def __init__(
        self, max_response_bytes: int | None = None, max_tool_input_bytes: int | None = None
    ) -> None:
        self._blocks: dict[int, _Block] = {}
        self.stop_reason: str | None = None
        self.usage = Usage()
        self.invalid_tool_inputs: dict[str, str] = {}
        """tool_use id -> why its streamed JSON input could not be parsed."""
        self.max_response_bytes = max_response_bytes
        self.max_tool_input_bytes = max_tool_input_bytes
        self.size = 0
        """Bytes of the reply received (counted only under ``max_response_bytes``)."""

    @property
    def empty(self) -> bool:
        return not self._blocks

    def feed(self, delta: Delta) -> None:
        # Found by exact type, not by a ``match`` of class patterns (see
        # docs/architecture.md, "Found by exact type"): every delta of every
        # reply comes through here.
        feed = _FEEDS.get(type(delta))
        if feed is not None:
            feed(self, delta)

    def feed_all(self, deltas: tuple[Piece, ...] | list[Delta]) -> None:
        for d in deltas:
            self.feed(d)

    def _block(self, index: int) -> _Block:
        block = self._blocks.get(index)
        if block is None:
            # A delta for a block that never started: treat it as text so
            # nothing the model said is lost.
            block = self._blocks[index] = _Block(BlockStarted(index=index, kind="text"))
        return block

    def text(self) -> str:
        """All text received so far (for live display)."""
        return "".join(
            "".join(b.parts) for _, b in sorted(self._blocks.items()) if b.kind == "text"
        )

    def tool_uses(self) -> list[ToolUse]:
        return [b for b in self._build(complete=True) if isinstance(b, ToolUse)]

    def has_content(self) -> bool:
        """Whether a reply cut short here holds anything usable (what ``message``
        would keep besides a notice)."""
        return bool(self._build(complete=False))

    def message(self, notice: str | None = None) -> Message:
        """The assistant message; with ``notice`` the reply is marked incomplete."""
        blocks = self._build(complete=notice is None)
        if notice is None:
            return Message(role="assistant", blocks=tuple(blocks))
        blocks.append(Text(text=notice))
        only_notice = len(blocks) == 1
        return Message(role="assistant", blocks=tuple(blocks), synthetic=only_notice)

    def _build(self, *, complete: bool) -> list[Block]:
        out: list[Block] = []
        for _, b in sorted(self._blocks.items()):
            if b.kind == "text":
                text = "".join(b.parts)
                if text:
                    out.append(Text(text=text))
            elif b.kind == "thinking":
                if not complete and not (b.done and b.signature):
                    continue
                out.append(Thinking(thinking="".join(b.parts), signature=b.signature))
            elif b.kind == "redacted_thinking":
                out.append(RedactedThinking(data=b.data))
            elif b.kind == "tool_use":
                if not complete:
                    continue
                out.append(ToolUse(id=b.id, name=b.name, input=self._tool_input(b)))
        return out

    def _grow(self, text: str) -> None:
        limit = self.max_response_bytes
        if limit is None:
            return
        self.size += _utf8_size(text)
        if self.size > limit:
            self._blocks.clear()
            raise ModelError(
                f"the model's reply passed {limit:,} bytes (Limits.max_response_bytes) and "
                f"was stopped at {self.size:,}; none of it was kept in the conversation",
                kind="too_large",
                code="model.response_too_large",
            )

    def _tool_input(self, b: _Block) -> dict[str, Any]:
        raw = "".join(b.parts).strip()
        if not raw:
            return {}
        limit = self.max_tool_input_bytes
        if limit is not None and (size := _utf8_size(raw)) > limit:
            self.invalid_tool_inputs[b.id] = (
                f"the input of this {b.name} call is {size:,} bytes, over the limit of "
                f"{limit:,} bytes (Limits.max_tool_input_bytes), so it did not run; send a "
                "smaller input"
            )
            return {}
        try:
            value = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            self.invalid_tool_inputs[b.id] = f"tool input is not valid JSON ({exc})"
            return {}
        if not isinstance(value, dict):
            self.invalid_tool_inputs[b.id] = "tool input must be a JSON object"
            return {}
        return value


def _utf8_size(text: str) -> int:
    # ``isascii`` is a flag lookup: most pieces are measured without a copy.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _started(acc: Accumulator, delta: BlockStarted) -> None:
    acc._grow(delta.data)
    acc._blocks[delta.index] = _Block(delta)


def _text(acc: Accumulator, delta: TextDelta) -> None:
    acc._grow(delta.text)
    acc._block(delta.index).parts.append(delta.text)


def _thinking(acc: Accumulator, delta: ThinkingDelta) -> None:
    acc._grow(delta.thinking)
    acc._block(delta.index).parts.append(delta.thinking)


def _signature(acc: Accumulator, delta: SignatureDelta) -> None:
    acc._grow(delta.signature)
    acc._block(delta.index).signature += delta.signature


def _json(acc: Accumulator, delta: InputJsonDelta) -> None:
    acc._grow(delta.partial_json)
    acc._block(delta.index).parts.append(delta.partial_json)


def _stopped(acc: Accumulator, delta: BlockStopped) -> None:
    acc._block(delta.index).done = True


def _usage(acc: Accumulator, delta: UsageDelta) -> None:
    u, n = acc.usage, delta.usage
    acc.usage = Usage(
        input_tokens=n.input_tokens or u.input_tokens,
        output_tokens=n.output_tokens or u.output_tokens,
        cache_read_tokens=n.cache_read_tokens or u.cache_read_tokens,
        cache_creation_tokens=n.cache_creation_tokens or u.cache_creation_tokens,
    )


def _stop(acc: Accumulator, delta: StopDelta) -> None:
    acc.stop_reason = delta.stop_reason


_FEEDS: dict[type, Callable[[Accumulator, Any], None]] = {
    BlockStarted: _started,
    TextDelta: _text,
    ThinkingDelta: _thinking,
    SignatureDelta: _signature,
    InputJsonDelta: _json,
    BlockStopped: _stopped,
    UsageDelta: _usage,
    StopDelta: _stop,
}
"""What each kind of delta does to the accumulator (``Accumulator.feed``)."""


def coalesce(pieces: list[Piece]) -> tuple[Piece, ...]:
    """Merge adjacent text/thinking/json fragments of the same block, so the
    journal stores few large pieces rather than many tiny ones."""
    out: list[Piece] = []
    for p in pieces:
        last = out[-1] if out else None
        if type(p) is type(last) and getattr(p, "index", -1) == getattr(last, "index", -2):
            if isinstance(p, TextDelta) and isinstance(last, TextDelta):
                out[-1] = TextDelta(index=p.index, text=last.text + p.text)
                continue
            if isinstance(p, ThinkingDelta) and isinstance(last, ThinkingDelta):
                out[-1] = ThinkingDelta(index=p.index, thinking=last.thinking + p.thinking)
                continue
            if isinstance(p, InputJsonDelta) and isinstance(last, InputJsonDelta):
                out[-1] = InputJsonDelta(
                    index=p.index, partial_json=last.partial_json + p.partial_json
                )
                continue
        out.append(p)
    return tuple(out)
