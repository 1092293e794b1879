"""Typed outputs: a turn whose answer is a validated value, not free text.

Rules:

* ``LoopDefinition(output=T)`` offers the model the final-answer tool
  (``FINAL_ANSWER``), whose input schema is msgspec's JSON Schema for ``T``
  (an object type as it is; any other type as the field ``value`` of an
  object).  The schema is made when the definition is: a type msgspec cannot
  describe is a ``TypeError`` then.
* Input that does not validate is answered like any invalid tool input: a
  model-visible error naming the field, and the model tries again.  A reply
  that ends without the tool gets the runtime's reminder.  Each counts as an
  attempt; past ``Limits.max_output_retries`` the turn ends with outcome
  ``invalid_output``.
* The accepted value goes, as plain data, into the turn's ``turn.ended``
  (``output``) and is decoded into ``T`` on read (``decode``).  Everything
  is decided from loop state, so a restored turn decides the same.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from journal.content import Message, ToolResult, ToolUse
from journal.events import Event, Notice, SteerApplied, SteerQueued

from .ids import new_id
from .model import ToolSchema
from .notices import FINAL_ANSWER, OUTPUT_REQUIRED
from .tools import Tool, ToolContext, ToolInputError

__all__ = [
    "FINAL_ANSWER",
    "OUTPUT_REMINDER",
    "OutputSpec",
    "OutputTool",
    "accepted_output",
    "output_reminder",
    "output_spec",
    "output_verdict",
]

OUTPUT_REMINDER = (
    f"[runtime: this turn must end with a call to the {FINAL_ANSWER} tool, whose input is "
    "the answer; call it now]"
)

_ACCEPTED = "[accepted: this is the turn's answer]"


class _Parsed(msgspec.Struct):
    value: Any


@dataclass(frozen=True, eq=False, kw_only=True)
class OutputTool(Tool):
    """The final-answer tool for one output type."""

    output_type: Any = None
    wrapped: bool = False
    """The type is not an object: the model sends it as the field ``value``."""
    input_schema: dict[str, Any] = field(default_factory=dict)

    @property
    def schema(self) -> ToolSchema:
        return ToolSchema(
            name=self.name, description=self.description, input_schema=self.input_schema
        )

    def parse(self, raw: Mapping[str, Any]) -> msgspec.Struct:
        return _Parsed(value=self.validate(raw))

    def validate(self, raw: Mapping[str, Any]) -> Any:
        """The typed value of the model's input; ``ToolInputError`` naming the
        field when it does not validate."""
        data: Any = dict(raw)
        if self.wrapped:
            if set(data) != {"value"}:
                raise ToolInputError(
                    f"invalid input for tool {self.name}: give the answer as the one field `value`"
                )
            data = data["value"]
        try:
            return msgspec.convert(data, type=self.output_type)
        except msgspec.ValidationError as exc:
            raise ToolInputError(f"invalid input for tool {self.name}: {exc}") from exc

    async def invoke(self, ctx: ToolContext, parsed: msgspec.Struct) -> Any:
        ctx._close()
        return _ACCEPTED


async def _not_called(ctx: ToolContext, parsed: msgspec.Struct) -> Any:
    raise AssertionError("the final-answer tool is invoked through OutputTool.invoke")


@dataclass(frozen=True, eq=False)
class OutputSpec:
    """An output type with its final-answer tool (made once per type)."""

    type: Any
    tool: OutputTool

    def decode(self, raw: Any) -> Any:
        """The stored plain data of an answer as the output type."""
        return msgspec.convert(raw, type=self.type)


def output_spec(output_type: Any, where: str) -> OutputSpec:
    """The spec for ``output_type``; ``TypeError`` naming ``where`` and the
    type when msgspec cannot describe or validate it."""
    try:
        return _spec(output_type)
    except TypeError as exc:
        raise TypeError(
            f"{where}: output type {output_type!r} cannot be described as a JSON Schema by "
            f"msgspec ({exc}); use a msgspec Struct, a dataclass, a TypedDict or builtin types"
        ) from None


@functools.lru_cache(maxsize=256)
def _spec(output_type: Any) -> OutputSpec:
    schema = msgspec.json.schema(output_type)
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    ref = schema.get("$ref", "")
    top = defs.pop(ref.rsplit("/", 1)[-1], schema) if ref else schema
    top = {k: v for k, v in top.items() if k not in ("title", "$defs")}
    wrapped = top.get("type") != "object"
    if wrapped:
        top = {"type": "object", "properties": {"value": top}, "required": ["value"]}
    if defs:
        top["$defs"] = defs
    tool = OutputTool(
        name=FINAL_ANSWER,
        description=(
            "Give the final answer of this turn. Call it exactly once, when you are done; "
            "its input is the answer, and it must fit the schema."
        ),
        input_type=_Parsed,
        fn=_not_called,
        unpack=False,
        permission="allow",
        replay_safe=True,
        timeout=None,
        output_type=output_type,
        wrapped=wrapped,
        input_schema=top,
    )
    return OutputSpec(type=output_type, tool=tool)


def accepted_output(spec: OutputSpec, messages: list[Message]) -> tuple[bool, Any]:
    """Whether the last tool results accepted a final answer, and its value
    as plain data: the final-answer call of the last assistant message whose
    result is not an error."""
    if len(messages) < 2 or messages[-1].role != "user" or messages[-2].role != "assistant":
        return False, None
    ok = {
        b.tool_use_id for b in messages[-1].blocks if isinstance(b, ToolResult) and not b.is_error
    }
    for block in messages[-2].blocks:
        if isinstance(block, ToolUse) and block.name == FINAL_ANSWER and block.id in ok:
            try:
                value = spec.tool.validate(block.input)
            except ToolInputError:
                continue  # accepted under another mode's type: not this one's answer
            return True, msgspec.to_builtins(value)
    return False, None


def output_verdict(
    spec: OutputSpec, messages: list[Message], failures: int, retries: int
) -> dict[str, Any] | None:
    """How the open turn ends now (the arguments of its ``turn.ended``), or
    None while the model may still give its answer.  ``failures``: the
    attempts the turn refused so far (``LoopState.turn_output_failures``)."""
    done, value = accepted_output(spec, messages)
    if done:
        return {"outcome": "completed", "output": value}
    if failures > retries:
        return {
            "outcome": "invalid_output",
            "kind": "model",
            "code": "output.invalid",
            "detail": (
                f"the model gave no valid {FINAL_ANSWER} in {failures} "
                f"attempts (Limits.max_output_retries={retries})"
            ),
        }
    return None


def output_reminder() -> list[Event]:
    """What a reply that ended without the typed answer commits: the notice
    (the fold counts it as an attempt) and the reminder, as steering, that
    the next model call reads."""
    steer_id = new_id("steer_")
    return [
        Notice(code=OUTPUT_REQUIRED, text=f"the reply ended without a call to {FINAL_ANSWER}"),
        SteerQueued(steer_id=steer_id, text=OUTPUT_REMINDER),
        SteerApplied(steer_ids=(steer_id,)),
    ]
