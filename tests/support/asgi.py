"""One HTTP request to an ASGI application, in the test's own trio run: the
status, the headers and the body, or for a stream that never ends (Server-Sent
Events) its first chunk, after which the request is given up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import trio

__all__ = ["Answer", "request"]


@dataclass
class Answer:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    raised: BaseException | None = None
    """What the application raised past its own error handling (a bug)."""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


async def request(
    app: Any,
    method: str,
    path: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    query: str = "",
) -> Answer:
    """``path`` is taken as text and percent-encoded as a client would."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": quote(path, safe="/").encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    answer = Answer()
    done = trio.Event()
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            answer.body += message.get("body", b"")
            if not message.get("more_body", False) or answer.body:
                done.set()

    async with trio.open_nursery() as nursery:

        async def run() -> None:
            try:
                await app(scope, receive, send)
            except Exception as exc:
                answer.raised = exc
            done.set()

        nursery.start_soon(run)
        await done.wait()
        nursery.cancel_scope.cancel()
    return answer
