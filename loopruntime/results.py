"""Tool results as the journal holds them: what a tool may return, shaped
into result blocks and cut to ``Limits.max_tool_result_bytes``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from journal.content import Image, ResultBlock, Text

from .notices import tool_output_cut

__all__ = ["ToolOutput", "is_empty_result", "shape_result"]


@dataclass(frozen=True)
class ToolOutput:
    """What a tool returns when it has a structured value beside what the
    model reads: ``content`` is shaped like any result (str, Text/Image
    blocks), ``structured`` (plain data) is kept in the ``tool.completed``
    record."""

    content: Any
    structured: Any = None


def is_empty_result(blocks: tuple[ResultBlock, ...]) -> bool:
    """No blocks, or only text with nothing in it: the model must not read
    silence as success, so such a result is reported as an error."""
    return all(isinstance(b, Text) and not b.text.strip() for b in blocks)


def shape_result(value: Any, limit: int) -> tuple[tuple[ResultBlock, ...], int]:
    """Turn what a tool returned into result blocks, cut to ``limit`` bytes of
    text.  Returns the blocks and how many bytes were cut."""
    blocks: tuple[ResultBlock, ...]
    if isinstance(value, ToolOutput):
        return shape_result(value.content, limit)
    if isinstance(value, str):
        blocks = (Text(text=value),)
    elif isinstance(value, Text | Image):
        blocks = (value,)
    elif isinstance(value, list | tuple) and all(isinstance(b, Text | Image) for b in value):
        blocks = tuple(value)
    elif value is None:
        blocks = (Text(text=""),)
    else:
        try:
            blocks = (Text(text=msgspec.json.encode(value).decode()),)
        except (TypeError, msgspec.EncodeError) as exc:
            raise TypeError(
                f"the tool returned a {type(value).__name__}, which cannot be shown to the "
                "model; return str, Text/Image blocks, or JSON-encodable data"
            ) from exc
    return _cut(blocks, limit)


def _cut(blocks: tuple[ResultBlock, ...], limit: int) -> tuple[tuple[ResultBlock, ...], int]:
    total = sum(len(b.text.encode()) for b in blocks if isinstance(b, Text))
    if total <= limit:
        return blocks, 0
    out: list[ResultBlock] = []
    budget = limit
    for b in blocks:
        if not isinstance(b, Text):
            out.append(b)
            continue
        data = b.text.encode()
        if len(data) <= budget:
            out.append(b)
            budget -= len(data)
            continue
        # Cut on a character boundary so the text stays valid UTF-8.
        kept = data[:budget].decode("utf-8", errors="ignore")
        out.append(Text(text=kept + "\n" + tool_output_cut(limit)))
        budget = 0
        break
    return tuple(out), total - limit
