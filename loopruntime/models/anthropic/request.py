"""Mapping a ``ModelRequest`` to the Messages API's request body (pure).

Rules (docs/anthropic.md tells why): same-role messages are merged; blocks
the API rejects (unsigned thinking, empty text) are dropped; trailing
whitespace is cut from a final assistant message; prompt-cache breakpoints go
on the system prompt (or the last tool), the newest message and the user
message before the newest reply; ``options`` may not set a key the adapter
derives itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, assert_never

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
from loopruntime.model import ModelRequest, ToolSchema

from ..sdk import refuse_owned_options

__all__ = ["ThinkingOption", "api_messages", "request_params", "thinking_body"]

ThinkingOption: TypeAlias = int | Literal["adaptive"] | Mapping[str, Any] | None
"""``None``: the API default; an int: extended thinking with that token budget;
``"adaptive"``: the model decides; a mapping: sent verbatim as ``thinking``."""

_EPHEMERAL: Final[Mapping[str, str]] = {"type": "ephemeral"}

# Body keys this adapter derives from the ModelRequest; `options` may not set them.
_OWNED_KEYS: Final = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "max_tokens", "stream"}
)


def request_params(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int | None = None,
    thinking: Mapping[str, Any] | None = None,
    prompt_cache: bool = True,
) -> dict[str, Any]:
    """The keyword arguments for ``messages.create`` (everything but ``stream``).

    ``max_tokens``, when given, replaces ``request.max_tokens``.  When it is
    not given and thinking has a token budget, the budget is added to
    ``request.max_tokens``: the API counts thinking against ``max_tokens`` and
    wants the budget below it, so thinking must not eat the reply's allowance.

    Pure; the returned dict and everything in it is new and owned by the caller.
    Raises ``ModelError(kind="invalid_request")`` for an ``options`` key the
    adapter sets itself.
    """
    refuse_owned_options(request, _OWNED_KEYS, adapter="Anthropic adapter")
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens if max_tokens is None else max_tokens,
        "messages": api_messages(request.messages, prompt_cache=prompt_cache),
    }
    if request.system.strip():
        system: dict[str, Any] = {"type": "text", "text": request.system}
        if prompt_cache:
            system["cache_control"] = dict(_EPHEMERAL)
        params["system"] = [system]
    if request.tools:
        tools = [_api_tool(t) for t in request.tools]
        if prompt_cache and "system" not in params:
            # The system breakpoint covers the tools before it; without one,
            # mark the tools themselves so their (often long) schemas are cached.
            tools[-1]["cache_control"] = dict(_EPHEMERAL)
        params["tools"] = tools
        params["tool_choice"] = {"type": request.tool_choice}
    if thinking is not None:
        params["thinking"] = dict(thinking)
    extra = dict(request.options)
    if "thinking" in extra:
        params["thinking"] = extra.pop("thinking")
    if extra:
        params["extra_body"] = extra
    chosen = params.get("thinking")
    budget = chosen.get("budget_tokens") if isinstance(chosen, Mapping) else None
    if max_tokens is None and isinstance(budget, int):
        params["max_tokens"] += budget
    return params


def api_messages(messages: Sequence[Message], *, prompt_cache: bool = True) -> list[dict[str, Any]]:
    """``Message`` values as API message dicts: same-role runs merged, blocks
    the API would reject dropped, cache breakpoints placed (see the module
    docstring).  Pure; returns new objects."""
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks = [b for b in map(_api_block, message.blocks) if b is not None]
        if not blocks:
            continue
        if out and out[-1]["role"] == message.role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": message.role, "content": blocks})
    if out and out[-1]["role"] == "assistant":
        # The API refuses final assistant content that ends in whitespace.
        # Whitespace-only text was dropped above, so the block stays non-empty.
        last = out[-1]["content"][-1]
        if last["type"] == "text":
            last["text"] = last["text"].rstrip()
    if prompt_cache and out:
        _mark(out[-1])
        # Where the previous request ended: the user message just before the
        # newest assistant reply (found walking back from the end).
        for i in range(len(out) - 2, 0, -1):
            if out[i]["role"] == "assistant":
                _mark(out[i - 1])
                break
    return out


def _mark(message: dict[str, Any]) -> None:
    # Thinking blocks cannot carry cache_control; the last other block can.
    for block in reversed(message["content"]):
        if block["type"] not in ("thinking", "redacted_thinking"):
            block["cache_control"] = dict(_EPHEMERAL)
            return


def _api_block(block: Block) -> dict[str, Any] | None:
    match block:
        case Text():
            return _api_text(block)
        case Thinking():
            if not block.signature:
                return None  # unsigned thinking is rejected by the API
            return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
        case RedactedThinking():
            return {"type": "redacted_thinking", "data": block.data}
        case Image():
            return _api_image(block)
        case ToolUse():
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        case ToolResult():
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
            content = [
                c
                for c in (
                    _api_text(p) if isinstance(p, Text) else _api_image(p) for p in block.content
                )
                if c is not None
            ]
            if content:
                result["content"] = content
            if block.is_error:
                result["is_error"] = True
            return result
        case _:
            assert_never(block)


def _api_text(block: Text) -> dict[str, Any] | None:
    return {"type": "text", "text": block.text} if block.text.strip() else None


def _api_image(block: Image) -> dict[str, Any]:
    source = {"type": "base64", "media_type": block.media_type, "data": block.data}
    return {"type": "image", "source": source}


def _api_tool(tool: ToolSchema) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def thinking_body(thinking: ThinkingOption) -> dict[str, Any] | None:
    if thinking is None:
        return None
    if thinking == "adaptive":
        return {"type": "adaptive"}
    if isinstance(thinking, bool):  # bool is an int; True is no budget
        raise ValueError("thinking must be a token budget, 'adaptive', or a mapping, not a bool")
    if isinstance(thinking, int):
        return {"type": "enabled", "budget_tokens": thinking}
    if isinstance(thinking, Mapping):
        return dict(thinking)
    raise ValueError(f"thinking must be a token budget, 'adaptive', or a mapping, not {thinking!r}")
