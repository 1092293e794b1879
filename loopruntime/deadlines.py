"""Deadlines: how long a tool call, a model call and a turn may take.

Rules (docs/boundaries.md tells the story for hosts):

* a deadline is a trio cancel scope (``Timer``) that a worker opens around
  the one thing it bounds; what the cancellation means (an unknown outcome,
  a retry, a failure) is the worker's to decide and to commit;
* time spent waiting on a person does not count: while the loop waits at a
  gate, every timer of the waiting task is paused (``paused``), so a tool
  that asks a question, or a turn waiting on an approval, keeps the time it
  had left;
* a timer is counted in the process that runs it: a call or a turn resumed
  after a restore starts its deadline afresh.

``check_timeout`` is the one rule for what a timeout may be, shared by
``Limits`` and ``@tool``.
"""

from __future__ import annotations

import contextvars
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

import trio

__all__ = [
    "Timer",
    "TimerError",
    "adopted",
    "check_timeout",
    "current",
    "paused",
    "retry_backoff",
    "timer",
]

_INITIAL_BACKOFF = 0.5
_MAX_BACKOFF = 8.0


def check_timeout(name: str, value: object) -> None:
    """Raise a ``TypeError``/``ValueError`` naming ``name`` unless ``value`` is
    None or a positive, finite number of seconds."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be a number of seconds or None (no deadline), "
            f"not {type(value).__name__} {value!r}"
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"{name} must be a positive, finite number of seconds, not {value!r}; "
            "use None for no deadline"
        )


def retry_backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1`` of a model call that
    passed a deadline before any output: 0.5 s doubling to at most 8 s,
    shortened by up to a quarter at random so that loops stalled together
    do not retry in step."""
    backoff = min(_INITIAL_BACKOFF * 2 ** (attempt - 1), _MAX_BACKOFF)
    return backoff * (1 - 0.25 * random.random())


class Timer:
    """A cancel scope whose deadline is ``seconds`` after it opens (never,
    with None), and that stops counting while paused.  ``passed`` tells,
    after the scope closed, whether the deadline cut what it wrapped.

    A timer of no deadline has no cancel scope (``scope`` is None): nothing
    can cut its block, and a scope would cost a trio deadline registration
    on the way in and out of every tool call and turn, most of which have no
    deadline.  It cannot be ``reset`` to one (``TimerError``), has nothing
    to pause, and is not among the task's timers (``current``); its
    ``opened`` is 0.0 (it reads no clock)."""

    __slots__ = ("_left", "_paused", "_paused_at", "_paused_for", "opened", "scope", "seconds")

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        if seconds is None:
            self.opened = 0.0
            self.scope: trio.CancelScope | None = None
        else:
            self.opened = trio.current_time()
            self.scope = trio.CancelScope(deadline=self.opened + seconds)
        self._paused = 0
        self._left = math.inf
        self._paused_at = 0.0
        self._paused_for = 0.0

    def reset(self, seconds: float | None) -> None:
        """Make the deadline ``seconds`` of counted time after the timer
        opened (None: no deadline); a paused timer keeps counting nothing."""
        scope = self.scope
        if scope is None:
            if seconds is not None:
                raise TimerError(
                    f"a timer opened with no deadline cannot be given one ({seconds:g} s): "
                    "it has no cancel scope to cut its block; open it with its first "
                    "deadline instead"
                )
            return
        self.seconds = seconds
        # One clock read for both: every model call resets its timer at its first piece.
        now = self._paused_at if self._paused else trio.current_time()
        if seconds is None:
            self._left = math.inf
        else:
            self._left = max(0.0, self.opened + self._paused_for + seconds - now)
        if not self._paused:
            scope.deadline = now + self._left

    @property
    def passed(self) -> bool:
        return self.scope is not None and self.scope.cancelled_caught

    @property
    def cancel_called(self) -> bool:
        """The deadline (or an explicit cancel of its scope) has cut the block."""
        return self.scope is not None and self.scope.cancel_called

    def pause(self) -> None:
        """Stop counting (nested pauses count: the last ``resume`` restarts it)."""
        if self._paused == 0 and self.scope is not None:
            self._paused_at = trio.current_time()
            self._left = max(0.0, self.scope.deadline - self._paused_at)
            self.scope.deadline = math.inf
        self._paused += 1

    def resume(self) -> None:
        self._paused -= 1
        if self._paused == 0 and self.scope is not None:
            now = trio.current_time()
            self._paused_for += now - self._paused_at
            self.scope.deadline = now + self._left

    @contextmanager
    def paused(self) -> Iterator[None]:
        """This timer does not count while the block runs."""
        self.pause()
        try:
            yield
        finally:
            self.resume()


class TimerError(RuntimeError):
    """A timer was used against its rules (a programming error in a worker)."""


_running: contextvars.ContextVar[tuple[Timer, ...]] = contextvars.ContextVar(
    "loopruntime_deadlines", default=()
)
"""The timers of the running task (a child task inherits its parent's)."""


class timer:  # lower case, as contextlib.suppress: it reads as a function
    """Run the block under a ``Timer`` of ``seconds`` (None: no deadline).
    The deadline cancels the block only; the caller reads ``passed``.

    A class rather than a ``@contextmanager`` generator: a turn opens two of
    these per step, and the generator's frames and wrapper cost more than
    the timer itself.  A timer of no deadline (a turn's and a tool call's by
    default) is not registered as the task's: pausing it would do nothing."""

    __slots__ = ("_timer", "_token")

    def __init__(self, seconds: float | None) -> None:
        self._timer = Timer(seconds)

    def __enter__(self) -> Timer:
        t = self._timer
        if t.scope is not None:
            self._token = _running.set((*_running.get(), t))
            try:
                t.scope.__enter__()
            except BaseException:
                _running.reset(self._token)
                raise
        return t

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        scope = self._timer.scope
        if scope is None:
            return False
        try:
            return scope.__exit__(exc_type, exc, tb)
        finally:
            _running.reset(self._token)


@contextmanager
def paused() -> Iterator[None]:
    """Every timer of the running task stops counting while the block runs
    (the loop waits on a person)."""
    timers = _running.get()
    for t in timers:
        t.pause()
    try:
        yield
    finally:
        for t in timers:
            t.resume()


def current() -> tuple[Timer, ...]:
    """The timers of the running task, for work it hands to another task."""
    return _running.get()


@contextmanager
def adopted(timers: tuple[Timer, ...]) -> Iterator[None]:
    """The block counts as part of the task that owns ``timers``: a wait on a
    person inside it pauses them.  For work another task does on a call's
    behalf (an MCP server's question arrives on the connection's task)."""
    token = _running.set(timers)
    try:
        yield
    finally:
        _running.reset(token)
