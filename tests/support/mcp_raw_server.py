"""A broken MCP server over stdio, written by hand (no SDK): what a server that
answers garbage, malformed results or nothing at all looks like to the client.

``python -m tests.support.mcp_raw_server MODE CALLS_FILE``:

* ``serve``: answers ``initialize`` and ``tools/list`` properly; its tools
  break the call: ``garbage`` answers with a line that is not JSON,
  ``malformed`` with a result that is not a tool result, ``silent`` never
  answers, ``ok`` answers properly (the next call after a broken one);
* ``mute``: never answers ``initialize`` (a server that hangs at start);
* ``twice``: like ``serve``, but lists its tool ``ok`` twice (a listing
  whose names clash).

Each tool call appends its tool's name to CALLS_FILE, as the SDK test server
does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TOOLS = ["garbage", "malformed", "silent", "ok"]


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _result(request: dict[str, Any], result: dict[str, Any]) -> None:
    _send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def main(argv: list[str]) -> None:
    mode, calls = argv[0], Path(argv[1])
    for line in sys.stdin:
        request = json.loads(line)
        method = request.get("method")
        if "id" not in request:
            continue  # a notification (initialized, cancelled)
        if method == "initialize":
            if mode == "mute":
                continue
            _result(
                request,
                {
                    "protocolVersion": request["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "raw", "version": "0"},
                },
            )
        elif method == "tools/list":
            _result(
                request,
                {
                    "tools": [
                        {
                            "name": name,
                            "description": f"breaks the call: {name}",
                            "inputSchema": {"type": "object", "properties": {}},
                        }
                        for name in ([*TOOLS, "ok"] if mode == "twice" else TOOLS)
                    ]
                },
            )
        elif method == "tools/call":
            name = request["params"]["name"]
            with calls.open("a") as f:
                f.write(json.dumps({"tool": name}) + "\n")
            if name == "garbage":
                sys.stdout.write("this is not JSON-RPC\n")
                sys.stdout.flush()
            elif name == "malformed":
                _result(request, {"content": "not a list of blocks", "isError": "maybe"})
            elif name == "ok":
                _result(request, {"content": [{"type": "text", "text": "fine"}]})
            # silent: never answers
        else:
            _send(
                {
                    "jsonrpc": "2.0",
                    "id": request["id"],
                    "error": {"code": -32601, "message": f"no method {method}"},
                }
            )


if __name__ == "__main__":
    main(sys.argv[1:])
