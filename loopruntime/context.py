"""Building the model request from loop state (pure).

The request is always valid for the provider: consecutive messages of one
role are merged, and a context that still holds an unanswered ``tool_use``
is refused loudly rather than sent.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Sequence

import msgspec

from journal.content import Block, Message, ToolResult, ToolUse

from .model import ModelRequest, ToolSchema
from .redaction import Originals

__all__ = ["RequestBuilder", "merged", "unanswered_tool_uses"]


def merged(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Consecutive same-role messages joined into one (providers require
    alternation); tool results are placed first in a merged user message."""
    out: list[Message] = []
    for m in messages:
        if out and out[-1].role == m.role:
            prev = out[-1]
            blocks: list[Block] = [*prev.blocks, *m.blocks]
            if m.role == "user":
                blocks.sort(key=lambda b: not isinstance(b, ToolResult))
            out[-1] = Message(
                role=m.role,
                blocks=tuple(blocks),
                synthetic=prev.synthetic and m.synthetic,
                derived=prev.derived and m.derived,
            )
        else:
            out.append(m)
    return tuple(out)


def unanswered_tool_uses(messages: Sequence[Message]) -> list[str]:
    """tool_use ids not answered by a tool_result in the following message."""
    missing: list[str] = []
    for i, m in enumerate(messages):
        if m.role != "assistant":
            continue
        uses = [b.id for b in m.blocks if isinstance(b, ToolUse)]
        if not uses:
            continue
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        answered = (
            {b.tool_use_id for b in nxt.blocks if isinstance(b, ToolResult)} if nxt else set()
        )
        missing.extend(u for u in uses if u not in answered)
    return missing


class RequestBuilder:
    """Builds requests incrementally: history only grows between compactions,
    so each call merges and digests just the new messages.  A request holds a
    tuple of the merged history (plain data: msgspec encodes it)."""

    def __init__(self) -> None:
        self.originals = Originals()
        """The real inputs and results of redacted calls (``redaction``): the
        model is shown them in place of the journal's redacted forms."""
        self._merged: list[Message] = []
        self._source: list[Message] = []
        self._digests: list[bytes] = []
        self._seen = 0
        self._fixed: tuple[str, tuple[ToolSchema, ...], int, bytes] | None = None
        """System, tools and max_tokens of the last request, and their encoding."""

    def _sync(self, messages: Sequence[Message]) -> None:
        n = self._seen
        if n > len(messages) or (n and messages[n - 1] is not self._source[n - 1]):
            # History was replaced (compaction): start over.
            self._merged, self._source, self._digests, n = [], [], [], 0
        for m in messages[n:]:
            self._source.append(m)
            previous = self._digests[-1] if self._digests else b""
            # The digest (journaled as the call's fingerprint) is of the
            # message as the journal holds it, never of a redacted original.
            self._digests.append(
                hashlib.blake2b(previous + _encoder.encode(m), digest_size=8).digest()
            )
            if self.originals:
                m = _shown(m, self.originals)
            if self._merged and self._merged[-1].role == m.role:
                self._merged[-1] = merged((self._merged[-1], m))[0]
            else:
                self._merged.append(m)
        self._seen = len(messages)

    def build(
        self,
        *,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        max_tokens: int,
    ) -> tuple[ModelRequest, str]:
        """The request and its fingerprint (a digest of system, tools and
        the history chain)."""
        self._sync(messages)
        fixed = self._fixed
        if (
            fixed is None
            or fixed[0] != system
            or fixed[2] != max_tokens
            or len(fixed[1]) != len(tools)
            or not all(map(operator.is_, fixed[1], tools))
        ):
            # Encoded once while they stay the same (a tool's schema is made
            # once and frozen): with many tools, most of a request's bytes.
            held = tuple(tools)
            fixed = self._fixed = (
                system,
                held,
                max_tokens,
                _encoder.encode((system, held, max_tokens)),
            )
        request = ModelRequest(
            system=system,
            messages=tuple(self._merged),
            tools=fixed[1],
            max_tokens=max_tokens,
        )
        head = self._digests[-1] if self._digests else b""
        fp = hashlib.blake2b(head + fixed[3], digest_size=8).hexdigest()
        return request, fp


_encoder = msgspec.msgpack.Encoder()


def _shown(m: Message, originals: Originals) -> Message:
    blocks = tuple(originals.shown(b) for b in m.blocks)
    if all(a is b for a, b in zip(blocks, m.blocks, strict=True)):
        return m
    return msgspec.structs.replace(m, blocks=blocks)
