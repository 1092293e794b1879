"""The parent's side of the MCP test server (``tests/support/mcp_server.py``):
the definitions that reach it, the HTTP server process, and the FIFO through
which a hanging call says it is running."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from loopruntime.toolsets import McpServer
from tests.support.processes import ROOT

SERVER = "tests.support.mcp_server"


def stdio_server(calls: Path, *, changed: bool = False, **options: Any) -> McpServer:
    """The test server over stdio, named ``srv`` (tools ``srv__add`` ...);
    ``changed``: its next version (``echo``, ``ask``, ``hang`` gone, ``add``
    and ``launch`` with another schema)."""
    options.setdefault("name", "srv")
    args = ["-m", SERVER, "stdio", str(calls), *(["changed"] if changed else [])]
    return McpServer.stdio(sys.executable, args, cwd=str(ROOT), **options)


def calls_of(calls: Path) -> list[str]:
    """The tools that reached the server, in order."""
    import json

    if not calls.exists():
        return []
    return [json.loads(line)["tool"] for line in calls.read_text().splitlines() if line]


@asynccontextmanager
async def http_server(calls: Path) -> AsyncIterator[str]:
    """Run the test server over streamable HTTP on loopback; yields its URL."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", SERVER, "http", str(calls)], stdout=subprocess.PIPE, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        said = b""
        with trio.fail_after(120):  # a hung child must not hang CI; not a timing assertion
            while b"\n" not in said:
                chunk = await proc.stdout.receive_some()
                if not chunk:
                    break
                said += chunk
        line = said.decode().strip()
        assert line.startswith("PORT "), f"the MCP HTTP server did not start: {said!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        proc.kill()
        await proc.wait()


class Signal:
    """A FIFO a hanging server call writes its pid into; ``wait`` reads it."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        # A writer of our own, so the reader sees no end of file before the
        # server opens its end.
        self._keep = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        self._stream = trio.lowlevel.FdStream(read_fd)

    async def wait(self) -> int:
        """The pid of the server process once its call is running."""
        said = b""
        with trio.fail_after(120):  # a hung child must not hang CI; not a timing assertion
            while b"\n" not in said:
                said += await self._stream.receive_some()
        return int(said.split(b"\n", 1)[0])

    async def aclose(self) -> None:
        os.close(self._keep)
        await self._stream.aclose()
