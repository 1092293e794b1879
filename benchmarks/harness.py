"""What every section runs with: progress lines, quiet logs, file sizes, the benchmark agent.

Rules: progress goes to stderr, never stdout (stdout is the report); logging is configured
by the benchmark commands only, never on import; the agent's model and tool cost O(1) per
call, so every second measured belongs to the runtime.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

import structlog

from loopruntime import ModelRequest, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel
from session.replay.terminal import note

__all__ = [
    "Progress",
    "forgetful_model",
    "lookup",
    "quiet_logs",
    "sqlite_bytes",
    "stderr_progress",
]

Progress = Callable[[str], None]


def stderr_progress(line: str) -> None:
    note(f"  .. {line}")


def quiet_logs() -> None:
    """Send structlog output to stderr and drop everything below WARNING.

    For the benchmark commands only (a library never configures logging): structlog's
    default writes every debug line to stdout, which would interleave with the table
    and put terminal I/O inside the timed region.
    """
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def sqlite_bytes(path: str) -> int:
    """Database plus WAL on disk (the ``-shm`` index is a cache and is left out)."""
    total = 0
    for name in (path, path + "-wal"):
        if os.path.exists(name):
            total += os.path.getsize(name)
    return total


@tool(permission="allow")
async def lookup(ctx: ToolContext, *, query: str) -> str:
    """Return the query unchanged: the trivial tool every benchmark step calls."""
    return query


def forgetful_model(script: Callable[[ModelRequest], Reply]) -> ScriptedModel:
    """A ``ScriptedModel`` that does not keep the requests it was sent.

    ``ScriptedModel.requests`` keeps every request for tests to inspect; a real model
    keeps none.  Here that list would grow with every step of every loop and be counted
    as the runtime's memory (and its per-request history tuples as its cost).
    """

    def answer(request: ModelRequest) -> Reply:
        model.requests.clear()
        return script(request)

    model = ScriptedModel(answer)
    return model
