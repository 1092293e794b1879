"""``/metrics``, ``/healthz`` and ``/readyz`` of ``loopruntime host --metrics``.

A small responder on trio's own server, answering in the host's run (so
``/healthz`` means the run answers), with ``prometheus_client.generate_latest``
for the body; docs/decisions.md says why not prometheus-client's own server.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING

import structlog
import trio

from .host import Host
from .metrics import HostMetrics, open_host_metrics

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["bind_metrics", "metrics_address", "serve_metrics", "serving_metrics"]

log = structlog.wrap_logger(logging.getLogger(__name__))

_REQUEST_LIMIT = 8192
"""Bytes of a request's head the endpoint reads at most."""
_REQUEST_SECONDS = 10.0
"""How long one request may take before it is dropped."""


def metrics_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or a bare ``PORT`` (loopback); port 0 picks a free one.
    An argparse type: a bad address is one line and exit 2."""
    host, colon, port_text = text.rpartition(":")
    host = host.strip("[]") if colon else "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535 or not host or not port_text.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT or PORT (a port from 0 to 65535), not {text!r}"
        )
    return host, port


async def bind_metrics(address: tuple[str, int] | None) -> list[trio.SocketListener] | None:
    """Listen at ``address`` for ``serving_metrics`` (None: no metrics), before
    the host starts: an address that cannot be had stops it before anything
    is claimed (a ``ValueError`` in one line)."""
    if address is None:
        return None
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ValueError(
            "--metrics needs prometheus-client: pip install 'loopruntime[metrics]'"
        ) from None
    host, port = address
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise ValueError(
            f"--metrics {host}:{port}: cannot listen there ({exc.strerror or exc})"
        ) from None


@asynccontextmanager
async def serving_metrics(
    host: Host, listeners: list[trio.SocketListener] | None
) -> AsyncIterator[str | None]:
    """Serve ``host``'s metrics and health on ``listeners`` (from
    ``bind_metrics``) for the block, on a registry of their own; yields the
    address served (None: no listeners, nothing served)."""
    if listeners is None:
        yield None
        return
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=True)
    async with open_host_metrics(host, registry) as metrics, trio.open_nursery() as nursery:
        nursery.start_soon(serve_metrics, metrics, registry, listeners)
        sockname = listeners[0].socket.getsockname()
        yield f"http://{sockname[0]}:{sockname[1]}/metrics"
        nursery.cancel_scope.cancel()


async def serve_metrics(
    metrics: HostMetrics, registry: CollectorRegistry, listeners: list[trio.SocketListener]
) -> None:
    """Answer ``GET /metrics`` (Prometheus text), ``/healthz`` (200 while the
    host's run answers at all) and ``/readyz`` (200 when ``Host.ready``, else
    503) on ``listeners``, one request per connection."""

    async def handle(stream: trio.SocketStream) -> None:
        # A scraper that hangs up early is its own affair, never the host's.
        with trio.move_on_after(_REQUEST_SECONDS), suppress(trio.BrokenResourceError, OSError):
            head = b""
            while b"\r\n\r\n" not in head and len(head) < _REQUEST_LIMIT:
                chunk = await stream.receive_some(_REQUEST_LIMIT)
                if not chunk:
                    return
                head += chunk
            if head.startswith(b"GET /metrics"):
                await metrics.read_journal()
            try:
                status, kind, body = _answer(metrics, registry, head)
            except Exception as exc:
                log.warning("metrics_scrape_failed", error=repr(exc))
                status, kind, body = "500 Internal Server Error", "text/plain", b"failed\n"
            await stream.send_all(
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
        await stream.aclose()

    await trio.serve_listeners(handle, listeners)


def _answer(
    metrics: HostMetrics, registry: CollectorRegistry, head: bytes
) -> tuple[str, str, bytes]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    text = "text/plain; charset=utf-8"
    method, _, rest = head.partition(b" ")
    path = rest.partition(b" ")[0].partition(b"?")[0]
    if method != b"GET":
        return "405 Method Not Allowed", text, b"GET only\n"
    match path:
        case b"/metrics":
            metrics.refresh()
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(registry)
        case b"/healthz":
            return "200 OK", text, b"ok\n"
        case b"/readyz":
            if metrics.host.ready:
                return "200 OK", text, b"ready\n"
            return "503 Service Unavailable", text, b"not ready\n"
        case _:
            return "404 Not Found", text, b"/metrics, /healthz or /readyz\n"
