"""An OTLP/HTTP traces receiver on loopback, for the export tests.

It answers ``POST /v1/traces`` the way a collector does: the body is an
``ExportTraceServiceRequest`` in protobuf, decoded here with the official
``opentelemetry-proto`` classes, and the reply is an empty
``ExportTraceServiceResponse``.  It runs as a trio task in the test's run;
HTTP/1.1 framing is h11's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import h11
import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Receiver:
    url: str
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)


@asynccontextmanager
async def open_receiver() -> AsyncIterator[Receiver]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    receiver = Receiver(url=f"http://127.0.0.1:{port}/v1/traces")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.serve_listeners, partial(_serve, receiver), listeners))
        yield receiver
        nursery.cancel_scope.cancel()


async def _serve(receiver: Receiver, stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    while True:
        body = b""
        request: h11.Request | None = None
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some()
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                return
        assert request is not None
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        receiver.content_types.append(headers.get("content-type", ""))
        parsed = ExportTraceServiceRequest()
        parsed.ParseFromString(body)
        receiver.requests.append(parsed)
        reply = ExportTraceServiceResponse().SerializeToString()
        await stream.send_all(
            conn.send(
                h11.Response(
                    status_code=200,
                    headers=[
                        ("content-type", "application/x-protobuf"),
                        ("content-length", str(len(reply))),
                    ],
                )
            )
            or b""
        )
        await stream.send_all(conn.send(h11.Data(data=reply)) or b"")
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
        if conn.our_state is h11.MUST_CLOSE:
            return
        conn.start_next_cycle()
