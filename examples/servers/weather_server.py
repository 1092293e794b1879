"""A small MCP server for examples/tools_and_outputs.py, written with the SDK.

Run by the example itself (over stdio); it is not an example of its own.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("weather", log_level="WARNING")

READINGS = {"oslo": 4, "rome": 19, "lima": 17}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def temperature(city: str) -> int:
    """Today's temperature in a city, in degrees Celsius."""
    return READINGS.get(city.lower(), 12)


if __name__ == "__main__":
    server.run("stdio")
