"""Large records by reference, on every backend: a unit over the threshold is
stored once in the blob table, the record holds its digest, reading resolves
it, damage to a blob is caught, identical units are stored once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest

from journal import Draft, JournalCorruptError, open_journal
from journal.blobs import MARK, blob_digest, is_split
from journal.codec import encode_event
from journal.content import Image, Message, Text, ToolResult, ToolUse
from journal.events import (
    InputQueued,
    LoopImage,
    ModelMessageCommitted,
    SessionCheckpoint,
    ToolCompleted,
    ToolStarted,
)
from journal.memory import MemoryJournal

from .backends import Backend, sqlite_url

BIG = "x" * 5000
"""Over the tests' threshold (1024 bytes) once encoded."""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return Backend("memory", "memory:")
    if request.param == "sqlite":
        return Backend("sqlite", sqlite_url(tmp_path))
    return Backend("postgres", request.getfixturevalue("postgres_url"))


def completed(n: int, text: str = BIG) -> Draft:
    return Draft(
        id=f"done-{n}",
        loop="main",
        event=ToolCompleted(
            execution_id=f"x{n}",
            tool_use_id=f"t{n}",
            content=(Text(text=text),),
            disposition="succeeded",
        ),
    )


async def read_all(journal, session: str):  # type: ignore[no-untyped-def]
    return [r async for r in journal.read(session)]


async def test_a_large_result_is_stored_once_by_digest_and_read_back(backend: Backend) -> None:
    async with backend.open() as journal:
        lease = await journal.open_session("s")
        small = completed(3, "small")
        written = await journal.append(lease, [completed(1), completed(2), small], expected_seq=0)
        assert [r.event for r in await read_all(journal, "s")] == [r.event for r in written]
        blobs = await backend.blobs()
        # The two results are the same content: one blob.
        unit = encode_event(written[0].event.content)  # type: ignore[union-attr]
        assert blobs == {blob_digest(unit): unit}
        for seq in (1, 2):
            body = await backend.stored_body("s", seq)
            assert body[0] == MARK and len(body) < 300
            assert BIG.encode() not in body
        # Under the threshold: stored whole, as always.
        assert await backend.stored_body("s", 3) == encode_event(small.event)
    # Read again by a journal opened afresh (another reader, another connection).
    async with backend.open() as journal:
        assert [r.event for r in await read_all(journal, "s")] == [r.event for r in written]
        tail = journal.tail("s")
        assert (await tail.__anext__()).event == written[0].event
        await tail.aclose()


async def test_every_kind_of_unit_goes_by_reference(backend: Backend) -> None:
    """Content blocks of a message, a tool's input, a tool result inside a
    message, and a checkpoint's messages: each refers to the blob the record
    that first held the same content stored."""
    big_input = {"path": "a.txt", "data": BIG}
    events = [
        InputQueued(input_id="i", messages=(Message(role="user", blocks=(Text(text=BIG),)),)),
        ModelMessageCommitted(
            effect_id="m",
            turn=1,
            step=0,
            message=Message(
                role="assistant",
                blocks=(
                    Text(text="short"),
                    ToolUse(id="t1", name="write", input=big_input),
                    Image(media_type="image/png", data="A" * 4000),
                ),
            ),
        ),
        ToolStarted(execution_id="x1", tool_use_id="t1", name="write", input=big_input),
        ToolCompleted(
            execution_id="x1",
            tool_use_id="t1",
            content=(Text(text=BIG + "!"),),
            disposition="succeeded",
        ),
    ]
    history = (
        events[0].messages[0],  # type: ignore[attr-defined]
        events[1].message,  # type: ignore[attr-defined]
        Message(
            role="user",
            blocks=(ToolResult(tool_use_id="t1", content=events[3].content),),  # type: ignore[attr-defined]
        ),
    )
    checkpoint = SessionCheckpoint(loops=(LoopImage(loop="main", state=b"", messages=history),))
    async with backend.open() as journal:
        lease = await journal.open_session("s")
        drafts = [Draft(id=f"e{i}", loop="main", event=e) for i, e in enumerate(events)]
        written = await journal.append(lease, drafts, expected_seq=0)
        before = await backend.blobs()
        # The text, the input, the image, the result: four blobs.
        assert len(before) == 4
        cp = await journal.append(
            lease,
            [Draft(id="cp", loop="~checkpoint", event=checkpoint)],
            expected_seq=len(written),
        )
        # The checkpoint refers to the blobs; it copies none of them.
        assert await backend.blobs() == before
        body = await backend.stored_body("s", cp[0].seq)
        assert is_split(body) and len(body) < 1000
        assert [r.event for r in await read_all(journal, "s")] == [*events, checkpoint]
        assert await journal.checkpoints("s") == cp


async def test_a_retried_append_with_blobs_returns_the_stored_records(backend: Backend) -> None:
    async with backend.open() as journal:
        lease = await journal.open_session("s")
        first = await journal.append(lease, [completed(1)], expected_seq=0)
        again = await journal.append(lease, [completed(1)], expected_seq=0)
        assert again == first
        assert len(await backend.blobs()) == 1


@pytest.mark.parametrize("damage", ["changed", "missing"])
async def test_a_damaged_or_missing_blob_is_caught_naming_the_record(
    backend: Backend, damage: str
) -> None:
    from session.replay import check

    async with backend.open() as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, [completed(1, "fine"), completed(2)], expected_seq=0)
        (digest,) = await backend.blobs()
        await backend.damage_blob(journal, digest, b"\x91\xa1x" if damage == "changed" else None)
        got = []
        with pytest.raises(JournalCorruptError) as caught:
            async for r in journal.read("s"):
                got.append(r.seq)
        # Every record before the damaged one was read.
        assert got == [1]
        assert caught.value.seq == 2
        assert digest.hex() in str(caught.value)
        assert ("damaged" if damage == "changed" else "missing") in str(caught.value)
        report = await check(journal, "s")
        assert not report.ok
        assert any(p.seq == 2 and digest.hex() in p.detail for p in report.problems), report


@pytest.mark.parametrize("threshold", [0, -1, 1.5, True, "256KiB"])
async def test_a_threshold_that_is_not_a_positive_size_is_refused(
    tmp_path: Path, threshold: object
) -> None:
    with pytest.raises(ValueError, match="blob threshold must be a positive number of bytes"):
        MemoryJournal(blob_threshold=threshold)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="blob threshold must be a positive number of bytes"):
        async with open_journal(f"sqlite:///{tmp_path / 'j.db'}", blob_threshold=threshold):  # type: ignore[arg-type]
            pass
    # Refused before anything was made.
    assert not (tmp_path / "j.db").exists()


async def test_a_journal_url_carries_the_threshold(backend: Backend) -> None:
    """``blob_threshold`` in the URL (as a size with a unit) is the threshold of
    a journal opened with it on every backend; a PostgreSQL URL reaches libpq
    without it."""
    url = "memory:" if backend.kind == "memory" else backend.url
    url += ("&" if "?" in url else "?") + "blob_threshold=1KiB"
    async with open_journal(url) as journal:
        assert journal.blob_threshold == 1024
        assert journal.url == url
        lease = await journal.open_session("s")
        await journal.append(lease, [completed(1)], expected_seq=0)
        assert [r.event async for r in journal.read("s")] == [completed(1).event]
        if backend.kind != "memory":
            assert is_split(await backend.stored_body("s", 1))
    # The same threshold passed in code is no conflict; a different one is refused.
    async with open_journal(url, blob_threshold=1024) as journal:
        assert journal.blob_threshold == 1024
    with pytest.raises(ValueError, match="sets blob_threshold=1024 but blob_threshold=2048"):
        async with open_journal(url, blob_threshold=2048):
            pass


async def test_the_default_threshold_keeps_ordinary_records_whole(tmp_path: Path) -> None:
    assert MemoryJournal().blob_threshold == 256 * 1024
    url = sqlite_url(tmp_path)
    async with open_journal(url) as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, [completed(1, "y" * 200_000)], expected_seq=0)
        await journal.append(lease, [completed(2, "y" * 300_000)], expected_seq=1)
    stored = Backend("sqlite", url)
    assert not is_split(await stored.stored_body("s", 1))
    assert is_split(await stored.stored_body("s", 2))


async def test_a_checkpoints_fold_state_refers_to_blobs_too(backend: Backend) -> None:
    """The calls of an open batch live in the fold's state of a checkpoint image
    (opaque bytes to the journal): a large input there goes by reference too."""
    big_input = {"path": "b.txt", "data": BIG}
    started = ToolStarted(execution_id="x1", tool_use_id="t1", name="write", input=big_input)
    state = msgspec.msgpack.encode({"loop": "main", "running": {"x1": started}, "turn_open": True})
    checkpoint = SessionCheckpoint(loops=(LoopImage(loop="main", state=state),))
    async with backend.open() as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, [Draft(id="st", loop="main", event=started)], expected_seq=0)
        before = await backend.blobs()
        assert len(before) == 1
        cp = await journal.append(
            lease, [Draft(id="cp", loop="~checkpoint", event=checkpoint)], expected_seq=1
        )
        assert await backend.blobs() == before
        body = await backend.stored_body("s", 2)
        assert is_split(body) and BIG.encode() not in body
        assert [r.event for r in await read_all(journal, "s")] == [started, checkpoint]
        assert await journal.checkpoints("s") == cp


def test_the_cli_takes_the_threshold_from_its_journal_url(tmp_path: Path) -> None:
    """``--journal URL`` carries the threshold to every command; a bad one is
    one line naming the option, and no journal is made."""
    from tests.cli.test_first_hour import one_line_error, run

    bad = run("demo", "--journal", "sqlite:///bad.db?blob_threshold=lots", cwd=tmp_path)
    assert "blob_threshold must be a positive number of bytes" in one_line_error(bad)
    assert not (tmp_path / "bad.db").exists()
    done = run("demo", "--journal", "sqlite:///d.db?blob_threshold=64", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    conn = sqlite3.connect(tmp_path / "d.db")
    try:
        (stored,) = conn.execute("SELECT count(*) FROM blobs").fetchone()
    finally:
        conn.close()
    # The demo's units are a few hundred bytes: only a 64-byte threshold splits them.
    assert stored > 0


async def test_a_restore_read_joins_the_blobs_of_its_checkpoints_and_tail(
    backend: Backend,
) -> None:
    """``read_checkpointed`` gives the events whole, whether the checkpoint or
    a record after it is stored by reference."""

    def queued(n: int) -> InputQueued:
        text = Text(text=BIG + str(n))
        return InputQueued(input_id=f"i{n}", messages=(Message(role="user", blocks=(text,)),))

    first = queued(1)
    checkpoint = SessionCheckpoint(
        loops=(LoopImage(loop="main", state=b"", messages=first.messages),)
    )
    async with backend.open() as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, [Draft(id="e1", loop="main", event=first)], expected_seq=0)
        cp = await journal.append(
            lease, [Draft(id="cp", loop="~checkpoint", event=checkpoint)], expected_seq=1
        )
        tail = await journal.append(
            lease, [Draft(id="e2", loop="main", event=queued(2))], expected_seq=2
        )
        assert is_split(await backend.stored_body("s", 2))
        assert is_split(await backend.stored_body("s", 3))
        got = await journal.read_checkpointed("s")
        assert (got.checkpoints, got.tail, got.head) == (cp, tail, 3)
