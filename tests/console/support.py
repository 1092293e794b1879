"""What the console's HTTP tests share: the app over a memory journal with a
host running the scenario in the same trio run, an httpx client speaking to
the app directly, and a reader of its live streams."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from journal import Journal
from session import Client, Host
from session.console.app import create_app
from tests.console.scenario import definitions
from tests.host.support import trio_clock_journal, wait_for

__all__ = ["BASE", "TOKEN", "Env", "SseReader", "running", "wait_for"]

TOKEN = "test-token-1234"
BASE = "http://127.0.0.1:8740"
WRITE = {"x-console-token": TOKEN, "origin": BASE, "sec-fetch-site": "same-origin"}
"""What the console's own page sends with an action."""


@dataclass
class Env:
    journal: Journal
    app: Any
    http: httpx.AsyncClient
    inbox: Client
    host: Host | None

    async def session(
        self,
        *said: str,
        key: str = "s",
        definition: str = "console",
        principal: str | None = None,
    ) -> str:
        """A new session of ``definition`` that was told ``said``, one input
        after another (by ``principal``)."""
        sid = await self.inbox.create(definition, key=f"{key}/create")
        for i, text in enumerate(said):
            await self.inbox.submit(sid, text, key=f"{key}/{i}", principal=principal)
            await self.inbox.wait(sid, f"{key}/{i}")
        return sid

    async def get(
        self, path: str, headers: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        return await self.http.get(
            path, headers={"x-console-token": TOKEN, **(headers or {})}, **kw
        )

    async def post(
        self, path: str, body: object, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        return await self.http.post(
            path, content=json.dumps(body), headers=WRITE if headers is None else headers
        )


@asynccontextmanager
async def running(
    *,
    read_only: bool = False,
    host: bool = True,
    wait: float = 5.0,
    journal: Journal | None = None,
    clock: Callable[[], int] = lambda: int(trio.current_time() * 1e9),
    principal: str | None = None,
) -> AsyncIterator[Env]:
    """The console over ``journal`` (default: a memory journal on trio's
    clock; ``clock`` is the journal's), with a host running the scenario
    unless ``host`` is False."""
    journal = journal or trio_clock_journal()
    app = create_app(
        journal,
        token=TOKEN,
        read_only=read_only,
        wait=wait,
        clock=clock,
        principal=principal,
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
        if not host:
            yield Env(journal, app, http, Client(journal), None)
            return
        async with Host.open(journal, definitions(), host_id="h1", lease_ttl=30, poll=0.05) as h:
            yield Env(journal, app, http, Client(journal), h)


class SseReader:
    """Drives the app's ASGI callable for one streaming GET (httpx's transport
    would wait for the end of a stream that never ends) and parses its
    Server-Sent Events; leaving the block disconnects."""

    def __init__(self, app: Any, path: str, headers: dict[str, str]) -> None:
        self.app, self.path, self.headers = app, path, headers
        self.status: int | None = None
        self.response_headers: dict[str, str] = {}
        self._buffer = b""
        self._chunks_send, self._chunks = trio.open_memory_channel[bytes](1000)
        self._gone = trio.Event()

    async def __aenter__(self) -> SseReader:
        path, _, query = self.path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in self.headers.items()]
            + [(b"host", b"127.0.0.1:8740")],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8740),
        }
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        started = trio.Event()

        async def receive() -> dict[str, Any]:
            if not started.is_set():
                started.set()
                return {"type": "http.request", "body": b"", "more_body": False}
            await self._gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
                self.response_headers = {k.decode(): v.decode() for k, v in message["headers"]}
            elif message["type"] == "http.response.body":
                await self._chunks_send.send(message.get("body", b""))
                if not message.get("more_body", False):
                    await self._chunks_send.aclose()

        async def run() -> None:
            await self.app(scope, receive, send)
            await self._chunks_send.aclose()

        nursery.start_soon(run)
        self._nursery = nursery
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._gone.set()
        self._nursery.cancel_scope.cancel()
        await self._nursery_cm.__aexit__(None, None, None)

    async def next(self) -> tuple[str, Any]:
        """The next event: (name, decoded data)."""
        while b"\n\n" not in self._buffer:
            try:
                chunk = await self._chunks.receive()
            except trio.EndOfChannel:
                raise AssertionError(f"the stream ended; left: {self._buffer!r}") from None
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\n\n", 1)
        name, data = "message", b""
        for line in message.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
        return name, json.loads(data) if data else None

    async def until(self, name: str, predicate: Any = lambda data: True) -> Any:
        """Read events until one named ``name`` whose data satisfies ``predicate``."""
        while True:
            got, data = await self.next()
            if got == name and predicate(data):
                return data


async def text_of(journal: Journal, session: str) -> str:
    from session.replay import render_transcript

    return render_transcript([r async for r in journal.read(session)])
