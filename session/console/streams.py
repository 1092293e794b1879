"""The console's live streams (Server-Sent Events): a session's records as
the page shows them, and the session list whenever it changes.

A stream reads the journal and never writes it.  A session's stream sends
its history in batches, then what the journal's ``tail`` yields; what the
tail already read goes out as one message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog
import trio
from starlette.responses import Response

from journal import Journal, JournalError, Record
from loopruntime.host import FoldError

from ..clients.client import Client
from ..embedded.checkpoints import SessionFolder
from .overview import Overview
from .views import Reviews, TranscriptFeed, actions_of

__all__ = ["BATCH", "Emit", "EventStream", "list_stream", "session_stream"]

log = structlog.get_logger(__name__)

BATCH = 500
"""Records per message at most (a page loading a long history gets batches)."""

Emit = Callable[[bytes], Awaitable[None]]


class EventStream(Response):
    """A Server-Sent Events response: ``produce(emit)`` runs until it returns
    or the page goes away (then it is cancelled).  Not a generator: the
    producer may run tasks of its own, which a generator must not."""

    media_type = "text/event-stream"

    def __init__(self, produce: Callable[[Emit], Awaitable[None]]) -> None:
        # No Response.__init__: it would declare a Content-Length for a body
        # that never ends.
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        self.produce = produce

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})

        async def emit(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        left = False
        async with trio.open_nursery() as nursery:

            async def gone() -> None:
                nonlocal left
                while (await receive())["type"] != "http.disconnect":
                    pass
                left = True
                nursery.cancel_scope.cancel()

            nursery.start_soon(gone)
            await self.produce(emit)
            nursery.cancel_scope.cancel()
        if not left:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def _message(event: str, data: object, last: int | None = None) -> bytes:
    head = f"event: {event}\n" + (f"id: {last}\n" if last is not None else "")
    return head.encode() + b"data: " + msgspec.json.encode(data) + b"\n\n"


async def session_stream(
    journal: Journal, client: Client, sid: str, after: int, emit: Emit
) -> None:
    """The session's records as page items: its history in batches, then the
    records committed later (the journal's ``tail``), each batch as soon as
    it is read, with the actions open after it whenever they change.  Items
    up to ``after`` are folded, not sent (a page that reconnects)."""
    feed, folder, reviews = TranscriptFeed(), SessionFolder(), Reviews()
    batch: list[dict[str, Any]] = []
    head = 0
    try:
        async for r in journal.read(sid):
            head = r.seq
            item = feed.item(r)
            folder.feed(r)
            reviews.feed(r)
            if r.seq > after:
                batch.append(item)
            if len(batch) >= BATCH:
                await emit(_message("items", batch, head))
                batch = []
        if batch:
            await emit(_message("items", batch, head))
        actions = actions_of(folder.states, reviews)
        shown = msgspec.json.encode(actions)
        await emit(_message("actions", actions))
        await emit(_message("ready", {"head": head}))
        send, receive = trio.open_memory_channel[Record](BATCH)

        async def pump() -> None:
            async with send:
                async for r in client.subscribe(sid, after=head):
                    await send.send(r)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump)
            async for first in receive:
                # What the tail already read goes in one message: a burst of
                # commits costs the page one update, not one per record.
                records = [first]
                while len(records) < BATCH:
                    try:
                        records.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        # Nothing more yet, or the tail ended: send what came.
                        break
                items = []
                for r in records:
                    folder.feed(r)
                    reviews.feed(r)
                    items.append(feed.item(r))
                await emit(_message("items", items, records[-1].seq))
                actions = actions_of(folder.states, reviews)
                encoded = msgspec.json.encode(actions)
                if encoded != shown:
                    shown = encoded
                    await emit(_message("actions", actions))
    except (JournalError, FoldError) as exc:
        log.warning("console_stream_failed", session=sid, error=str(exc))
        message = f"{exc}; `loopruntime replay {sid} --check` says more"
        await emit(_message("problem", {"message": message}))


async def list_stream(overview: Overview, poll: float, emit: Emit) -> None:
    """The session list whenever it changes (the journal is asked every
    ``poll`` seconds: no journal offers a tail of all sessions)."""
    shown: bytes | None = None
    while True:
        try:
            rows = await overview.rows()
        except JournalError as exc:
            await emit(_message("problem", {"message": str(exc)}))
            return
        encoded = msgspec.json.encode(rows)
        if encoded != shown:
            shown = encoded
            await emit(b"event: sessions\ndata: " + encoded + b"\n\n")
        await trio.sleep(poll)
