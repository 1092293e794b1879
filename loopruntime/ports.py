"""The narrow surfaces the loop's workers are handed; the ``Loop`` implements them.

A worker (the turn, the tool batch, a compaction, a delegation) gets the port
it needs, never the actor, so its signature names everything it may touch.
Rules: a worker changes loop state only through ``commit`` (the actor appends,
folds and publishes); no worker imports the actor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypedDict, TypeVar, Unpack

from structlog.typing import FilteringBoundLogger

from journal.events import Event, GateResolved, Provenance
from journal.record import Record

from .commands import Command
from .context import RequestBuilder
from .definition import Delegator, LoopDefinition, ResolvedDefinition
from .forms import Forms
from .model import Delta
from .state import LoopState
from .tools import Tool

__all__ = [
    "ChildLoop",
    "CommitOptions",
    "DeltaSink",
    "LoopPort",
    "ParentPort",
    "ToolsPort",
    "TurnPort",
]

T = TypeVar("T")


class CommitOptions(TypedDict, total=False):
    """The options of every ``commit`` (a worker's ``LoopPort.commit``, the
    ``Loop``'s, its host's and the session writer's), each None when left out.

    A commit is atomic under cancellation: once asked for it runs to its end,
    so the caller always learns exactly what became durable.
    """

    cause: str | None
    """The id of the record that made these happen: every record's cause."""
    causes: Sequence[str | None] | None
    """A cause per event, in place of ``cause``."""
    ids: Sequence[str | None] | None
    """A record id per event chosen beforehand (None: a fresh one), so a
    record can name another of the same commit as its cause."""
    guard: Callable[[], bool] | None
    """Append only if ``guard()`` holds once everything committed before is
    folded; else append nothing and raise ``GuardFailedError``
    (compare-and-swap)."""


class LoopPort(Protocol):
    """A loop as every worker sees it: its id, folded state and definition,
    and the one way to change its state.  Compaction needs no more."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> LoopState:
        """The fold of the loop's records; read it, never write it."""
        ...

    @property
    def definition(self) -> LoopDefinition: ...

    def resolved(self) -> ResolvedDefinition:
        """The definition under the loop's current mode."""
        ...

    async def commit(
        self, events: Sequence[Event], **options: Unpack[CommitOptions]
    ) -> list[Record]:
        """Append durably, fold into ``state``, publish, then return
        (``CommitOptions`` says what each option does)."""
        ...

    def working(self) -> AbstractAsyncContextManager[None]:
        """``async with`` around the work of a task of the loop's own: it waits
        for the loop's permit (``permits.py``) unless the loop holds it."""
        ...

    def outside(self) -> AbstractAsyncContextManager[None]:
        """``async with`` around a wait on something outside the runtime (a
        model, a tool, a person): past ``permits.HOLD`` of it the loop's permit
        goes to another loop, and is waited for again after."""
        ...

    async def run_working(self, work: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await work(*args)`` inside ``working()``."""
        ...

    async def run_outside(self, wait: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await wait(*args)`` inside ``outside()``."""
        ...


class ToolsPort(LoopPort, Delegator, Protocol):
    """What a batch of tool calls touches: the loop's log, its count of working
    tasks and the gates it waits at.  The port itself is the ``runtime`` the
    batch hands to tools (a delegate's tool reaches it as a ``Delegator``)."""

    @property
    def log(self) -> FilteringBoundLogger: ...

    def logs(self, level: int) -> bool:
        """Whether a line at ``level`` (a ``logging`` level) would be kept."""
        ...

    def busy(self, delta: int) -> None:
        """A task of this loop starts (+1) or stops (-1) working; the loop is
        quiet when none works."""
        ...

    @property
    def listed(self) -> Sequence[Tool]:
        """The tools the loop's toolsets listed when it started."""
        ...

    @property
    def forms(self) -> Forms:
        """The types open form gates' answers must fit (this process only)."""
        ...

    async def wait_gate(self, gate_id: str) -> GateResolved:
        """Wait until a person closes the open gate ``gate_id``; the loop counts
        as quiet (and a requested compaction may run) meanwhile, and the
        waiting task's deadlines stop counting (``deadlines.paused``).  An
        answer given while the loop is paused is returned once it resumes."""
        ...


class DeltaSink(Protocol):
    def publish_delta(self, loop: str, effect_id: str, delta: Delta) -> None:
        """Show a live stream delta to subscribers (ephemeral, may be dropped)."""
        ...


class TurnPort(ToolsPort, Protocol):
    """What a turn touches beyond its tool batches: the request builder, the
    live stream and the flush timer."""

    @property
    def requests(self) -> RequestBuilder: ...

    @property
    def host(self) -> DeltaSink: ...

    def flush_at(self, deadline: float, flush: Callable[[], Awaitable[None]]) -> None:
        """Have ``flush`` run at ``deadline`` (trio time) unless cancelled first."""
        ...

    def cancel_flush(self) -> None: ...

    def session_tokens(self) -> int:
        """Tokens every loop of the session spent (its token budget's measure)."""

    @property
    def held_by_pause(self) -> bool:
        """The loop or one of its ancestors is paused: the turn's next step waits."""
        ...

    async def wait_unpaused(self) -> None:
        """Wait until neither the loop nor an ancestor is paused, counting as
        quiet meanwhile."""
        ...


class ChildLoop(Protocol):
    """A child loop as its parent (or the session) sees it."""

    @property
    def state(self) -> LoopState: ...

    async def send(self, command: Command) -> Any: ...

    @property
    def settled(self) -> bool: ...

    async def wait_settled(self) -> None: ...

    async def finish(self) -> None: ...


class ParentPort(LoopPort, Protocol):
    """What a delegation touches: the parent's count of working tasks and the
    session's children."""

    def busy(self, delta: int) -> None: ...

    async def wait_child(self, child: ChildLoop) -> None:
        """Wait for a foreground child to settle, counting as quiet meanwhile
        until it has."""
        ...

    def child(self, child_id: str) -> ChildLoop | None:
        """The running child loop ``child_id`` (None when it is not running here)."""
        ...

    async def start_child(
        self,
        child_id: str,
        definition: LoopDefinition,
        provenance: Provenance,
        *,
        mode: str | None = None,
    ) -> ChildLoop:
        """Create and start a child loop in the same session, in ``mode``
        (None: the definition's own configuration)."""
        ...

    def watch_background(self, child_id: str) -> None:
        """Deliver a background child's result to this loop once it settles."""
        ...

    def session_tokens(self) -> int:
        """Tokens every loop of the session spent (its token budget's measure)."""
        ...
