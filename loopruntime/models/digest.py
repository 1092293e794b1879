"""A model request as plain data, and its digest (pure).

Rules: the conversion is written out block by block, not left to a codec,
so it reads any ``ModelRequest`` (whatever sequence holds its messages) and
changes only when this module does; it keeps what the provider is sent (the
system prompt, tools, settings, each message's role and blocks) and leaves
out the runtime's own marks (``synthetic``, ``derived``); dict keys are
sorted before hashing, so equal requests have equal digests in any process.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, assert_never

import msgspec

from journal.content import (
    Block,
    Image,
    Message,
    RedactedThinking,
    Text,
    Thinking,
    ToolResult,
    ToolUse,
)
from loopruntime.model import ModelRequest

__all__ = [
    "data_digest",
    "message_data",
    "message_preview",
    "request_data",
    "request_digest",
    "settings_data",
]

_PREVIEW_CHARS: Final = 80


def request_data(request: ModelRequest) -> dict[str, Any]:
    """Everything ``request`` sends, as plain dicts, lists and scalars."""
    return {
        "system": request.system,
        "tools": [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ],
        "settings": settings_data(request),
        "messages": [message_data(m) for m in request.messages],
    }


def settings_data(request: ModelRequest) -> dict[str, Any]:
    """The request's settings beside its prompt, tools and messages."""
    return {
        "max_tokens": request.max_tokens,
        "tool_choice": request.tool_choice,
        "options": dict(request.options),
    }


def message_data(message: Message) -> dict[str, Any]:
    """One message as plain data: its role and blocks."""
    return {"role": message.role, "blocks": [_block_data(b) for b in message.blocks]}


def _block_data(block: Block) -> dict[str, Any]:
    match block:
        case Text():
            return {"type": "text", "text": block.text}
        case Thinking():
            return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
        case RedactedThinking():
            return {"type": "redacted_thinking", "data": block.data}
        case Image():
            return {"type": "image", "media_type": block.media_type, "data": block.data}
        case ToolUse():
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        case ToolResult():
            return {
                "type": "tool_result",
                "tool_use_id": block.tool_use_id,
                "content": [_block_data(c) for c in block.content],
                "is_error": block.is_error,
            }
        case _:
            assert_never(block)


def data_digest(data: Any) -> str:
    """The SHA-256 (hex) of plain data, its dict keys sorted.  Raises
    ``TypeError`` for a value JSON cannot hold (an option that is an object)."""
    try:
        encoded = msgspec.json.encode(data, order="sorted")
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeError(f"a model request holds a value JSON cannot encode: {exc}") from exc
    return hashlib.sha256(encoded).hexdigest()


def request_digest(request: ModelRequest) -> str:
    """The digest of everything ``request`` sends (``request_data``)."""
    return data_digest(request_data(request))


def message_preview(message: Message) -> str:
    """A short line naming what a message holds, for error messages."""
    parts: list[str] = []
    for block in message.blocks:
        match block:
            case Text():
                parts.append(block.text)
            case Thinking():
                parts.append(f"(thinking) {block.thinking}")
            case RedactedThinking():
                parts.append("(redacted thinking)")
            case Image():
                parts.append(f"(image {block.media_type})")
            case ToolUse():
                parts.append(f"{block.name}({msgspec.json.encode(block.input).decode()})")
            case ToolResult():
                text = " ".join(c.text for c in block.content if isinstance(c, Text))
                parts.append(f"(result of {block.tool_use_id}) {text}")
            case _:
                assert_never(block)
    line = " | ".join(" ".join(p.split()) for p in parts)
    return line if len(line) <= _PREVIEW_CHARS else line[: _PREVIEW_CHARS - 1] + "…"
