"""Toolsets: tools a loop learns when it starts, from servers outside it.

A toolset is configuration in ``LoopDefinition(toolsets=[...])``; today the
one kind is an MCP server (``McpServer``).  ``Toolsets`` is what a running loop
holds: one connection per server, opened in the loop's nursery, and the tools
they listed.  Importing this package never imports the ``mcp`` SDK.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ..errors import NameClashError
from ..tools import Tool
from .connection import McpConnection
from .mcp import Http, McpServer, McpServerError, McpTool, McpToolError, Stdio

__all__ = [
    "Http",
    "McpServer",
    "McpServerError",
    "McpTool",
    "McpToolError",
    "Stdio",
    "Toolsets",
    "check_toolsets",
]


def check_toolsets(definition: str, toolsets: Sequence[object], taken: Sequence[str]) -> None:
    """Raise ``TypeError`` for a toolset that is not a server and
    ``NameClashError`` for two whose tool names would clash (the same prefix,
    or one prefix starting another), naming them; ``taken`` are the
    definition's other tool names (its registry's too), which no prefix may
    start."""
    if isinstance(toolsets, str | bytes) or not isinstance(toolsets, Sequence):
        raise TypeError(
            f"loop definition {definition!r}: toolsets must be a list of McpServer, "
            f"not {type(toolsets).__name__}"
        )
    servers: list[McpServer] = []
    for item in toolsets:
        if not isinstance(item, McpServer):
            raise TypeError(
                f"loop definition {definition!r}: toolset {item!r} is a "
                f"{type(item).__name__}, not an MCP server; build one with "
                "McpServer.stdio(...) or McpServer.http(...) (plain tools go in tools=[...])"
            )
        servers.append(item)
    for i, a in enumerate(servers):
        for b in servers[i + 1 :]:
            pa, pb = a.tool_prefix, b.tool_prefix
            if pa.startswith(pb) or pb.startswith(pa):
                raise NameClashError(
                    f"loop definition {definition!r}: MCP servers {a.name!r} and {b.name!r} "
                    f"would give clashing tool names (prefixes {pa!r} and {pb!r}); give one "
                    "of them another name or prefix=",
                    definition=definition,
                    name=pb,
                    server=b.name,
                )
    for server in servers:
        clash = sorted(n for n in taken if server.remote_name(n) is not None)
        if clash:
            raise NameClashError(
                f"loop definition {definition!r}: the tool names {clash} start with the "
                f"prefix {server.tool_prefix!r} of MCP server {server.name!r}; rename them "
                "or give the server another prefix=",
                definition=definition,
                name=clash[0],
                server=server.name,
            )


class Toolsets:
    """A running loop's connections to its definition's servers."""

    def __init__(self, servers: Sequence[McpServer] = ()) -> None:
        self.connections = [McpConnection(s) for s in servers]
        self.tools: tuple[Tool, ...] = ()
        self.answered: frozenset[str] = frozenset()
        """The names of the servers that answered the listing (the others
        could not be reached, and their tools are not known)."""

    async def open(
        self, nursery: trio.Nursery, taken: Sequence[str], *, definition: str = ""
    ) -> None:
        """Connect every server at once and list its tools; a server that
        cannot be reached is logged and offers none.  A listed tool whose
        name another tool of the loop (``taken``, or one listed before it)
        already has refuses the start: ``NameClashError`` naming the server,
        the name and ``definition``, since the model could not tell the two
        apart."""
        if not self.connections:
            return
        async with trio.open_nursery() as connecting:
            for connection in self.connections:
                connecting.start_soon(connection.open, nursery)
        names = dict.fromkeys(taken, "")
        tools: list[Tool] = []
        for connection in self.connections:
            server = connection.server.name
            for t in connection.tools:
                if t.name in names:
                    other = names[t.name]
                    clash = f"MCP server {other!r}" if other else "a tool of the loop"
                    if other == server:
                        clash = "another of its own tools"
                    raise NameClashError(
                        f"loop definition {definition!r}: MCP server {server!r} lists a tool "
                        f"named {t.name!r}, the name of {clash}; the model could not tell them "
                        "apart, so the server is refused: give it a prefix= that makes its "
                        "names unique",
                        definition=definition,
                        name=t.name,
                        server=server,
                    )
                names[t.name] = server
                tools.append(t)
        self.tools = tuple(tools)
        self.answered = frozenset(c.server.name for c in self.connections if c.listed)

    def close(self) -> None:
        for connection in self.connections:
            connection.close()
