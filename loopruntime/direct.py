"""Direct results: tools whose results are the turn's answer.

Rules:

* A tool declared ``@tool(direct=True)`` is a direct tool.  When every call
  of the last reply is to a direct tool and every one succeeded, the turn
  ends ``completed`` with no further model call: its ``turn.ended`` names
  the calls (``direct``, in call order) and holds the answer (``output``).
* A reply that also calls an ordinary tool, a direct call that failed (an
  error, a denial, a call not run), or steering waiting for the model: the
  turn goes on as for any batch, and the model reads the results.
* Untyped loop: the answer is the list of the results' texts, in call order
  (``Session.result`` joins them with a blank line).
* Typed loop (``output=T``): each result's text is read as JSON (text that
  is not JSON is the string itself); one call gives its value, several the
  list of theirs.  It must validate as ``T``, or the turn ends with outcome
  ``invalid_output`` and code ``output.direct_invalid``, naming where it
  did not fit: the tool's author promised the type, so the model is not
  asked to mend it.
* Decided from loop state and the definition alone, so a turn restored after
  its direct results were committed ends the same way.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import msgspec

from journal.content import Message, Text, ToolResult, ToolUse

from .output import OutputSpec

__all__ = ["DIRECT_INVALID", "direct_verdict"]

DIRECT_INVALID = "output.direct_invalid"
"""The code of a turn whose direct results do not fit the loop's output type."""


def direct_verdict(
    direct: Collection[str], output: OutputSpec | None, messages: list[Message]
) -> dict[str, Any] | None:
    """How the open turn ends now that the last reply's results are in (the
    arguments of its ``turn.ended``), or None when they go to the model.
    ``direct``: the names of the direct tools the turn may call."""
    results = _direct_results(direct, messages)
    if results is None:
        return None
    ids = tuple(use_id for use_id, _ in results)
    texts = [text for _, text in results]
    if output is None:
        return {"outcome": "completed", "output": texts, "direct": ids}
    values = [_value(text) for text in texts]
    try:
        value = msgspec.convert(values[0] if len(values) == 1 else values, type=output.type)
    except msgspec.ValidationError as exc:
        return {
            "outcome": "invalid_output",
            "kind": "tool",
            "code": DIRECT_INVALID,
            "detail": (
                f"the direct results of {', '.join(ids)} do not fit the loop's output type "
                f"{_type_name(output.type)}: {exc}"
            ),
            "direct": ids,
        }
    return {"outcome": "completed", "output": msgspec.to_builtins(value), "direct": ids}


def _direct_results(
    direct: Collection[str], messages: list[Message]
) -> list[tuple[str, str]] | None:
    """(tool_use id, result text) of the last reply's calls, in call order,
    when they are all to direct tools and all succeeded; else None."""
    if len(messages) < 2 or messages[-1].role != "user" or messages[-2].role != "assistant":
        return None
    uses = [b for b in messages[-2].blocks if isinstance(b, ToolUse)]
    if not uses or any(u.name not in direct for u in uses):
        return None
    answers: dict[str, ToolResult] = {}
    for block in messages[-1].blocks:
        if not isinstance(block, ToolResult):
            return None  # more than the results: input or steering for the model
        answers[block.tool_use_id] = block
    found = []
    for use in uses:
        result = answers.get(use.id)
        if result is None or result.is_error:
            return None
        found.append((use.id, "".join(b.text for b in result.content if isinstance(b, Text))))
    return found


def _value(text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def _type_name(t: Any) -> str:
    return getattr(t, "__name__", None) or repr(t)
