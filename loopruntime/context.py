"""Building the model request from loop state (pure).

The request is always valid for the provider: consecutive messages of one
role are merged, and a context that still holds an unanswered ``tool_use``
is refused loudly rather than sent.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import Any, overload

import msgspec

from journal.content import Block, Message, ToolResult, ToolUse

from .model import ModelRequest, ToolSchema
from .redaction import Originals

__all__ = ["RequestBuilder", "Transcript", "merged", "unanswered_tool_uses"]


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


class Transcript(Sequence[Message]):
    """The messages of one request: the first ``len`` entries of the builder's
    merged history, read in place instead of copied into a tuple per call.

    Immutable as far as its reader can tell: the builder only appends past
    every length it has handed out, and copies its list before it would
    change an entry one holds (a merge into the last message).  Equal to a
    tuple, or another transcript, of the same messages, and hashed alike.
    """

    __slots__ = ("_items", "_len")

    def __init__(self, items: list[Message], length: int) -> None:
        self._items = items
        self._len = length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self._len][index])
        n = self._len
        if not -n <= index < n:
            raise IndexError(f"transcript index {index} out of range ({n} messages)")
        return self._items[index + n if index < 0 else index]

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._items, self._len)

    def __reversed__(self) -> Iterator[Message]:
        items = self._items
        return (items[i] for i in range(self._len - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Transcript):
            return self._len == other._len and all(map(operator.eq, self, other))
        if isinstance(other, tuple):
            return self._len == len(other) and all(map(operator.eq, self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Transcript({tuple(self)!r})"

    def __add__(self, other: Any) -> tuple[Message, ...]:
        # What a tuple's reader may have written: ``request.messages + (m,)``.
        if isinstance(other, tuple | Transcript):
            return (*self, *other)
        return NotImplemented


class RequestBuilder:
    """Builds requests incrementally: history only grows between compactions,
    so each call merges and digests just the new messages, and the request
    reads the merged history in place (a ``Transcript``) instead of copying
    it.  This keeps the cost of a step flat however long the conversation is."""

    def __init__(self) -> None:
        self.originals = Originals()
        """The real inputs and results of redacted calls (``redaction``): the
        model is shown them in place of the journal's redacted forms."""
        self._merged: list[Message] = []
        self._source: list[Message] = []
        self._digests: list[bytes] = []
        self._seen = 0
        self._lent = 0
        """How many entries of ``_merged`` the last request's transcript reads."""
        self._fixed: tuple[str, tuple[ToolSchema, ...], int, bytes] | None = None
        """System, tools and max_tokens of the last request, and their encoding."""

    def _sync(self, messages: Sequence[Message]) -> None:
        n = self._seen
        if n > len(messages) or (n and messages[n - 1] is not self._source[n - 1]):
            # History was replaced (compaction): start over.
            self._merged, self._source, self._digests, n = [], [], [], 0
            self._lent = 0
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
                if self._lent == len(self._merged):
                    # A request handed out reads this entry: it keeps the old
                    # list, the builder goes on with a copy (rare: a merge
                    # into the message a request ended with).
                    self._merged = self._merged.copy()
                    self._lent = 0
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
        lent = self._lent = len(self._merged)
        request = ModelRequest(
            system=system,
            messages=Transcript(self._merged, lent),
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
