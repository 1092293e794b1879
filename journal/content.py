"""Provider-neutral message content and the pieces a model stream is made of.

Everything here is plain data: frozen, keyword-only, tagged msgspec Structs.
Adapters (Anthropic, the scripted model) translate to and from these; the
journal stores them verbatim.

Schema rules (they keep old journals readable): a new field gets a default;
a field never changes its type; a tag is never reused.

None of these is tracked by the cyclic garbage collector (``gc=False``): a
block holds strings, numbers, other blocks and JSON-like builtins, never
anything that could refer back to it, so it can be in no reference cycle.
A conversation's messages live as long as their loop; tracked, every full
collection of the process would walk each of them.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = [
    "Block",
    "BlockStarted",
    "BlockStopped",
    "Image",
    "InputJsonDelta",
    "Message",
    "Piece",
    "RedactedThinking",
    "ResultBlock",
    "SignatureDelta",
    "Text",
    "TextDelta",
    "Thinking",
    "ThinkingDelta",
    "ToolResult",
    "ToolUse",
    "Usage",
]


class Text(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="text"):
    """Plain text."""

    text: str


class Thinking(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="thinking"):
    """Model reasoning shown in the clear.

    ``signature`` is the provider's integrity token; a thinking block without
    one cannot be sent back to the provider.
    """

    thinking: str
    signature: str = ""


class RedactedThinking(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="redacted_thinking"
):
    """Reasoning the provider returned encrypted; opaque to us."""

    data: str


class Image(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="image"):
    """An inline image: media type (``image/png``...) and base64 data."""

    media_type: str
    data: str


class ToolUse(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="tool_use"):
    """The model asks for a tool call."""

    id: str
    name: str
    input: dict[str, Any]


ResultBlock = Text | Image


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="tool_result"):
    """The answer to one ``ToolUse``, matched by ``tool_use_id``."""

    tool_use_id: str
    content: tuple[ResultBlock, ...] = ()
    is_error: bool = False


Block = Text | Thinking | RedactedThinking | Image | ToolUse | ToolResult


class Message(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One conversation message.

    ``synthetic`` marks a message the runtime wrote (notices, results for
    calls that never completed): it is never credited as agent or user output.
    ``derived`` marks a message computed from others (a compaction summary).
    """

    role: Literal["user", "assistant"]
    blocks: tuple[Block, ...]
    synthetic: bool = False
    derived: bool = False


class Usage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Token counts reported by the provider for one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


# -- stream pieces --------------------------------------------------------
#
# A model reply arrives as pieces addressed by block index.  The same pieces
# are what `model.output` journals (coalesced), so a reply cut off by a crash
# is rebuilt by the very accumulator that built it live.


class BlockStarted(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="block_started"):
    """A content block begins at ``index``.

    For ``tool_use`` blocks ``id`` and ``name`` are set; for
    ``redacted_thinking`` ``data`` carries the opaque payload.
    """

    index: int
    kind: Literal["text", "thinking", "redacted_thinking", "tool_use"]
    id: str = ""
    name: str = ""
    data: str = ""


class TextDelta(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="text_delta"):
    index: int
    text: str


class ThinkingDelta(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="thinking_delta"):
    index: int
    thinking: str


class SignatureDelta(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="signature_delta"):
    index: int
    signature: str


class InputJsonDelta(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="input_json_delta"):
    """A fragment of a tool call's JSON input, streamed as text."""

    index: int
    partial_json: str


class BlockStopped(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="block_stopped"):
    """The block at ``index`` is complete."""

    index: int


Piece = BlockStarted | TextDelta | ThinkingDelta | SignatureDelta | InputJsonDelta | BlockStopped
