"""A local HTTP server that speaks the Anthropic Messages streaming protocol.

The Anthropic adapter is tested with the real SDK and the real HTTP stack
pointed at this server (``base_url=server.url``), never with mocks.  The
server runs as a trio task in the test's own run, so ``autojump_clock``
stays honest: a client waiting for bytes the server task is about to write is
never mistaken for an idle run (a server thread would be, and the virtual
clock would fire the SDK's read timeout).

A test scripts one ``Reply`` per expected request, in order.  Each reply is
an HTTP error (``Status``), an event stream (``Stream``), or a connection
closed before any response (``Hangup``).  Every request the server received
is kept in ``server.requests`` with its headers and decoded JSON body, so a
test asserts exactly what went over the wire.

HTTP/1.1 framing is done by h11 (already installed: the SDK's HTTP stack
depends on it).  Streams are sent with chunked transfer encoding like the
real API, so closing the socket mid-stream is a truncated body the client
can detect, not a clean end of file.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import h11
import trio

__all__ = [
    "Drop",
    "Event",
    "Hangup",
    "Hold",
    "Raw",
    "RecordedRequest",
    "Reply",
    "SSEServer",
    "Status",
    "Stream",
    "open_sse_server",
]


@dataclass(frozen=True)
class Event:
    """One server-sent event: ``event: <name>`` and ``data: <json>``."""

    name: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Drop:
    """Inside a ``Stream``: close the connection here, mid-body."""


@dataclass(frozen=True)
class Hold:
    """Inside a ``Stream``: stop sending until ``server.release`` is set.
    Lets a test act (cancel, interrupt) while the client waits for bytes."""


@dataclass(frozen=True)
class Raw:
    """Inside a ``Stream``: send these bytes verbatim (a malformed event)."""

    data: bytes


@dataclass(frozen=True)
class Stream:
    """A 200 ``text/event-stream`` response made of ``steps`` in order.

    Ends cleanly after the last step unless a ``Drop`` comes first.
    """

    steps: Sequence[Event | Drop | Hold | Raw]
    headers: Sequence[tuple[str, str]] = ()


@dataclass(frozen=True)
class Status:
    """A JSON error response, shaped like the API's: ``{"type": "error",
    "error": {"type": error_type, "message": message}}``."""

    status: int
    error_type: str
    message: str
    headers: Sequence[tuple[str, str]] = ()
    code: str | None = None
    """The error's ``code`` (OpenAI's body carries one, e.g. ``insufficient_quota``)."""


@dataclass(frozen=True)
class Hangup:
    """Read the request, then close the connection without any response."""


Reply = Stream | Status | Hangup


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it.  Header names are lower case."""

    method: str
    target: str
    headers: dict[str, str]
    body: Any
    at: float
    """``trio.current_time()`` when the request was complete."""


@dataclass
class SSEServer:
    """Handle to a running server; see ``open_sse_server``."""

    url: str
    replies: list[Reply]
    requests: list[RecordedRequest] = field(default_factory=list)
    release: trio.Event = field(default_factory=trio.Event)
    """Set it to let every ``Hold``-ed stream continue."""
    disconnected: trio.Event = field(default_factory=trio.Event)
    """Set when a client closed its connection while a stream was being sent."""


def sse_bytes(event: Event) -> bytes:
    """The wire form of one event, as the API sends it."""
    return f"event: {event.name}\ndata: {json.dumps(event.data)}\n\n".encode()


@asynccontextmanager
async def open_sse_server(replies: Sequence[Reply]) -> AsyncIterator[SSEServer]:
    """Serve ``replies`` on 127.0.0.1 (an ephemeral port) until the block exits.

    Requests beyond the scripted replies get a 500 whose message says so, so
    an unexpected extra request (a retry that should not happen) fails the
    test loudly instead of hanging it.
    """
    async with trio.open_nursery() as nursery:
        server: SSEServer | None = None

        async def handle(stream: trio.SocketStream) -> None:
            assert server is not None
            await _serve_connection(server, stream)

        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        server = SSEServer(url=f"http://127.0.0.1:{port}", replies=list(replies))
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def _serve_connection(server: SSEServer, stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            request = await _read_request(conn, stream)
            if request is None:
                return
            server.requests.append(request)
            reply: Reply = (
                server.replies.pop(0)
                if server.replies
                else Status(
                    500,
                    "api_error",
                    f"sse_server: no scripted reply left for request {len(server.requests)}",
                )
            )
            keep_open = await _send_reply(server, conn, stream, reply)
            if not keep_open or conn.our_state is not h11.DONE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return


async def _read_request(conn: h11.Connection, stream: trio.SocketStream) -> RecordedRequest | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            conn.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return RecordedRequest(
                method=head.method.decode(),
                target=head.target.decode(),
                headers={k.decode().lower(): v.decode() for k, v in head.headers},
                body=json.loads(body) if body else None,
                at=trio.current_time(),
            )
        else:  # ConnectionClosed, or a protocol state that ends the exchange
            return None


async def _hold(server: SSEServer, stream: trio.SocketStream) -> bool:
    """Wait for ``server.release``; False if the client hung up first.

    Watching the socket while holding is what lets a test see a cancelled
    client close its connection promptly, rather than on the next write.
    """
    released = False
    async with trio.open_nursery() as nursery:

        async def wait_release() -> None:
            nonlocal released
            await server.release.wait()
            released = True
            nursery.cancel_scope.cancel()

        async def wait_hangup() -> None:
            try:
                while await stream.receive_some(65536):
                    pass  # a client sends nothing mid-response; ignore stray bytes
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(wait_release)
        nursery.start_soon(wait_hangup)
    return released


async def _send_reply(
    server: SSEServer, conn: h11.Connection, stream: trio.SocketStream, reply: Reply
) -> bool:
    """Send one reply.  Returns whether the connection may be reused."""
    match reply:
        case Hangup():
            return False
        case Status():
            error = {"type": reply.error_type, "message": reply.message}
            if reply.code is not None:
                error["code"] = reply.code
            payload = json.dumps({"type": "error", "error": error}).encode()
            headers = [
                ("content-type", "application/json"),
                ("content-length", str(len(payload))),
                ("request-id", f"req_test_{len(server.requests)}"),
                *reply.headers,
            ]
            await stream.send_all(
                conn.send(h11.Response(status_code=reply.status, headers=headers))
            )
            await stream.send_all(conn.send(h11.Data(data=payload)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
            return True
        case Stream():
            headers = [
                ("content-type", "text/event-stream; charset=utf-8"),
                ("cache-control", "no-cache"),
                ("request-id", f"req_test_{len(server.requests)}"),
                *reply.headers,
            ]
            try:
                await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers)))
                for step in reply.steps:
                    match step:
                        case Drop():
                            return False
                        case Hold():
                            if not await _hold(server, stream):
                                server.disconnected.set()
                                return False
                        case Event():
                            await stream.send_all(conn.send(h11.Data(data=sse_bytes(step))))
                        case Raw():
                            await stream.send_all(conn.send(h11.Data(data=step.data)))
                await stream.send_all(conn.send(h11.EndOfMessage()))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                server.disconnected.set()
                return False
            return True
