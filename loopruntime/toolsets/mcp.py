"""MCP servers as configuration, and the tools they list (extra ``mcp``).

Rules (the connection itself is ``connection.py``):

* ``McpServer`` is configuration, like the rest of a definition; the
  official ``mcp`` SDK is imported only when a loop connects, so loopruntime
  imports without it and a definition naming a server fails to connect with
  an error that names the extra.
* Each running loop holds its own connection to each of its servers
  (``McpConnection``), opened in the loop's nursery when the loop starts; its
  tools are listed then and become ``McpTool``s named ``prefix + tool``,
  their input schema passed through unchanged (the server validates).
* A call is an ordinary tool call to the batch: permission (``ask`` unless
  the server's configuration says otherwise), ``tool.started`` durable
  before the request is sent, deadlines, result caps.  Whatever goes wrong
  with the server (it cannot start, dies, answers garbage, says ``isError``)
  is an exception the batch shows the model as that call's failure, with a
  log line naming the server; the next call reconnects (bounded attempts,
  with backoff).
* A question the server asks during a call (elicitation) becomes a durable
  user-input gate of that call, answered like any ``ask_user``; a page it
  asks the person to open (URL mode) a URL gate, like ``ask_open_url``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from .. import deadlines
from ..model import ToolSchema
from ..tools import (
    FROM_LIMITS,
    PermissionPolicy,
    Tool,
    ToolContext,
    ToolOutput,
    _FromLimits,
)

__all__ = [
    "Caller",
    "Http",
    "McpServer",
    "McpServerError",
    "McpTool",
    "McpToolError",
    "Stdio",
    "mcp_tool",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class McpServerError(Exception):
    """The server could not be reached, died, or answered something that is
    not MCP; the call fails visibly to the model."""


class McpToolError(Exception):
    """The server ran the tool and it reported an error (``isError``)."""


@dataclass(frozen=True)
class Stdio:
    """A server started as a child process speaking MCP on its stdin/stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None


@dataclass(frozen=True)
class Http:
    """A server reached over streamable HTTP."""

    url: str
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class McpServer:
    """An MCP server whose tools a loop offers its model.

    Build one with ``McpServer.stdio(...)`` or ``McpServer.http(...)`` and
    give it to ``LoopDefinition(toolsets=[...])``.  Options:

    * ``name``: names the server in tool names, logs and errors;
    * ``prefix``: put before each tool's name (default ``name + "__"``);
    * ``permission``: the policy of its tools (default ``ask``); the
      definition's ``permissions`` still override it per tool;
    * ``replay_safe``: True, or the server's names of the tools that restore
      may run again after a crash; ``trust_annotations`` adds the tools the
      server itself marks ``readOnlyHint`` or ``idempotentHint``;
    * ``resumable``: a call waiting on the server's question when the
      process stopped is sent again after restore and the question answered
      with the stored answer; otherwise such a call is abandoned (unknown);
    * ``timeout``: seconds a call may run (default: ``Limits.tool_timeout``);
    * ``parallel``: its calls may run beside others of the same batch (each
      overlapping call on an MCP session of its own, so a question the server
      asks is routed to its call);
    * ``connect_attempts``: tries to connect, with backoff, before a call
      (or the listing when the loop starts) gives up;
    * ``deferred``: the model sees its tools by name only until it loads
      them (``load_tools``, ``loopruntime.deferred``): for servers with many.
    * ``connect_timeout``: seconds one attempt may take to start the server
      and hear its answer (and the listing may take); None: no limit.
    """

    name: str
    transport: Stdio | Http
    prefix: str | None = None
    permission: PermissionPolicy = "ask"
    replay_safe: bool | Collection[str] = False
    trust_annotations: bool = False
    resumable: bool = False
    timeout: float | _FromLimits | None = FROM_LIMITS
    parallel: bool = False
    connect_attempts: int = 3
    deferred: bool = False
    connect_timeout: float | None = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"MCP server name {self.name!r} must be letters, digits, '_' or '-' "
                "(it becomes part of the tool names the model sees)"
            )
        if self.prefix is not None and self.prefix and not _NAME.match(self.prefix):
            raise ValueError(
                f"MCP server {self.name}: prefix {self.prefix!r} must be letters, digits, "
                "'_' or '-'"
            )
        if not isinstance(self.transport, Stdio | Http):
            raise TypeError(
                f"MCP server {self.name}: transport must be Stdio or Http; build the server "
                "with McpServer.stdio(...) or McpServer.http(...)"
            )
        if isinstance(self.connect_attempts, bool) or not isinstance(self.connect_attempts, int):
            raise TypeError(f"MCP server {self.name}: connect_attempts must be an int")
        if self.connect_attempts < 1:
            raise ValueError(
                f"MCP server {self.name}: connect_attempts must be 1 or more, "
                f"not {self.connect_attempts}"
            )
        deadlines.check_timeout(f"MCP server {self.name}: connect_timeout", self.connect_timeout)
        if self.timeout is not FROM_LIMITS:
            deadlines.check_timeout(f"MCP server {self.name}: timeout", self.timeout)
        if isinstance(self.replay_safe, str):
            raise TypeError(
                f"MCP server {self.name}: replay_safe must be True/False or a collection of "
                f"tool names, not the string {self.replay_safe!r}"
            )

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        *,
        name: str | None = None,
        **options: Any,
    ) -> McpServer:
        """A server run as ``command args...`` (with ``env`` and ``cwd``),
        speaking MCP over its stdin and stdout.  ``name`` defaults to the
        command's file name."""
        if isinstance(args, str):
            raise TypeError(f"MCP server {command}: args must be a sequence of strings, not a str")
        transport = Stdio(command=command, args=tuple(args), env=env, cwd=cwd)
        default = re.sub(r"[^A-Za-z0-9_-]", "_", command.rsplit("/", 1)[-1].split(".")[0])
        return cls(name=name or default or "mcp", transport=transport, **options)

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        **options: Any,
    ) -> McpServer:
        """A server at ``url`` over streamable HTTP, sent ``headers`` with
        every request.  ``name`` defaults to the URL's host name."""
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server URL {url!r} must start with http:// or https://")
        host = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
        default = re.sub(r"[^A-Za-z0-9_-]", "_", host)
        return cls(
            name=name or default or "mcp", transport=Http(url=url, headers=headers), **options
        )

    @property
    def tool_prefix(self) -> str:
        return f"{self.name}__" if self.prefix is None else self.prefix

    def remote_name(self, name: str) -> str | None:
        """The server's own name of the tool the model knows as ``name``."""
        prefix = self.tool_prefix
        return name[len(prefix) :] if name.startswith(prefix) and len(name) > len(prefix) else None

    def is_replay_safe(self, remote: str, annotations: Any = None) -> bool:
        """Whether restore may run a cut call of ``remote`` again."""
        if self.replay_safe is True or (
            not isinstance(self.replay_safe, bool) and remote in self.replay_safe
        ):
            return True
        if self.trust_annotations and annotations is not None:
            return bool(
                getattr(annotations, "read_only_hint", False)
                or getattr(annotations, "idempotent_hint", False)
            )
        return False

    def placeholder(self, name: str) -> McpTool | None:
        """The tool ``name`` as far as configuration alone tells, for restore
        before any connection: replay-safe only by the definition's own
        opt-in (annotations are not known yet)."""
        remote = self.remote_name(name)
        if remote is None:
            return None
        return mcp_tool(self, None, remote, "", {"type": "object"}, None)


class Caller(Protocol):
    """What runs a call on a server: the loop's connection to it."""

    async def call(
        self, remote: str, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolOutput: ...


class _Arguments(msgspec.Struct):
    """A call's input as the model gave it: the server validates it."""

    arguments: dict[str, Any]


@dataclass(frozen=True, eq=False, kw_only=True)
class McpTool(Tool):
    """A tool a server listed, as the model and the batch see it."""

    server: McpServer
    remote: str
    """The tool's name on the server."""
    input_schema: dict[str, Any] = field(default_factory=dict)
    connection: Caller | None = None
    """None for the placeholder restore uses before any connection."""

    @property
    def schema(self) -> ToolSchema:
        return ToolSchema(
            name=self.name, description=self.description, input_schema=self.input_schema
        )

    def parse(self, raw: Mapping[str, Any]) -> msgspec.Struct:
        return _Arguments(arguments=dict(raw))

    async def invoke(self, ctx: ToolContext, parsed: msgspec.Struct) -> Any:
        assert isinstance(parsed, _Arguments)
        try:
            if self.connection is None:
                raise McpServerError(f"MCP server {self.server.name} is not connected in this loop")
            return await self.connection.call(self.remote, parsed.arguments, ctx)
        finally:
            ctx._close()


async def _not_called(ctx: ToolContext, parsed: msgspec.Struct) -> Any:
    raise AssertionError("an MCP tool is invoked through McpTool.invoke")


def mcp_tool(
    server: McpServer,
    connection: Caller | None,
    remote: str,
    description: str,
    input_schema: dict[str, Any],
    annotations: Any,
) -> McpTool:
    return McpTool(
        name=server.tool_prefix + remote,
        description=description or f"{remote} (from MCP server {server.name})",
        input_type=_Arguments,
        fn=_not_called,
        unpack=False,
        concurrency="parallel" if server.parallel else "exclusive",
        permission=server.permission,
        replay_safe=server.is_replay_safe(remote, annotations),
        resumable=server.resumable,
        timeout=server.timeout,
        deferred=server.deferred,
        server=server,
        remote=remote,
        input_schema=input_schema,
        connection=connection,
    )
