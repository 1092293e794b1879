"""Translating the Messages API's stream events into runtime deltas (pure).

Rules: events are dispatched on their ``type`` strings, never on SDK classes
(the SDK builds unknown types as some known class); a block of a type the
runtime does not model is skipped, but text streamed into it is kept as a
text block; streamed tool-input JSON is passed on unchanged, valid or not.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import structlog

from journal.content import (
    BlockStarted,
    BlockStopped,
    InputJsonDelta,
    SignatureDelta,
    TextDelta,
    ThinkingDelta,
    Usage,
)
from loopruntime.model import Delta, StopDelta, UsageDelta

__all__ = ["StreamTranslator"]

log = structlog.wrap_logger(logging.getLogger("loopruntime.models.anthropic"))


class StreamTranslator:
    """Turns Messages API stream events into runtime deltas.  Pure: no I/O.

    ``feed(event)`` takes an SDK event object (or anything with the same
    attributes) and returns the deltas it stands for, possibly none.
    ``finished`` turns true at ``message_stop``.
    """

    def __init__(self) -> None:
        self.finished = False
        self._skipped: set[int] = set()
        """Indexes of blocks of a type the runtime does not model."""
        self._rescued: set[int] = set()
        """Skipped blocks whose text deltas are being kept as a text block."""

    def feed(self, event: Any) -> list[Delta]:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            usage = getattr(getattr(event, "message", None), "usage", None)
            return [UsageDelta(usage=_usage(usage))] if usage is not None else []
        if kind == "content_block_start":
            return self._block_start(_int(event, "index"), getattr(event, "content_block", None))
        if kind == "content_block_delta":
            return self._block_delta(_int(event, "index"), getattr(event, "delta", None))
        if kind == "content_block_stop":
            index = _int(event, "index")
            if index in self._skipped and index not in self._rescued:
                return []
            return [BlockStopped(index=index)]
        if kind == "message_delta":
            out: list[Delta] = []
            usage = getattr(event, "usage", None)
            if usage is not None:
                out.append(UsageDelta(usage=_usage(usage)))
            stop_reason = getattr(getattr(event, "delta", None), "stop_reason", None)
            if isinstance(stop_reason, str) and stop_reason:
                out.append(StopDelta(stop_reason=stop_reason))
            return out
        if kind == "message_stop":
            self.finished = True
            return []
        # ping is filtered by the SDK; any event type from a newer API is ignored.
        return []

    def _block_start(self, index: int, block: Any) -> list[Delta]:
        kind = getattr(block, "type", None)
        if kind == "text":
            out: list[Delta] = [BlockStarted(index=index, kind="text")]
            text = _str(block, "text")
            if text:
                out.append(TextDelta(index=index, text=text))
            return out
        if kind == "thinking":
            out = [BlockStarted(index=index, kind="thinking")]
            thinking, signature = _str(block, "thinking"), _str(block, "signature")
            if thinking:
                out.append(ThinkingDelta(index=index, thinking=thinking))
            if signature:
                out.append(SignatureDelta(index=index, signature=signature))
            return out
        if kind == "redacted_thinking":
            return [BlockStarted(index=index, kind="redacted_thinking", data=_str(block, "data"))]
        if kind == "tool_use":
            out = [
                BlockStarted(
                    index=index, kind="tool_use", id=_str(block, "id"), name=_str(block, "name")
                )
            ]
            # The streaming API starts tool_use with `input: {}` and streams the
            # JSON; an input given whole here would otherwise be lost.
            initial = getattr(block, "input", None)
            if isinstance(initial, dict) and initial:
                out.append(InputJsonDelta(index=index, partial_json=json.dumps(initial)))
            return out
        log.debug("model_block_skipped", block_type=kind, index=index)
        self._skipped.add(index)
        return []

    def _block_delta(self, index: int, delta: Any) -> list[Delta]:
        kind = getattr(delta, "type", None)
        if index in self._skipped:
            # Keep text streamed into a block we do not model, as a text block.
            if kind != "text_delta" or not _str(delta, "text"):
                return []
            out: list[Delta] = []
            if index not in self._rescued:
                self._rescued.add(index)
                out.append(BlockStarted(index=index, kind="text"))
            out.append(TextDelta(index=index, text=_str(delta, "text")))
            return out
        if kind == "text_delta":
            return [TextDelta(index=index, text=_str(delta, "text"))]
        if kind == "thinking_delta":
            return [ThinkingDelta(index=index, thinking=_str(delta, "thinking"))]
        if kind == "signature_delta":
            return [SignatureDelta(index=index, signature=_str(delta, "signature"))]
        if kind == "input_json_delta":
            return [InputJsonDelta(index=index, partial_json=_str(delta, "partial_json"))]
        # citations_delta (citations are not modelled) and delta types from a
        # newer API carry no text the runtime keeps.
        return []


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=_int(usage, "input_tokens"),
        output_tokens=_int(usage, "output_tokens"),
        cache_read_tokens=_int(usage, "cache_read_input_tokens"),
        cache_creation_tokens=_int(usage, "cache_creation_input_tokens"),
    )


def _int(obj: Any, name: str) -> int:
    value = getattr(obj, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(obj: Any, name: str) -> str:
    value = getattr(obj, name, None)
    return value if isinstance(value, str) else ""
