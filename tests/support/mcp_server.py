"""A real MCP server, written with the official SDK, for the toolset tests.

``python -m tests.support.mcp_server stdio CALLS_FILE [changed]`` serves it over stdio;
``python -m tests.support.mcp_server http CALLS_FILE`` serves it over streamable
HTTP on a loopback port it binds first and prints (``PORT <n>``) before serving,
so the parent can connect at once.

``changed`` serves the next version of the server, as after its own deploy:
``echo``, ``ask`` and ``hang`` are gone, ``add`` takes a third number and
``launch`` a region.

``authorize`` asks the user to open the URL it is given (URL-mode
elicitation) and says which action came back; ``connect`` refuses its first
call of a service with the URL-elicitation-required error (-32042).

Every tool call appends one JSON line to CALLS_FILE (the tool and its
arguments) before it acts: the tests count what really reached the server.
``hang`` writes the server's pid into the FIFO it is given, then never
returns, so a test can SIGKILL the host or the server in the middle of a call
(``tests.support.mcp_servers`` has the parent's side).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp.types import ElicitRequestURLParams, ToolAnnotations
from pydantic import BaseModel

# The smallest valid PNG (one transparent pixel).
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class Approval(BaseModel):
    approve: bool
    note: str = ""


class Count(BaseModel):
    count: int


class Go(BaseModel):
    go: bool


class Name(BaseModel):
    name: str


ONE_FIELD: dict[str, type[BaseModel]] = {"count": Count, "go": Go, "name": Name}


def build(calls: Path, variant: str = "") -> MCPServer:
    server = MCPServer("testsrv")
    changed = variant == "changed"

    def note(tool: str, **arguments: object) -> None:
        with calls.open("a") as f:
            f.write(json.dumps({"tool": tool, "pid": os.getpid(), **arguments}) + "\n")

    if changed:

        @server.tool(name="add", annotations=ToolAnnotations(readOnlyHint=True))
        def add3(a: int, b: int, c: int) -> int:
            """Add three integers."""
            note("add", a=a, b=b, c=c)
            return a + b + c

    else:

        @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
        def add(a: int, b: int) -> int:
            """Add two integers."""
            note("add", a=a, b=b)
            return a + b

        @server.tool()
        def echo(text: str) -> str:
            """Say the text back."""
            note("echo", text=text)
            return text

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails with the reason."""
        note("fail", reason=reason)
        raise ToolError(reason)

    @server.tool()
    def picture() -> Image:
        """A one-pixel PNG."""
        note("picture")
        return Image(data=PIXEL, format="png")

    @server.tool()
    async def authorize(service: str, url: str, ctx: Context) -> str:
        """Ask the user to open ``url`` to authorize ``service`` (URL-mode elicitation)."""
        note("authorize", service=service, url=url, phase="asking")
        answer = await ctx.elicit_url(f"authorize {service}", url, f"auth-{service}")
        note("authorize", service=service, phase="answered", action=answer.action)
        return f"{service}: {answer.action}"

    connected: set[str] = set()

    @server.tool()
    def connect(service: str, url: str) -> str:
        """Use ``service``: the first call of each service refuses with the
        URL-elicitation-required error (-32042) naming ``url``; the next goes
        through, as if the person had finished there (never for ``locked``)."""
        note("connect", service=service, url=url)
        if service not in connected or service == "locked":
            connected.add(service)
            raise UrlElicitationRequiredError(
                [
                    ElicitRequestURLParams(
                        message=f"connect {service}", url=url, elicitation_id=f"conn-{service}"
                    )
                ]
            )
        return f"{service}: connected"

    async def launching(target: str, ctx: Context) -> str:
        note("launch", target=target, phase="asking")
        answer = await ctx.elicit(f"launch {target}?", Approval)
        note("launch", target=target, phase="answered", action=answer.action)
        if answer.action == "accept" and answer.data is not None and answer.data.approve:
            return f"launched {target} ({answer.data.note})"
        return f"not launched ({answer.action})"

    if changed:

        @server.tool(name="launch")
        async def launch_in(target: str, region: str, ctx: Context) -> str:
            """Launch in a region, once the user approves (asks through elicitation)."""
            return await launching(target, ctx)

        return server

    @server.tool()
    async def launch(target: str, ctx: Context) -> str:
        """Launch, once the user approves (asks through elicitation)."""
        return await launching(target, ctx)

    @server.tool()
    async def ask(kind: str, ctx: Context) -> str:
        """Ask a question of one field: ``count`` (integer), ``go`` (boolean) or ``name``."""
        note("ask", kind=kind)
        answer = await ctx.elicit(f"which {kind}?", ONE_FIELD[kind])
        if answer.action == "accept" and answer.data is not None:
            return f"{kind}={answer.data.model_dump()[kind]!r}"
        return f"no {kind} ({answer.action})"

    @server.tool()
    async def hang(signal: str) -> str:
        """Start a long job that never finishes (says its pid into the FIFO ``signal``)."""
        note("hang", signal=signal)
        await anyio.Path(signal).write_text(f"{os.getpid()}\n")
        await anyio.sleep_forever()
        return "never"

    return server


async def _serve_http(server: MCPServer) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    # Bound and listening before the port is announced: a client may connect at once.
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3) or argv[0] not in ("stdio", "http"):
        raise SystemExit(
            "usage: python -m tests.support.mcp_server {stdio,http} CALLS_FILE [changed]"
        )
    server = build(Path(argv[1]), *argv[2:])
    if argv[0] == "stdio":
        server.run("stdio")
    else:
        anyio.run(_serve_http, server)


if __name__ == "__main__":
    main(sys.argv[1:])
