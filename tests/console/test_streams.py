"""A session stream whose tail ends (the journal closing under the console)
sends what the tail had read and ends, never failing on the closed channel."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import trio

from journal import Record
from session import Client, Session
from session.console.streams import session_stream
from tests.console.scenario import definition
from tests.host.support import trio_clock_journal


class _EndingClient(Client):
    """A client whose tail ends after ``stop`` records, as it does when the
    journal closes: the stream's pump closes its channel with records still
    in it."""

    stop = 3

    async def subscribe(self, session: str, **kw: Any) -> AsyncIterator[Record]:  # type: ignore[override]
        count = 0
        async for r in super().subscribe(session, **kw):
            yield r
            count += 1
            if count == self.stop:
                return


async def test_a_tail_that_ends_with_records_pending_sends_them_and_ends(
    autojump_clock: Any,
) -> None:
    journal = trio_clock_journal()
    sent: list[bytes] = []
    ready = trio.Event()

    async def emit(chunk: bytes) -> None:
        sent.append(chunk)
        if chunk.startswith(b"event: ready"):
            ready.set()

    async with Session.create(journal, definition(), session_id="s") as s:
        await s.submit("hello")
        await s.wait_idle()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session_stream, journal, _EndingClient(journal), "s", 0, emit)
            await ready.wait()
            shown = len(sent)
            await s.submit("again")
            await s.wait_idle()
        # The stream returned by itself once its tail ended.
    after = b"".join(sent[shown:])
    assert after.count(b"event: items") >= 1
    assert b'"seq"' in after
