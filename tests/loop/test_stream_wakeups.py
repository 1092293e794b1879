"""What a streamed piece costs the scheduler: its subscriber is woken once for
every delta pushed in one scheduling round, never once a push (the fan-out in
``session/embedded/subscriptions.py``: a push into a buffer whose reader is
already woken wakes nobody)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from journal import Record, open_journal
from journal.content import BlockStarted, BlockStopped, TextDelta
from loopruntime import LoopDefinition, ModelRequest
from loopruntime.model import Delta, StopDelta
from session import Session, StreamDelta
from tests.support.loops import TaskSteps

BURSTS, PIECES_A_BURST = 4, 5


class Bursts:
    """A model whose reply arrives in bursts: several pieces in one read (one
    wake-up of the stream), as a server faster than its reader delivers them."""

    name = "bursts"
    context_window = 200_000

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Delta]]:
        yield self._reply()

    @staticmethod
    async def _reply() -> AsyncIterator[Delta]:
        yield BlockStarted(index=0, kind="text")
        for _ in range(BURSTS):
            await trio.sleep(0.05)
            for _ in range(PIECES_A_BURST):
                yield TextDelta(index=0, text="x")
        yield BlockStopped(index=0)
        yield StopDelta(stop_reason="end_turn")


async def test_a_subscriber_is_woken_once_for_the_pieces_of_one_round(
    autojump_clock: trio.abc.Clock,
) -> None:
    steps = TaskSteps("subscriber")
    pieces: list[Any] = []
    records: list[Record] = []
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="b", model=Bursts())) as s:

            async def subscriber() -> None:
                async for item in s.subscribe(None, deltas=True):
                    if isinstance(item, StreamDelta):
                        pieces.append(item.delta)
                    else:
                        records.append(item)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(subscriber, name="subscriber")
                await trio.testing.wait_all_tasks_blocked()
                trio.lowlevel.add_instrument(steps)
                await s.submit("go")
                await s.wait_idle()
                await trio.testing.wait_all_tasks_blocked()
                trio.lowlevel.remove_instrument(steps)
                nursery.cancel_scope.cancel()
            appends = s.commit_statistics().appends
    texts = [p for p in pieces if type(p) is TextDelta]
    assert len(texts) == BURSTS * PIECES_A_BURST
    assert records and records[-1].event.__struct_config__.tag == "turn.ended"  # type: ignore[attr-defined]
    # Once a burst and once a durable append (its records), never once a piece:
    # woken a push, it would run at least BURSTS * PIECES_A_BURST times.
    assert steps.steps <= BURSTS + appends + 1
