"""Whether this process still owns the session a loop runs in: the narrow port
a host provides, and ``check_owner``, which ``ToolContext.check_owner`` calls.

Rules: a host sets its port around everything a session does (``owning``);
trio tasks inherit the context of the task that starts them, so every task of
that session's loops sees it.  The check is local and cheap (no I/O): the
port compares its own deadline and lease, nothing else.  Outside a host no
port is set and the check passes: a session run directly holds its lease
until it closes, and the journal fences any writer that lost it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

__all__ = ["OwnerCheck", "check_owner", "owning"]


class OwnerCheck(Protocol):
    """What a host offers the tools of a session it runs."""

    def check_owner(self) -> None:
        """Raise ``LeaseLostError`` when this host may no longer act for the
        session; return at once otherwise.  No I/O, never blocks."""
        ...


_current: ContextVar[OwnerCheck | None] = ContextVar("loopruntime_owner", default=None)


@contextmanager
def owning(port: OwnerCheck) -> Iterator[None]:
    """Make ``port`` the owner check of every task started within the block."""
    token = _current.set(port)
    try:
        yield
    finally:
        _current.reset(token)


def check_owner() -> None:
    """``LeaseLostError`` when the host running this task lost its session;
    nothing outside a host."""
    port = _current.get()
    if port is not None:
        port.check_owner()
