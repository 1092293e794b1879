"""Input refused before anything is written, at every entry: an empty message,
a create naming a session of another definition.  Each refusal is a named
error, and the journal -- records and inbox -- is what it was before."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import InvalidEventError, open_blocking, open_journal
from journal import inbox as ib
from journal.content import Image, Message, Text
from session import (
    Client,
    CommandRefusedError,
    EmptyInputError,
    Host,
    Session,
    SessionExistsError,
    SyncClient,
)
from tests.host.support import ask_definition, counting_definition, trio_clock_journal

BLANK = ["", "   ", "\n\t "]
DEFS = {"counter": counting_definition(), "asker": ask_definition()}


@pytest.mark.parametrize("text", BLANK)
async def test_session_refuses_empty_input_and_commits_nothing(text: str) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, counting_definition()) as s:
            head = await journal.head(s.id)
            with pytest.raises(EmptyInputError, match="the input is empty") as caught:
                await s.submit(text)
            assert caught.value.what == "the input"
            with pytest.raises(EmptyInputError, match="the input is empty"):
                await s.submit(Message(role="user", blocks=()))
            with pytest.raises(EmptyInputError):
                # One blank block among others is still one the API refuses.
                await s.submit([Text(text="look"), Text(text=text)])
            with pytest.raises(EmptyInputError, match="the steering is empty"):
                await s.steer(text)
            assert await journal.head(s.id) == head


async def test_input_with_an_image_and_no_text_is_taken() -> None:
    """Only blank text is refused: an image alone is something to say."""
    png = Image(media_type="image/png", data="iVBORw0KGgo=")
    async with open_journal("memory:") as journal:
        async with Session.create(journal, counting_definition()) as s:
            assert (await s.submit([png])).startswith("in_")


@pytest.mark.parametrize("text", BLANK)
async def test_the_inbox_put_refuses_empty_input(text: str) -> None:
    """The journal's own rule, for a writer that builds commands by hand."""
    async with open_journal("memory:") as journal:
        await journal.put("s1", "c", ib.Create(definition="counter"), definition="counter")
        blank = ib.Submit(message=Message(role="user", blocks=(Text(text=text),)))
        with pytest.raises(InvalidEventError, match="empty or only whitespace"):
            await journal.put("s1", "m1", blank)
        with pytest.raises(InvalidEventError, match="no content block"):
            await journal.put("s1", "m1", ib.Submit(message=Message(role="user", blocks=())))
        with pytest.raises(InvalidEventError, match="steering text is empty"):
            await journal.put("s1", "m1", ib.Steer(text=text))
        assert await journal.entry("s1", "m1") is None


@pytest.mark.parametrize("text", BLANK)
async def test_the_async_client_refuses_empty_input(text: str) -> None:
    async with open_journal("memory:") as journal:
        client = Client(journal)
        sid = await client.create("counter", key="c")
        with pytest.raises(EmptyInputError):
            await client.submit(sid, text, key="m1")
        with pytest.raises(EmptyInputError):
            await client.steer(sid, text, key="m1")
        assert await journal.entry(sid, "m1") is None


@pytest.mark.parametrize("loop", ["", 7])
async def test_a_loop_id_that_is_no_name_is_refused_before_writing(loop: object) -> None:
    async with open_journal("memory:") as journal:
        client = Client(journal)
        sid = await client.create("counter", key="c")
        for send in (client.pause, client.resume):
            with pytest.raises(ValueError, match="loop id"):
                await send(sid, key="p", loop=loop)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="loop id"):
            await client.submit(sid, "hi", key="p", loop=loop)  # type: ignore[arg-type]
        assert await journal.entry(sid, "p") is None


def test_the_sync_client_refuses_empty_input(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    with SyncClient.open(url) as client:
        sid = client.create("counter", key="c")
        for text in BLANK:
            with pytest.raises(EmptyInputError):
                client.submit(sid, text, key="m1")
    blocking = open_blocking(url)
    try:
        assert blocking.entry(sid, "m1") is None
    finally:
        blocking.close()


async def test_the_async_client_refuses_a_session_of_another_definition() -> None:
    async with open_journal("memory:") as journal:
        client = Client(journal)
        assert await client.create("counter", session_id="async-1", key="c1") == "async-1"
        # The same definition again (a retry under another key) is the same session.
        assert await client.create("counter", session_id="async-1", key="c2") == "async-1"
        with pytest.raises(SessionExistsError) as caught:
            await client.create("asker", session_id="async-1", key="c3")
        error = caught.value
        assert (error.session, error.definition, error.requested) == ("async-1", "counter", "asker")
        assert "'counter'" in str(error) and "'asker'" in str(error)
        assert await journal.entry("async-1", "c3") is None


def test_the_sync_client_refuses_a_session_of_another_definition(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    with SyncClient.open(url) as client:
        client.create("counter", session_id="sync-1", key="c1")
        with pytest.raises(SessionExistsError, match="'counter', not 'asker'"):
            client.create("asker", session_id="sync-1", key="c2")
        [info] = [i for i in client.sessions() if i.session == "sync-1"]
        assert info.pending == 1


async def test_session_create_refuses_a_session_asked_for_with_another_definition() -> None:
    async with open_journal("memory:") as journal:
        await Client(journal).create("asker", session_id="s1", key="c1")
        with pytest.raises(SessionExistsError, match="'asker', not 'counter'"):
            async with Session.create(journal, counting_definition(), session_id="s1"):
                raise AssertionError("created")
        assert await journal.head("s1") == 0


async def test_a_host_refuses_a_create_of_another_definition_that_raced_in(
    autojump_clock: object,
) -> None:
    """Two creates of one new id, sent at once, both pass the clients' check:
    the host applies the first and refuses the second by name."""
    journal = trio_clock_journal()
    await journal.put("s1", "c1", ib.Create(definition="counter"), definition="counter")
    await journal.put("s1", "c2", ib.Create(definition="asker"), definition="asker")
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        assert (await client.wait("s1", "c1")).value == "s1"
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait("s1", "c2")
    assert caught.value.outcome.error == "SessionExistsError"
    assert "'counter', not 'asker'" in str(caught.value.outcome.message)
