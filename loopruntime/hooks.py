"""Hooks: the host's async code at four named points of a turn.

Rules:

* a hook is made with ``@hook(point)`` and handles that one point:
  ``before_model`` (may add context, or stop the turn), ``before_tool`` (may
  deny the call with a reason the model sees, or rewrite its input),
  ``after_tool`` (may replace the result) and ``turn_end`` (sees the outcome,
  changes nothing);
* hooks of a point run in the order the definition lists them, each seeing
  what the ones before decided; a decision that changes what happens is a
  ``hook.decided`` record, committed by the worker that ran the hook together
  with its consequence (``turn.ended``, the rejection, ``tool.started``,
  ``tool.completed``); a hook returning None leaves no record;
* a hook runs under its deadline (its ``timeout=``, else
  ``Limits.hook_timeout``); one that raises, passes it or returns what its
  point cannot take fails closed: the model call is not made (the turn
  ends), the tool call is denied (the turn goes on), the result is withheld.
  A ``turn_end`` hook's failure is logged only: the turn has ended.

The functions here decide; the turn and the batch commit.  docs/tools.md
("Hooks") tells the story.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, TypeGuard, get_args, overload

import msgspec
import trio

from journal.content import Message, ResultBlock, Text
from journal.events import Event, HookAction, HookDecided, HookPoint

from .deadlines import check_timeout
from .results import shape_result
from .tools import (
    FROM_LIMITS,
    Tool,
    ToolInputError,
    _FromLimits,
    check_async_callable,
)

__all__ = [
    "HOOK_POINTS",
    "AddContext",
    "AfterTool",
    "BeforeModel",
    "BeforeTool",
    "Deny",
    "Hook",
    "HookPoint",
    "ReplaceResult",
    "Rewrite",
    "StopTurn",
    "TurnEnd",
    "after_tool",
    "before_model",
    "before_tool",
    "hook",
    "turn_end",
]

HOOK_POINTS: tuple[str, ...] = get_args(HookPoint)


def _is_point(value: object) -> TypeGuard[HookPoint]:
    return isinstance(value, str) and value in HOOK_POINTS


# -- what a hook is shown ----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BeforeModel:
    """A model call is about to be made (``step`` of turn ``turn``)."""

    loop: str
    turn: int
    step: int
    messages: tuple[Message, ...]
    """The context the call will be built from."""


@dataclass(frozen=True, kw_only=True)
class BeforeTool:
    """An allowed tool call is about to start."""

    loop: str
    turn: int
    tool: str
    tool_use_id: str
    input: Mapping[str, Any]
    """The input as the hooks before this one left it."""


@dataclass(frozen=True, kw_only=True)
class AfterTool:
    """A tool call ran to its end (it returned or raised); its result is not
    yet recorded."""

    loop: str
    turn: int
    tool: str
    tool_use_id: str
    execution_id: str
    input: Mapping[str, Any]
    content: tuple[ResultBlock, ...]
    is_error: bool


@dataclass(frozen=True, kw_only=True)
class TurnEnd:
    """A turn ended (its ``turn.ended`` is durable)."""

    loop: str
    turn: int
    outcome: str
    code: str | None = None


# -- what a hook may decide ----------------------------------------------------------


@dataclass(frozen=True)
class AddContext:
    """``before_model``: put ``text`` in the context (a user message) before the call."""

    text: str


@dataclass(frozen=True)
class StopTurn:
    """``before_model``: make no model call; the turn ends (``failed``, code
    ``hook.stopped``) with ``reason``."""

    reason: str


@dataclass(frozen=True)
class Deny:
    """``before_tool``: the call does not run; the model reads ``reason``."""

    reason: str


@dataclass(frozen=True)
class Rewrite:
    """``before_tool``: the call runs with ``input`` (it must fit the tool's schema)."""

    input: Mapping[str, Any]


@dataclass(frozen=True)
class ReplaceResult:
    """``after_tool``: the model reads ``content`` (shaped like a tool's
    return value) instead of the tool's result."""

    content: Any
    is_error: bool = False
    reason: str = ""


_ALLOWED: dict[str, tuple[type, ...]] = {
    "before_model": (AddContext, StopTurn),
    "before_tool": (Deny, Rewrite),
    "after_tool": (ReplaceResult,),
    "turn_end": (),
}


@dataclass(frozen=True, kw_only=True, eq=False)
class Hook:
    """An async function run at ``point``; recorded under ``name``."""

    name: str
    point: HookPoint
    fn: Callable[[Any], Awaitable[Any]]
    timeout: float | _FromLimits | None = FROM_LIMITS

    def __post_init__(self) -> None:
        if self.point not in HOOK_POINTS:
            raise ValueError(
                f"hook {self.name!r}: {self.point!r} is not a hook point; use one of "
                f"{', '.join(HOOK_POINTS)}"
            )
        check_async_callable(f"hook {self.name!r}", self.fn)
        if self.timeout is not FROM_LIMITS:
            check_timeout(f"hook {self.name!r}: timeout", self.timeout)

    def timeout_under(self, hook_timeout: float | None) -> float | None:
        return hook_timeout if self.timeout is FROM_LIMITS else self.timeout


@overload
def hook(
    point: str, *, name: str | None = None, timeout: float | _FromLimits | None = FROM_LIMITS
) -> Callable[[Callable[[Any], Awaitable[Any]]], Hook]: ...


@overload
def hook(
    point: str,
    fn: Callable[[Any], Awaitable[Any]],
    *,
    name: str | None = None,
    timeout: float | _FromLimits | None = FROM_LIMITS,
) -> Hook: ...


def hook(
    point: str,
    fn: Callable[[Any], Awaitable[Any]] | None = None,
    *,
    name: str | None = None,
    timeout: float | _FromLimits | None = FROM_LIMITS,
) -> Hook | Callable[[Callable[[Any], Awaitable[Any]]], Hook]:
    """Make an async function a hook at ``point``: ``@hook("before_tool")``
    or ``hook("before_tool", fn)``.  ``name`` (default: the function's)
    names its records; ``timeout`` (seconds, None for none) overrides
    ``Limits.hook_timeout``."""
    if not _is_point(point):
        raise ValueError(
            f"{point!r} is not a hook point; use one of {', '.join(HOOK_POINTS)} "
            '(e.g. @hook("before_tool"))'
        )
    checked: HookPoint = point

    def build(f: Callable[[Any], Awaitable[Any]]) -> Hook:
        label = name or getattr(f, "__name__", None) or type(f).__name__
        return Hook(name=label, point=checked, fn=f, timeout=timeout)

    return build(fn) if fn is not None else build


# -- running them --------------------------------------------------------------------


async def _call(h: Hook, shown: object, hook_timeout: float | None) -> tuple[Any, str]:
    """What ``h`` returned, and why it failed ("" when it did not)."""
    seconds = h.timeout_under(hook_timeout)
    with trio.move_on_after(math.inf if seconds is None else seconds) as scope:
        try:
            answer = await h.fn(shown)
        except Exception as exc:
            return None, f"it raised {type(exc).__name__}: {exc}"
    if scope.cancelled_caught:
        return None, f"it did not answer within its {seconds:g} s deadline"
    allowed = _ALLOWED[h.point]
    if answer is not None and not isinstance(answer, allowed):
        kinds = ", ".join(t.__name__ for t in allowed)
        return None, (
            f"it returned {type(answer).__name__}, which a {h.point} hook cannot "
            f"(None{', ' + kinds if kinds else ''})"
        )
    return answer, ""


def _decided(h: Hook, action: HookAction, **fields: Any) -> HookDecided:
    return HookDecided(hook=h.name, point=h.point, action=action, **fields)


@dataclass
class ModelCallVerdict:
    events: list[Event]
    """``hook.decided`` records to commit before the call (or with the turn's end)."""
    stop: tuple[str, str] | None = None
    """(code, detail) of the turn's end when a hook stopped it or failed."""


async def before_model(
    hooks: Sequence[Hook], shown: BeforeModel, hook_timeout: float | None
) -> ModelCallVerdict:
    verdict = ModelCallVerdict(events=[])
    where = {"turn": shown.turn, "step": shown.step}
    for h in hooks:
        if h.point != "before_model":
            continue
        answer, failure = await _call(h, shown, hook_timeout)
        if failure:
            verdict.events.append(_decided(h, "failed", reason=failure, **where))
            verdict.stop = (
                "hook.failed",
                f"before_model hook {h.name!r} failed ({failure}); the model call was not made",
            )
            break
        if isinstance(answer, StopTurn):
            verdict.events.append(_decided(h, "stop", reason=str(answer.reason), **where))
            verdict.stop = ("hook.stopped", f"hook {h.name!r} stopped the turn: {answer.reason}")
            break
        if isinstance(answer, AddContext):
            verdict.events.append(_decided(h, "context", text=str(answer.text), **where))
    return verdict


@dataclass
class ToolCallVerdict:
    events: list[Event]
    """``hook.decided`` records, to commit with the call's start or rejection."""
    input: dict[str, Any]
    """The input the call runs with."""
    denial: str | None = None
    """What the model reads when a hook denied the call (or failed)."""


async def before_tool(
    hooks: Sequence[Hook], shown: BeforeTool, tool: Tool, hook_timeout: float | None
) -> ToolCallVerdict:
    raw = dict(shown.input)
    verdict = ToolCallVerdict(events=[], input=raw)
    where = {"turn": shown.turn, "tool_use_id": shown.tool_use_id}
    for h in hooks:
        if h.point != "before_tool":
            continue
        # A view, so that a hook changes the input only by a recorded Rewrite.
        answer, failure = await _call(h, replace(shown, input=MappingProxyType(raw)), hook_timeout)
        if isinstance(answer, Rewrite):
            try:
                new = _plain_input(answer.input)
                tool.parse(new)
            except (TypeError, ToolInputError) as exc:
                failure = f"its rewrite does not fit the tool: {exc}"
            else:
                verdict.events.append(_decided(h, "rewrite", input=new, original=raw, **where))
                raw = verdict.input = new
                continue
        if failure:
            verdict.events.append(_decided(h, "failed", reason=failure, **where))
            verdict.denial = (
                f"[denied: before_tool hook {h.name} failed, so the runtime denies the call]"
            )
            break
        if isinstance(answer, Deny):
            verdict.events.append(_decided(h, "deny", reason=str(answer.reason), **where))
            verdict.denial = f"[denied by hook {h.name}: {answer.reason}]"
            break
    return verdict


def _plain_input(value: Mapping[str, Any]) -> dict[str, Any]:
    """A rewritten input as the journal can hold it: a JSON object."""
    if not isinstance(value, Mapping):
        raise TypeError(f"the input must be a mapping, not {type(value).__name__}")
    try:
        plain = msgspec.json.decode(msgspec.json.encode(dict(value)))
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeError(f"the input is not JSON data ({exc})") from exc
    assert isinstance(plain, dict)
    return plain


@dataclass
class ResultVerdict:
    events: list[Event]
    content: tuple[ResultBlock, ...]
    is_error: bool
    cut: int = 0
    """Bytes cut from a replacement over ``Limits.max_tool_result_bytes``."""
    changed: bool = False


async def after_tool(
    hooks: Sequence[Hook], shown: AfterTool, limit: int, hook_timeout: float | None
) -> ResultVerdict:
    verdict = ResultVerdict(events=[], content=shown.content, is_error=shown.is_error)
    where = {
        "turn": shown.turn,
        "tool_use_id": shown.tool_use_id,
        "execution_id": shown.execution_id,
    }
    for h in hooks:
        if h.point != "after_tool":
            continue
        now = replace(shown, content=verdict.content, is_error=verdict.is_error)
        answer, failure = await _call(h, now, hook_timeout)
        if isinstance(answer, ReplaceResult):
            try:
                content, cut = shape_result(answer.content, limit)
            except TypeError as exc:
                failure = f"its replacement cannot be shown: {exc}"
            else:
                verdict.events.append(_decided(h, "replace", reason=str(answer.reason), **where))
                verdict.content, verdict.is_error, verdict.cut = content, answer.is_error, cut
                verdict.changed = True
                continue
        if failure:
            verdict.events.append(_decided(h, "failed", reason=failure, **where))
            verdict.content = (
                Text(
                    text=f"[withheld: after_tool hook {h.name} failed, so the runtime does "
                    "not show this call's result]"
                ),
            )
            verdict.is_error, verdict.cut, verdict.changed = True, 0, True
            break
    return verdict


async def turn_end(
    hooks: Sequence[Hook], shown: TurnEnd, hook_timeout: float | None
) -> list[tuple[str, str]]:
    """Run the ``turn_end`` hooks; (hook, failure) for each that failed."""
    failed: list[tuple[str, str]] = []
    for h in hooks:
        if h.point == "turn_end":
            _, failure = await _call(h, shown, hook_timeout)
            if failure:
                failed.append((h.name, failure))
    return failed
