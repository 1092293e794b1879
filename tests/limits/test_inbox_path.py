"""Payload limits on the way clients send commands: the journal refuses an
inbox entry too large for it (the client raises ``PayloadTooLargeError``),
and a host refuses, once, an entry over its loop's ``Limits``."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.events import InputQueued
from journal.memory import MemoryJournal
from loopruntime import Limits, LoopDefinition, PayloadTooLargeError
from loopruntime.models import Reply, ScriptedModel
from session import Client, CommandRefusedError, Host, open_sync_client
from tests.support.loops import events_of

from .test_payload_limits import text_of_size


def small_inputs() -> LoopDefinition:
    return LoopDefinition(
        name="small",
        model=ScriptedModel(lambda request: Reply(text="ok")),
        limits=Limits(max_input_bytes=1_000),
    )


async def test_a_client_is_refused_an_entry_the_journal_will_not_take() -> None:
    journal = MemoryJournal("memory:?max_entry_bytes=2000")
    client = Client(journal)
    sid = await client.create("small", key="c1")
    before = await journal.inbox(sid)
    with pytest.raises(PayloadTooLargeError) as caught:
        await client.submit(sid, "x" * 2_000, key="s1")
    assert caught.value.limit == 2_000 and caught.value.size > 2_000
    assert caught.value.what == "the submit command"
    assert await journal.inbox(sid) == before and await journal.entry(sid, "s1") is None


def test_a_sync_client_is_refused_alike(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}?max_entry_bytes=2000"
    with open_sync_client(url) as client:
        sid = client.create("small", key="c1")
        with pytest.raises(PayloadTooLargeError) as caught:
            client.steer(sid, "x" * 2_000, key="t1")
        assert caught.value.limit == 2_000
        assert [i.pending for i in client.sessions() if i.session == sid] == [1]


async def test_a_host_refuses_input_over_its_loops_limit_once(autojump_clock: object) -> None:
    journal = MemoryJournal(clock=lambda: int(trio.current_time() * 1e9))
    client = Client(journal)
    async with Host.open(journal, {"small": small_inputs()}, host_id="h1", poll=0.5):
        sid = await client.create("small", key="c1")
        await client.submit(sid, text_of_size(1_000), key="fits")
        await client.wait(sid, "fits", timeout=30)
        head = await journal.head(sid)
        await client.submit(sid, text_of_size(1_001), key="over")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait(sid, "over", timeout=30)
        outcome = caught.value.outcome
        assert outcome.error == "PayloadTooLargeError"
        assert outcome.message is not None and "1,001 bytes" in outcome.message
        # Consumed with its refusal: nothing of it in the session.
        assert await journal.head(sid) == head
        assert len(await events_of(journal, sid, InputQueued)) == 1
        assert await journal.inbox(sid) == []


async def test_the_url_limit_survives_open_journal() -> None:
    async with open_journal("memory:?max_entry_bytes=2KiB") as journal:
        assert getattr(journal, "max_entry_bytes", None) == 2_048
