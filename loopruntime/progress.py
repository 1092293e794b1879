"""Tool progress: what a running call says of its own advance, as ``tool.progress``.

Rules:

* ``ToolContext.progress(message, fraction=None)`` returns at once: the tool
  never waits for the record.  Its arguments are checked first (a named
  error, nothing recorded); a context whose call has ended refuses it
  (``OutsideToolCallError``).
* One call records at most ``Limits.max_progress_per_second`` reports a
  second.  A report is recorded at once when the interval since the call's
  last record has passed; one that comes sooner waits, and a newer one
  replaces it (``coalesced`` counts the reports it replaced).  The one
  waiting is recorded when the interval is over, or when the call ends, just
  before its ``tool.completed``: the newest report is always kept.  A call
  cut short (interrupted, cancelled with its loop) drops a report still
  waiting.
* The records are pipelined (``session/embedded/durability.py``): a crash may
  lose the newest of them, never one a subscriber saw.  The fold ignores
  them; they are words for people (replay, console, traces), never for the
  model.

The records are written by a short-lived task of their own (a trio system
task, started by the first report that finds none running, ending once no
report waits), so a tool that never reports costs nothing, and one that
reports from a tight loop is never held up by the journal.
"""

from __future__ import annotations

import contextvars
import logging
import math

import structlog
import trio

from journal.events import ToolProgress

from .errors import ProgressTooLargeError
from .ports import LoopPort

__all__ = ["Progress"]

log = structlog.wrap_logger(logging.getLogger(__name__))


class Progress:
    """The reports of one tool call, through all its runs (a replay-safe call
    run again after its deadline keeps its interval)."""

    __slots__ = (
        "_done",
        "_pending",
        "_scope",
        "cause",
        "execution_id",
        "interval",
        "limit",
        "loop",
        "tool_name",
        "tool_use_id",
    )

    def __init__(
        self,
        loop: LoopPort,
        *,
        execution_id: str,
        tool_use_id: str,
        tool_name: str,
        per_second: int,
        limit: int,
        cause: str | None,
    ) -> None:
        self.loop = loop
        self.execution_id = execution_id
        self.tool_use_id = tool_use_id
        self.tool_name = tool_name
        self.interval = 1 / per_second
        self.limit = limit
        """``Limits.max_progress_bytes``."""
        self.cause = cause
        self._pending: ToolProgress | None = None
        self._scope: trio.CancelScope | None = None
        """The writer task's scope while it runs."""
        self._done: trio.Event | None = None

    def report(self, message: str, fraction: float | None) -> None:
        """Record ``message`` soon (see the module's rules); never waits."""
        self._check(message, fraction)
        waiting = self._pending
        self._pending = ToolProgress(
            execution_id=self.execution_id,
            tool_use_id=self.tool_use_id,
            message=message,
            fraction=None if fraction is None else float(fraction),
            coalesced=0 if waiting is None else waiting.coalesced + 1,
        )
        if self._scope is None:
            self._scope, self._done = trio.CancelScope(), trio.Event()
            # The tool's context: the commit runs as from the call itself.
            trio.lowlevel.spawn_system_task(
                self._write,
                name=f"progress {self.execution_id}",
                context=contextvars.copy_context(),
            )

    def _check(self, message: object, fraction: object) -> None:
        if not isinstance(message, str):
            raise TypeError(
                f"progress of tool call {self.execution_id} ({self.tool_name}): the message "
                f"must be text, not {type(message).__name__}"
            )
        size = len(message.encode("utf-8", "surrogatepass"))
        if size > self.limit:
            raise ProgressTooLargeError(
                execution_id=self.execution_id, tool=self.tool_name, size=size, limit=self.limit
            )
        if fraction is None:
            return
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise TypeError(
                f"progress of tool call {self.execution_id} ({self.tool_name}): fraction must "
                f"be a number from 0 to 1 or None, not {type(fraction).__name__}"
            )
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            raise ValueError(
                f"progress of tool call {self.execution_id} ({self.tool_name}): fraction must "
                f"be from 0 to 1 (how much of the work is done), not {fraction!r}"
            )

    async def _write(self) -> None:
        """Record the waiting report, then let the interval pass; again while
        one waits."""
        assert self._scope is not None and self._done is not None
        scope, done = self._scope, self._done
        try:
            with scope:
                while self._pending is not None:
                    event, self._pending = self._pending, None
                    # Shielded: a commit asked for runs to its end, so ``end``
                    # never records a report twice nor loses one half-written.
                    with trio.CancelScope(shield=True):
                        await self.loop.commit([event], cause=self.cause)
                    await trio.sleep(self.interval)
        except Exception as exc:
            # A system task's error would end the whole run: the loop's own
            # commits meet the same failure and report it where it belongs.
            log.warning("tool_progress_not_recorded", execution=self.execution_id, error=repr(exc))
        finally:
            self._scope = None
            done.set()

    async def end(self) -> None:
        """The call ended: its waiting report is recorded now (before its
        result), and the writer stops."""
        scope, done = self._scope, self._done
        if scope is not None and done is not None:
            scope.cancel()
            await done.wait()
        event, self._pending = self._pending, None
        if event is not None:
            await self.loop.commit([event], cause=self.cause)

    def drop(self) -> None:
        """The call was cut short: a waiting report is dropped, the writer stops."""
        self._pending = None
        if self._scope is not None:
            self._scope.cancel()
