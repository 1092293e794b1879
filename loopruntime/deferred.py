"""Deferred tools: tools the model sees by name until it loads them.

Rules:

* A tool is deferred when ``@tool(deferred=True)``, when the definition names
  it in ``deferred_tools``, or when it comes from an ``McpServer(deferred=True)``.
* While a loop offers a deferred tool it has not loaded, its requests carry
  the built-in ``LOAD_TOOLS`` tool, whose description lists every deferred
  tool by name with the first line of its description; the deferred tools'
  own schemas stay out of the request.
* ``load_tools`` commits ``tools.loaded`` naming the tools; the fold keeps
  the union of every load (``LoopState.loaded``), so restore, checkpoints
  and compaction keep it.  A loaded tool is advertised from the next model
  call on.
* A call to a deferred tool not loaded yet is refused with a model-visible
  error naming ``load_tools``; nothing runs.

The listing in ``load_tools``'s description does not change as tools load:
the request's tool block stays the same from call to call, which keeps a
provider's prompt cache warm.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import Any

from journal.events import ToolsLoaded

from .errors import LoopClosedError
from .model import ToolSchema
from .tools import Tool, ToolContext, tool

__all__ = [
    "LOAD_TOOLS",
    "advertised",
    "load_tools_tool",
    "not_loaded",
    "summary_line",
]

LOAD_TOOLS = "load_tools"
"""The name of the built-in tool that loads deferred tools."""


def summary_line(description: str, limit: int = 160) -> str:
    """The first non-empty line of ``description``, at most ``limit`` characters."""
    line = next((ln.strip() for ln in description.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def load_tools_tool(deferred: Sequence[Tool]) -> Tool:
    """The ``load_tools`` tool for this set of deferred tools (built once per set)."""
    listing = tuple((t.name, summary_line(t.description)) for t in deferred)
    return _build(listing)


LOADERS_KEPT = 128
"""Distinct sets of deferred tools whose ``load_tools`` tool stays built (the
least recently used beyond that is built again when next needed)."""


@functools.lru_cache(maxsize=LOADERS_KEPT)
def _build(listing: tuple[tuple[str, str], ...]) -> Tool:
    known = {name for name, _ in listing}
    lines = "\n".join(f"- {name}: {line}" if line else f"- {name}" for name, line in listing)

    async def load_tools(ctx: ToolContext, *, names: list[str]) -> str:
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise ValueError(
                f"no deferred tool named {', '.join(map(repr, unknown))}; "
                f"the tools you can load are: {', '.join(sorted(known))}"
                if unknown
                else "give the names of the tools to load"
            )
        # The loop (a ``ports.LoopPort``; not imported: ports imports the
        # definition, which imports this module).
        port: Any = ctx.runtime
        if port is None:
            raise LoopClosedError("load_tools needs a running loop")
        # Named once each, in the order asked, without the ones loaded before.
        fresh = tuple(dict.fromkeys(n for n in names if n not in port.state.loaded))
        if fresh:
            await port.commit([ToolsLoaded(tools=fresh)], cause=ctx.execution_id)
        return f"loaded: {', '.join(dict.fromkeys(names))}; you can call them from now on"

    return tool(
        name=LOAD_TOOLS,
        description=(
            "Load tools by name before calling them; only their names are shown until "
            "they are loaded. Tools you can load:\n" + lines
        ),
        permission="allow",
        # Loading twice loads the same tools: restore may run it again.
        replay_safe=True,
        timeout=None,
    )(load_tools)


def advertised(
    tools: Sequence[Tool], deferred: Collection[str], loaded: Collection[str]
) -> list[ToolSchema]:
    """The schemas a model request carries: every tool but those in
    ``deferred`` and not in ``loaded``."""
    if not deferred:
        return [t.schema for t in tools]
    return [t.schema for t in tools if t.name not in deferred or t.name in loaded]


def not_loaded(name: str) -> str:
    """The model-visible error of a call to a deferred tool not loaded yet."""
    return (
        f"[error: tool {name} is deferred and not loaded: call {LOAD_TOOLS} with "
        f'{{"names": ["{name}"]}} first, then call {name}]'
    )
