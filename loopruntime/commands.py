"""Commands a loop actor accepts.

Every command may carry a ``Reply`` the actor settles once it has accepted
(or refused) the command: acceptance means the resulting event is durable.
What happens *afterwards* (a turn running, a gate opening) is told by events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import trio

from journal.content import Message, ResultBlock
from journal.events import GateScope

from .errors import LoopClosedError

__all__ = [
    "AnswerGate",
    "CancelQueuedInput",
    "ChangeInference",
    "ChangeMode",
    "Command",
    "Compact",
    "DecideGate",
    "Interrupt",
    "Pause",
    "ReplaceTools",
    "Reply",
    "ResolveToolCall",
    "Resume",
    "Shutdown",
    "Snapshot",
    "Steer",
    "SubagentResult",
    "UserInput",
]

T = TypeVar("T")


class Reply(Generic[T]):
    """A one-shot answer from the actor.  ``wait()`` raises what the actor failed
    it with; an actor that dies fails every pending reply (nothing waits forever)."""

    __slots__ = ("_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def set(self, value: T) -> None:
        if not self._done.is_set():
            self._value = value
            self._done.set()

    def fail(self, error: BaseException) -> None:
        if not self._done.is_set():
            self._error = error
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def result(self) -> T:
        """The value of a settled reply (raises what it was failed with)."""
        if not self._done.is_set():
            raise RuntimeError("the reply is not settled yet")
        if self._error is not None:
            raise self._error
        # Settled without an error: ``set`` stored a T (None when T admits it).
        return self._value  # type: ignore[return-value]

    async def wait(self) -> T:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # as in ``result``


@dataclass(eq=False, kw_only=True)
class _Command:
    reply: Reply[Any] = field(default_factory=Reply)
    cause: str | None = None
    """Id of the record that asked for this (the first resulting record's cause)."""
    key: str | None = None
    """The caller's idempotency key (checked text, see ``keys``)."""
    principal: str | None = None
    """Who gave the command (checked text, see ``principals``): recorded on
    the records it makes."""


@dataclass(eq=False, kw_only=True)
class UserInput(_Command):
    """Queue input; it starts a turn now or when the running one ends."""

    input_id: str
    messages: tuple[Message, ...]
    trigger: Literal["external", "notification", "subagent"] = "external"


@dataclass(eq=False, kw_only=True)
class SubagentResult(_Command):
    """A child loop's result, delivered to its parent as input."""

    input_id: str
    child_loop: str
    text: str
    status: Literal["completed", "failed", "interrupted", "crashed"] = "completed"
    background: bool = False
    tokens: int = 0
    """Tokens the child and its own children spent (``budgets.tokens_spent``)."""


@dataclass(eq=False, kw_only=True)
class CancelQueuedInput(_Command):
    input_id: str


@dataclass(eq=False, kw_only=True)
class Steer(_Command):
    steer_id: str
    text: str


@dataclass(eq=False, kw_only=True)
class AnswerGate(_Command):
    gate_id: str
    answer: str


@dataclass(eq=False, kw_only=True)
class DecideGate(_Command):
    gate_id: str
    allow: bool
    scope: GateScope = "once"


@dataclass(eq=False, kw_only=True)
class ChangeMode(_Command):
    mode: str | None


@dataclass(eq=False, kw_only=True)
class ChangeInference(_Command):
    """Choose the loop's model (by registered name) and output budget from
    its next turn on; None keeps the current choice, ``reset`` drops both
    choices first (back to the definition's)."""

    model: str | None = None
    max_tokens: int | None = None
    reset: bool = False


@dataclass(eq=False, kw_only=True)
class ReplaceTools(_Command):
    """Offer these tools (registered names) from the next turn on; None: the
    definition's own again.  Delegates are always offered."""

    tools: tuple[str, ...] | None


@dataclass(eq=False, kw_only=True)
class Compact(_Command):
    attempt_id: str


@dataclass(eq=False, kw_only=True)
class ResolveToolCall(_Command):
    execution_id: str
    content: tuple[ResultBlock, ...]
    is_error: bool = False


@dataclass(eq=False, kw_only=True)
class Interrupt(_Command):
    """Stop the running turn.  Reply: whether a turn was stopped."""


@dataclass(eq=False, kw_only=True)
class Pause(_Command):
    """Pause the loop (``loop.paused``): it starts no model call, tool, child,
    turn or compaction until ``Resume``; a step already running finishes.
    Reply: whether this paused it (False: it already was; nothing recorded
    but the key)."""


@dataclass(eq=False, kw_only=True)
class Resume(_Command):
    """End the loop's pause (``loop.resumed``); what waited goes on.  Reply:
    whether this resumed it (False: it was not paused; nothing recorded but
    the key)."""


@dataclass(eq=False, kw_only=True)
class Shutdown(_Command):
    """Stop the running turn (if any) and the loop.  ``final`` also records
    ``loop.stopped``: the loop is done for good (a finished child)."""

    final: bool = False


@dataclass(eq=False, kw_only=True)
class Snapshot(_Command):
    """Reply: a consistent deep copy of the loop state."""


Command = (
    UserInput
    | SubagentResult
    | CancelQueuedInput
    | Steer
    | AnswerGate
    | DecideGate
    | ChangeMode
    | ChangeInference
    | ReplaceTools
    | Compact
    | ResolveToolCall
    | Interrupt
    | Pause
    | Resume
    | Shutdown
    | Snapshot
)

PRIORITY = (Interrupt, Shutdown)


def closed_error(loop: str) -> LoopClosedError:
    return LoopClosedError(f"loop {loop} is shut down; it takes no more commands")
