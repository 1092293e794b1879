"""One loop's connection to one MCP server: connecting, listing, calling.

Rules: each SDK session is entered and left by one task of the loop's
nursery (``_hold``), and calls come from the batch's tasks; a session
carries one call at a time, so a question the server asks (elicitation) is
asked as a gate of that session's call, with its deadlines paused: a form
as a question, a page to open (URL mode, or the pages a -32042 refusal
lists) as a URL gate.  A
session that broke is dropped, and the next call connects again (bounded
attempts, with backoff).  The ``mcp``
SDK is imported inside functions only: without it, connecting fails with an
error naming the extra.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import structlog
import trio

from journal.content import Image, ResultBlock, Text

from .. import deadlines
from ..results import ToolOutput
from ..tools import ToolContext, check_url
from .mcp import McpServer, McpServerError, McpTool, McpToolError, Stdio, mcp_tool

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.client.session import ClientRequestContext
    from mcp.types import ElicitRequestParams, ElicitRequestURLParams, ElicitResult, ErrorData

__all__ = ["McpConnection"]

log = structlog.wrap_logger(logging.getLogger(__name__))

_CONNECT_BACKOFF = 0.5
"""Seconds before the second connection attempt, doubling after each."""


class _Link:
    """One MCP session with the server, and the one call it carries at a time:
    a question that comes over it belongs to that call."""

    def __init__(self) -> None:
        self.session: ClientSession | None = None
        self.drop = trio.Event()
        self.call: tuple[ToolContext, tuple[deadlines.Timer, ...]] | None = None
        """The call in flight, with its timers (None: idle)."""
        self.broken: str | None = None
        """Why the session was dropped, when the server broke the protocol."""

    @property
    def live(self) -> bool:
        return self.session is not None and not self.drop.is_set()


class McpConnection:
    """One loop's connection to one server: its listed tools, and the calls.

    Each MCP session lives in a task of the loop's nursery (the SDK's session
    must be entered and left by one task); calls come from the batch's tasks.
    A session carries one call at a time, so a question the server asks is
    that call's: calls of a ``parallel`` server that run at once each get a
    session of their own (kept for the next calls).  A session that failed is
    dropped and made again by the next call."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.tools: tuple[McpTool, ...] = ()
        self.listed = False
        """The server answered the listing when the loop started."""
        self.log = log.bind(mcp_server=server.name)
        self._nursery: trio.Nursery | None = None
        self._links: list[_Link] = []
        self._connecting = trio.Lock()

    async def open(self, nursery: trio.Nursery) -> None:
        """Connect and list the tools; a server that cannot be reached is
        logged and offers no tools (the loop runs without them)."""
        self._nursery = nursery
        try:
            async with self._connecting:
                link = await self._connect()
            assert link.session is not None
            with trio.move_on_after(_seconds(self.server.connect_timeout)) as waited:
                listed = await _list_tools(link.session)
            if waited.cancelled_caught:
                self._drop(link)
                raise McpServerError(
                    f"listing its tools took longer than {self.server.connect_timeout}s"
                )
        except McpServerError as exc:
            self.log.warning("mcp_server_unavailable", error=str(exc))
            self.close()
            return
        self.tools = tuple(
            mcp_tool(
                self.server,
                self,
                t.name,
                t.description or "",
                dict(t.input_schema),
                t.annotations,
            )
            for t in listed
        )
        self.listed = True
        self.log.info("mcp_server_listed", tools=[t.name for t in self.tools])

    def close(self) -> None:
        for link in self._links:
            link.drop.set()
        self._links.clear()

    async def call(self, remote: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run tool ``remote`` on the server; raises ``McpServerError`` (the
        server failed) or ``McpToolError`` (the tool reported an error, or
        the person declined a page the server needs opened first)."""
        timers = deadlines.current()
        link = await self._take((ctx, timers))
        try:
            try:
                result = await self._send(link, remote, arguments)
            except _PagesRequired as required:
                # The server ran nothing: it asks for pages to be opened first
                # (-32042).  Once the person confirmed them, it is asked again, once.
                await self._open_pages(ctx, timers, remote, required.pages)
                if not link.live:
                    link.call = None
                    link = await self._take((ctx, timers))
                try:
                    result = await self._send(link, remote, arguments)
                except _PagesRequired as again:
                    self.log.warning("mcp_pages_still_required", tool=remote)
                    raise McpToolError(
                        f"MCP server {self.server.name} still asks for pages to be opened "
                        f"before {remote} runs ({again}), after the person confirmed them"
                    ) from again
        finally:
            link.call = None
        return _result(self.server, remote, result)

    async def _send(self, link: _Link, remote: str, arguments: dict[str, Any]) -> Any:
        """One ``tools/call`` over ``link``: its result, ``_PagesRequired``, or
        ``McpServerError`` (logged, naming the server)."""
        timers = link.call[1] if link.call is not None else ()
        try:
            assert link.session is not None
            return await link.session.call_tool(remote, arguments)
        except trio.Cancelled:
            if any(t.cancel_called for t in timers):
                # The batch commits what the deadline means; the log names
                # the server that did not answer in time.
                self.log.warning("mcp_call_timed_out", tool=remote)
            raise
        except Exception as exc:
            pages = _pages_required(exc)
            if pages:
                raise _PagesRequired(str(exc), pages) from exc
            # A JSON-RPC error is the server's answer; anything else means the
            # connection broke (or the server sent something that is not MCP):
            # drop it, and the next call connects again.
            if not _is_rpc_error(exc):
                self._drop(link)
            error = link.broken or _invalid(exc) or _describe(exc)
            self.log.warning("mcp_call_failed", tool=remote, error=error)
            raise McpServerError(
                f"MCP server {self.server.name} failed during the call of {remote}: {error}"
            ) from exc

    async def _open_pages(
        self,
        ctx: ToolContext,
        timers: tuple[deadlines.Timer, ...],
        remote: str,
        pages: list[ElicitRequestURLParams],
    ) -> None:
        """Ask the person to open each page the server needs opened before
        ``remote`` runs; ``McpToolError`` when one is not accepted."""
        for page in pages:
            answered = await self._open_url(ctx, timers, page)
            if answered.action != "accept":
                raise McpToolError(
                    f"MCP server {self.server.name} needs {page.url!r} opened before {remote} "
                    f"runs, and the page was not accepted ({answered.action}); the call was "
                    "not run"
                )

    # -- the connection ------------------------------------------------------------

    async def _take(self, call: tuple[ToolContext, tuple[deadlines.Timer, ...]]) -> _Link:
        """An idle live session for ``call`` (marked busy with it), connecting
        a new one when there is none."""
        async with self._connecting:
            link = next((k for k in self._links if k.live and k.call is None), None)
            if link is None:
                link = await self._connect()
            link.call = call
            return link

    async def _connect(self) -> _Link:
        """A new session (under ``_connecting``): bounded attempts, with backoff."""
        last: BaseException | None = None
        for attempt in range(1, self.server.connect_attempts + 1):
            if attempt > 1:
                await trio.sleep(_CONNECT_BACKOFF * 2 ** (attempt - 2))
            link = _Link()
            self.log.debug("mcp_connecting", attempt=attempt)
            try:
                assert self._nursery is not None, "McpConnection.open was never called"
                with trio.move_on_after(_seconds(self.server.connect_timeout)) as waited:
                    link.session = await self._nursery.start(self._hold, link)
                if waited.cancelled_caught:
                    raise McpServerError(
                        f"it did not answer within {self.server.connect_timeout}s of starting"
                    )
            except McpServerError as exc:
                last = exc
                self.log.warning("mcp_connect_failed", attempt=attempt, error=str(exc))
                continue
            self._links.append(link)
            return link
        assert last is not None
        raise McpServerError(
            f"MCP server {self.server.name} could not be reached in "
            f"{self.server.connect_attempts} attempt(s): {last}"
        )

    def _drop(self, link: _Link) -> None:
        link.drop.set()
        link.session = None
        if link in self._links:
            self._links.remove(link)

    async def _hold(self, link: _Link, *, task_status: trio.TaskStatus[ClientSession]) -> None:
        """Open the transport and the session, hand the session over, and
        hold both open until the link is dropped (or the loop stops)."""
        started = False
        try:
            from mcp import ClientSession
        except ImportError as exc:
            raise McpServerError(
                "MCP toolsets need the mcp package: install loopruntime[mcp]"
            ) from exc

        async def elicit(
            context: ClientRequestContext, params: ElicitRequestParams
        ) -> ElicitResult | ErrorData:
            return await self._elicit(link, params)

        async def received(message: Any) -> None:
            # A transport fault: over stdio, a line that is not an MCP message.
            # The stream can no longer be trusted to carry the call's answer:
            # the session is dropped, which fails the call in flight.
            if isinstance(message, Exception):
                link.broken = f"it sent something that is not an MCP message ({_describe(message)})"
                self.log.warning("mcp_malformed_message", error=_describe(message))
                self._drop(link)

        try:
            async with (
                self._transport() as streams,
                ClientSession(
                    streams[0], streams[1], elicitation_callback=elicit, message_handler=received
                ) as session,
            ):
                await session.initialize()
                started = True
                task_status.started(session)
                await link.drop.wait()
        except Exception as exc:
            if not started:
                raise McpServerError(_describe(exc)) from exc
            # The connection died after it was handed over: the call that
            # used it has already failed; the next one connects again.
            self.log.warning("mcp_connection_lost", error=_describe(exc))
        finally:
            self._drop(link)

    def _transport(self) -> Any:
        transport = self.server.transport
        if isinstance(transport, Stdio):
            from mcp.client.stdio import StdioServerParameters, stdio_client

            return stdio_client(
                StdioServerParameters(
                    command=transport.command,
                    args=list(transport.args),
                    env=dict(transport.env) if transport.env is not None else None,
                    cwd=transport.cwd,
                )
            )
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=dict(transport.headers or {}))
        return _http(streamable_http_client(transport.url, http_client=client), client)

    async def _elicit(self, link: _Link, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        """A question from the server: asked as a gate of the call its
        session carries."""
        from mcp.types import INVALID_REQUEST, ElicitRequestURLParams, ElicitResult, ErrorData

        if link.call is None:
            self.log.warning("mcp_elicitation_without_call")
            return ErrorData(
                code=INVALID_REQUEST, message="no tool call is running to ask this question for"
            )
        ctx, timers = link.call
        if isinstance(params, ElicitRequestURLParams):
            return await self._open_url(ctx, timers, params)
        schema = getattr(params, "requested_schema", {}) or {}
        prompt = (
            f"{params.message}\n[MCP server {self.server.name} asks; answer with a JSON object "
            f"of the fields {json.dumps(schema.get('properties', {}), sort_keys=True)}, "
            "or 'decline' or 'cancel']"
        )
        with deadlines.adopted(timers):
            answer = (await ctx.ask_user(prompt)).strip()
        if answer in ("decline", "cancel"):
            return ElicitResult(action="decline" if answer == "decline" else "cancel")
        content = _content(schema, answer)
        if content is None:
            self.log.warning("mcp_elicitation_answer_unusable", answer=answer[:200])
            return ElicitResult(action="cancel")
        return ElicitResult(action="accept", content=content)

    async def _open_url(
        self,
        ctx: ToolContext,
        timers: tuple[deadlines.Timer, ...],
        params: ElicitRequestURLParams,
    ) -> ElicitResult:
        """A page the server asks the person to open (URL-mode elicitation):
        a URL gate of the call, its confirmation the server's ``accept``.  An
        address a person should not be sent to (not absolute http(s)) is
        declined without a gate: the server gets no link shown for it."""
        from mcp.types import ElicitResult

        url = params.url
        try:
            check_url(url)
        except (TypeError, ValueError):
            self.log.warning("mcp_elicitation_url_refused", tool=ctx.tool_name, url=repr(url)[:200])
            return ElicitResult(action="decline")
        prompt = (
            f"{params.message}\n[MCP server {self.server.name} asks you to open this address; "
            "confirm once done, or answer 'decline' or 'cancel']"
        )
        with deadlines.adopted(timers):
            answer = (await ctx.ask_open_url(prompt, url)).strip().lower()
        return ElicitResult(action=_PAGE_ANSWERS.get(answer, "accept"))


_PAGE_ANSWERS: dict[str, Literal["decline", "cancel"]] = {
    "decline": "decline",
    "no": "decline",
    "cancel": "cancel",
}
"""The answers to a page to open that refuse it (lowercased); any other confirms."""


class _PagesRequired(Exception):
    """The server refused a call until pages are opened (-32042)."""

    def __init__(self, message: str, pages: list[ElicitRequestURLParams]) -> None:
        super().__init__(message)
        self.pages = pages


def _pages_required(exc: BaseException) -> list[ElicitRequestURLParams] | None:
    """The pages a URL-elicitation-required error (-32042) lists; None for
    any other error, or one whose list cannot be read."""
    from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
    from mcp.types import URL_ELICITATION_REQUIRED

    if not isinstance(exc, MCPError) or exc.error.code != URL_ELICITATION_REQUIRED:
        return None
    try:
        return UrlElicitationRequiredError.from_error(exc.error).elicitations or None
    except (ValueError, TypeError):
        return None


class _http:
    """The streamable-HTTP transport with its HTTP client closed after it."""

    def __init__(self, inner: Any, client: Any) -> None:
        self._inner, self._client = inner, client

    async def __aenter__(self) -> Any:
        await self._client.__aenter__()
        try:
            return await self._inner.__aenter__()
        except BaseException:
            await self._client.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            await self._client.__aexit__(None, None, None)


def _invalid(exc: BaseException) -> str | None:
    """What was wrong with an answer the SDK could not read as the result it
    asked for (a pydantic validation error), field by field; None otherwise."""
    errors = getattr(exc, "errors", None)
    if type(exc).__name__ != "ValidationError" or not callable(errors):
        return None
    fields = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ())) or 'result'}: {e.get('msg', '')}"
        for e in errors()
    )
    return f"its answer is not a valid MCP result ({fields})"


def _seconds(timeout: float | None) -> float:
    return math.inf if timeout is None else timeout


def _content(schema: Mapping[str, Any], answer: str) -> dict[str, Any] | None:
    """The fields a person's answer gives: a JSON object as it is, else the
    answer as the value of a question's one field (``42``, ``yes``, ``"a b"``
    and ``a b`` alike); None when it gives neither."""
    try:
        parsed = json.loads(answer)
    except ValueError:
        return _single_field(schema, answer)
    if isinstance(parsed, dict):
        return parsed
    # Valid JSON but not an object: a plain answer that happens to parse
    # (``true``, ``42``, a quoted string) is still the one field's value.
    return _single_field(schema, parsed if isinstance(parsed, str) else answer)


def _single_field(schema: Mapping[str, Any], answer: str) -> dict[str, Any] | None:
    """A plain answer to a question with one field: that field's value."""
    props = schema.get("properties", {})
    if len(props) != 1:
        return None
    ((key, spec),) = props.items()
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind == "boolean":
        lowered = answer.lower()
        if lowered in ("yes", "true", "y"):
            return {key: True}
        if lowered in ("no", "false", "n"):
            return {key: False}
        return None
    if kind in ("integer", "number"):
        try:
            return {key: int(answer) if kind == "integer" else float(answer)}
        except ValueError:
            return None
    return {key: answer}


async def _list_tools(session: ClientSession) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    try:
        from mcp.types import PaginatedRequestParams

        while True:
            page = await session.list_tools(
                params=PaginatedRequestParams(cursor=cursor) if cursor else None
            )
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools
    except trio.Cancelled:
        raise
    except Exception as exc:
        raise McpServerError(f"listing its tools failed: {_describe(exc)}") from exc


def _result(server: McpServer, remote: str, result: Any) -> ToolOutput:
    """The model's view of a ``CallToolResult``; an ``isError`` one raises."""
    from mcp import types

    if not isinstance(result, types.CallToolResult):
        raise McpServerError(
            f"MCP server {server.name} answered the call of {remote} with a "
            f"{type(result).__name__}, not a tool result"
        )
    blocks: list[ResultBlock] = []
    for item in result.content:
        match item:
            case types.TextContent():
                blocks.append(Text(text=item.text))
            case types.ImageContent():
                blocks.append(Image(media_type=item.mime_type, data=item.data))
            case types.AudioContent():
                blocks.append(Text(text=f"[audio ({item.mime_type}) not shown]"))
            case types.ResourceLink():
                blocks.append(Text(text=f"[resource link: {item.uri}]"))
            case types.EmbeddedResource():
                resource = item.resource
                text = getattr(resource, "text", None)
                blocks.append(
                    Text(text=text)
                    if text is not None
                    else Text(text=f"[binary resource {resource.uri} not shown]")
                )
            case _:
                blocks.append(Text(text=f"[{type(item).__name__} not shown]"))
    structured = result.structured_content
    if structured is not None and not any(isinstance(b, Text) and b.text for b in blocks):
        blocks.append(Text(text=json.dumps(structured, sort_keys=True)))
    if result.is_error:
        text = "\n".join(b.text for b in blocks if isinstance(b, Text)) or "(no detail)"
        raise McpToolError(f"MCP server {server.name} reported an error from {remote}: {text}")
    return ToolOutput(content=blocks, structured=structured)


def _is_rpc_error(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError

    return isinstance(exc, MCPError) and getattr(getattr(exc, "error", None), "code", 0) not in (
        -32000,  # the SDK's own "connection closed"
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
