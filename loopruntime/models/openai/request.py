"""Mapping a ``ModelRequest`` to a Chat Completions request body (pure).

Rules (docs/models.md tells why): the system prompt is the first message;
tool results become ``tool`` messages right after the assistant message that
asked for them, before any other content of their user message (images a
tool returned follow in a user message, since a ``tool`` message carries
text only); thinking is never sent back (Chat Completions has no field for
it); ``tool_choice`` ``any`` is ``required``; ``options`` may not set a key
the adapter derives itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final, Literal, TypeAlias, assert_never

from journal.content import (
    Image,
    Message,
    RedactedThinking,
    Text,
    Thinking,
    ToolResult,
    ToolUse,
)
from loopruntime.model import ModelRequest, ToolSchema

from ..sdk import refuse_owned_options

__all__ = ["MaxTokensField", "api_messages", "request_params"]

MaxTokensField: TypeAlias = Literal["max_completion_tokens", "max_tokens"]
"""The body key the reply's token allowance is sent as: OpenAI's current
``max_completion_tokens`` (its reasoning models refuse the other), or the
older ``max_tokens`` some compatible servers still want."""

_TOOL_CHOICE: Final = {"auto": "auto", "any": "required", "none": "none"}

# A result the tool marked as an error says so in its text: a `tool` message
# has no error flag.
_ERROR_PREFIX: Final = "[tool error] "

# Body keys this adapter derives from the ModelRequest; `options` may not set them.
_OWNED_KEYS: Final = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
    }
)


def request_params(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int | None = None,
    max_tokens_field: MaxTokensField = "max_completion_tokens",
    stream_usage: bool = True,
) -> dict[str, Any]:
    """The keyword arguments for ``chat.completions.create`` (everything but
    ``stream``).  ``max_tokens``, when given, replaces ``request.max_tokens``;
    ``stream_usage`` asks for the usage chunk (``stream_options.include_usage``).

    Pure; the returned dict and everything in it is new and owned by the caller.
    Raises ``ModelError(kind="invalid_request")`` for an ``options`` key the
    adapter sets itself.
    """
    refuse_owned_options(request, _OWNED_KEYS, adapter="OpenAI-compatible adapter")
    params: dict[str, Any] = {
        "model": model,
        "messages": api_messages(request.system, request.messages),
        max_tokens_field: request.max_tokens if max_tokens is None else max_tokens,
    }
    if stream_usage:
        params["stream_options"] = {"include_usage": True}
    if request.tools:
        params["tools"] = [_api_tool(t) for t in request.tools]
        params["tool_choice"] = _TOOL_CHOICE[request.tool_choice]
    if request.options:
        # Passed through the SDK's extra_body, so a key it does not know
        # (a server's own sampling option) reaches the body unchanged.
        params["extra_body"] = dict(request.options)
    return params


def api_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as Chat Completions messages (see the module
    docstring).  Pure; returns new objects."""
    out: list[dict[str, Any]] = []
    if system.strip():
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "assistant":
            assistant = _assistant(message)
            if assistant is not None:
                out.append(assistant)
        else:
            out.extend(_user(message))
    return out


def _assistant(message: Message) -> dict[str, Any] | None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.blocks:
        match block:
            case Text():
                if block.text.strip():
                    texts.append(block.text)
            case ToolUse():
                arguments = json.dumps(block.input, ensure_ascii=False)
                calls.append(
                    {
                        "id": block.id,
                        "type": "function",
                        "function": {"name": block.name, "arguments": arguments},
                    }
                )
            case Thinking() | RedactedThinking() | Image() | ToolResult():
                pass  # nothing an assistant message of this API can carry back
            case _:
                assert_never(block)
    if not texts and not calls:
        return None
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        out["tool_calls"] = calls
    return out


def _user(message: Message) -> list[dict[str, Any]]:
    """A user message: its tool results first, as ``tool`` messages, then
    the rest of its content (with any images the tools returned)."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.blocks:
        match block:
            case ToolResult():
                text = "\n".join(p.text for p in block.content if isinstance(p, Text))
                if block.is_error:
                    text = _ERROR_PREFIX + text
                results.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
                parts.extend(_api_image(p) for p in block.content if isinstance(p, Image))
            case Text():
                if block.text.strip():
                    parts.append({"type": "text", "text": block.text})
            case Image():
                parts.append(_api_image(block))
            case Thinking() | RedactedThinking() | ToolUse():
                pass  # a user message carries none of these
            case _:
                assert_never(block)
    if not parts:
        return results
    if all(p["type"] == "text" for p in parts):
        # Plain text as a string: the form every compatible server accepts.
        content: str | list[dict[str, Any]] = "\n\n".join(p["text"] for p in parts)
    else:
        content = parts
    return [*results, {"role": "user", "content": content}]


def _api_image(block: Image) -> dict[str, Any]:
    url = f"data:{block.media_type};base64,{block.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _api_tool(tool: ToolSchema) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }
