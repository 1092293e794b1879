"""Permission classifiers: a review of a call before a person is asked.

Rules:

* classifiers run only where the permission policy said ``ask`` (no
  session-wide grant, no decision already recorded for the call): the
  policy's ``allow`` and ``deny`` stand, and a classifier can only spare a
  person a question, never overrule the policy;
* they run in the order the definition lists them; the first ``allow`` or
  ``deny`` decides, ``ask`` passes to the next, and when all ask the
  permission gate opens as without them;
* each verdict is a ``gate.reviewed`` record; the fold takes an ``allow`` or
  ``deny`` as the call's decision, so a restore never reviews it again;
* a classifier that raises, passes its deadline (its ``timeout=``, else
  ``Limits.hook_timeout``; a sync one is not cut) or answers something that
  is not a verdict counts as ``ask``, recorded with ``failed``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard, get_args, overload

import trio

from journal.events import GateReviewed

from .deadlines import check_timeout
from .tools import FROM_LIMITS, _FromLimits

__all__ = [
    "Classifier",
    "PermissionRequest",
    "Review",
    "Verdict",
    "as_classifier",
    "classifier",
    "review",
]

Verdict = Literal["allow", "deny", "ask"]
_VERDICTS: tuple[str, ...] = get_args(Verdict)


def _is_verdict(value: object) -> TypeGuard[Verdict]:
    return isinstance(value, str) and value in _VERDICTS


@dataclass(frozen=True, kw_only=True)
class PermissionRequest:
    """The call a classifier reviews."""

    loop: str
    tool: str
    tool_use_id: str
    input: Mapping[str, Any]


@dataclass(frozen=True)
class Review:
    """A classifier's answer: ``verdict`` with the reason a person (and, on
    ``deny``, the model) reads."""

    verdict: Verdict
    reason: str = ""


@dataclass(frozen=True, kw_only=True, eq=False)
class Classifier:
    """A function of a ``PermissionRequest`` giving a ``Review`` (or just a
    verdict), sync or async; recorded under ``name``."""

    name: str
    fn: Callable[[PermissionRequest], Any]
    timeout: float | _FromLimits | None = FROM_LIMITS

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(
                f"classifier {self.name!r} must be a function (sync or async), not "
                f"{type(self.fn).__name__} {self.fn!r}"
            )
        if self.timeout is not FROM_LIMITS:
            check_timeout(f"classifier {self.name!r}: timeout", self.timeout)


@overload
def classifier(
    fn: Callable[[PermissionRequest], Any], /, *, name: str | None = None
) -> Classifier: ...


@overload
def classifier(
    *, name: str | None = None, timeout: float | _FromLimits | None = FROM_LIMITS
) -> Callable[[Callable[[PermissionRequest], Any]], Classifier]: ...


def classifier(
    fn: Callable[[PermissionRequest], Any] | None = None,
    /,
    *,
    name: str | None = None,
    timeout: float | _FromLimits | None = FROM_LIMITS,
) -> Classifier | Callable[[Callable[[PermissionRequest], Any]], Classifier]:
    """Make a function a classifier, bare (``@classifier``) or with a
    ``name`` and ``timeout``.  A plain function in
    ``LoopDefinition(classifiers=...)`` is one already, named after itself."""

    def build(f: Callable[[PermissionRequest], Any]) -> Classifier:
        return Classifier(name=name or _name_of(f), fn=f, timeout=timeout)

    return build(fn) if fn is not None else build


def _name_of(f: object) -> str:
    return str(getattr(f, "__name__", None) or type(f).__name__)


def as_classifier(value: object) -> Classifier:
    """``value`` as a ``Classifier``; ``TypeError`` when it is not callable."""
    if isinstance(value, Classifier):
        return value
    if not callable(value) or isinstance(value, type):
        raise TypeError(
            f"a classifier must be a function of a PermissionRequest (sync or async) or a "
            f"Classifier, not {type(value).__name__} {value!r}"
        )
    return Classifier(name=_name_of(value), fn=value)


async def _ask(c: Classifier, request: PermissionRequest, hook_timeout: float | None) -> Review:
    """The review of ``c``; a failure is an ``ask`` (raised as ``_Failed``)."""
    seconds = hook_timeout if c.timeout is FROM_LIMITS else c.timeout
    with trio.move_on_after(math.inf if seconds is None else seconds) as scope:
        try:
            answer = c.fn(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            raise _Failed(f"classifier {c.name} raised {type(exc).__name__}: {exc}") from exc
    if scope.cancelled_caught:
        raise _Failed(f"classifier {c.name} did not answer within its {seconds:g} s deadline")
    if _is_verdict(answer):
        return Review(answer)
    if isinstance(answer, Review) and answer.verdict in _VERDICTS:
        return answer
    raise _Failed(
        f"classifier {c.name} returned {answer!r}, which is not a verdict "
        "(a Review, or 'allow', 'deny' or 'ask')"
    )


class _Failed(Exception):
    pass


async def review(
    classifiers: Sequence[object], request: PermissionRequest, hook_timeout: float | None
) -> list[GateReviewed]:
    """The reviews of ``request``, up to the first that decides (its
    verdict is the last record's; ``ask`` when none decided)."""
    records: list[GateReviewed] = []
    for value in classifiers:
        c = as_classifier(value)
        failed = False
        try:
            found = await _ask(c, request, hook_timeout)
        except _Failed as exc:
            found, failed = Review("ask", str(exc)), True
        records.append(
            GateReviewed(
                tool_use_id=request.tool_use_id,
                tool_name=request.tool,
                classifier=c.name,
                verdict=found.verdict,
                reason=str(found.reason),
                failed=failed,
            )
        )
        if found.verdict != "ask":
            break
    return records
