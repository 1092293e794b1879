"""Session checkpoints: what the writer puts in them, and restore from them."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog

from journal import (
    TAIL_LIMIT,
    Checkpointed,
    Draft,
    Journal,
    JournalCorruptError,
    Record,
    open_journal,
)
from journal.codec import encode_event
from journal.content import Text, ToolResult
from journal.events import (
    CHECKPOINT_STREAM,
    LoopImage,
    ModelCallStarted,
    SessionCheckpoint,
    ToolStarted,
)
from journal.forwarding import ForwardingJournal
from loopruntime import Delegate, Limits, LoopDefinition, Mode, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.embedded.checkpoints import (
    InvalidCheckpointError,
    Restored,
    read_restored,
    states_from,
)
from session.replay import check
from tests.compaction.support import TestCompactor, summary
from tests.support.loops import crashed_copy, records

EVERY = 10


@tool(permission="allow")
async def count(ctx: ToolContext, *, n: int) -> str:
    """Counts."""
    return str(n + 1)


def counting(request: ModelRequest) -> Reply:
    # A tool call, then an answer, every turn.
    last = request.messages[-1]
    if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
        return Reply(text="counted")
    return Reply(tool_calls=[ToolCall(name="count", input={"n": len(request.messages)})])


def definition() -> LoopDefinition:
    return LoopDefinition(name="counter", model=ScriptedModel(counting), tools=[count])


async def chain_of(journal: Journal, session_id: str) -> list[SessionCheckpoint]:
    found = []
    for record in await journal.checkpoints(session_id):
        assert isinstance(record.event, SessionCheckpoint)
        assert record.loop == CHECKPOINT_STREAM
        found.append(record.event)
    return found


async def turns(s: Session, n: int) -> None:
    for i in range(n):
        await s.submit(f"count {i}")
        await s.wait_idle()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every backend: checkpoints are found through each one's own index."""
    if request.param == "memory":
        return "memory:"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


async def test_restore_continues_the_chain_and_stores_each_message_once(
    journal_url: str,
) -> None:
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition(), checkpoint_every=EVERY) as s:
            await turns(s, 6)
        session_id = s.id
        before = len(await chain_of(journal, session_id))
        async with Session.restore(
            journal, session_id, definition(), checkpoint_every=EVERY
        ) as restored:
            await turns(restored, 6)
            live = await restored.snapshot()
            await restored.verify()
        chain = await chain_of(journal, session_id)
        full = await read_restored(journal, session_id, use_checkpoints=False)
        fast = await read_restored(journal, session_id)
        report = await check(journal, session_id)
    assert report.ok, report.summary()
    assert before >= 2 and len(chain) > before
    # Every image after the first keeps what the chain already holds, also
    # the first one written after the restore: no message is stored twice.
    images = [image for cp in chain for image in cp.loops if image.loop == "main"]
    assert images[0].kept == 0
    assert all(image.kept > 0 for image in images[1:])
    assert sum(len(image.messages) for image in images) == fast.imaged["main"]
    assert fast.imaged["main"] <= len(live.messages)
    assert fast.states == full.states
    assert fast.states["main"].messages == live.messages


async def test_a_restore_without_checkpoints_starts_a_new_chain() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(), checkpoint_every=EVERY) as s:
            await turns(s, 4)
        old_chain = await chain_of(journal, s.id)
        async with Session.restore(
            journal, s.id, definition(), checkpoint_every=EVERY, use_checkpoints=False
        ) as again:
            await turns(again, 4)
        chain = await chain_of(journal, s.id)
        full = await read_restored(journal, s.id, use_checkpoints=False)
        fast = await read_restored(journal, s.id)
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    restart = chain[len(old_chain)]
    assert restart.previous == 0
    assert [image.kept for image in restart.loops] == [0]
    assert fast.checkpoint_seq > 0
    assert fast.states == full.states


async def test_no_checkpoints_when_turned_off() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(), checkpoint_every=None) as s:
            await turns(s, 4)
        assert await journal.checkpoints(s.id) == []
        assert (await read_restored(journal, s.id)).checkpoint_seq == 0


@pytest.mark.parametrize("every", [0, -3, 2.5, "10", True])
async def test_a_bad_interval_is_refused_before_anything_is_written(every: Any) -> None:
    async with open_journal("memory:") as journal:
        with pytest.raises(ValueError, match="checkpoint_every"):
            async with Session.create(journal, definition(), checkpoint_every=every):
                pass
        assert await journal.sessions() == []


async def test_only_the_loops_that_changed_get_a_new_image() -> None:
    # The child runs once, early; later checkpoints leave it out, and restore
    # still brings it back from the image that has it.
    child = LoopDefinition(name="helper", model=ScriptedModel([Reply(text="helped")]))
    lead_script = [
        Reply(tool_calls=[ToolCall(name="help", input={"task": "assist"})]),
        Reply(text="done"),
    ] + [Reply(text=f"plain {i}") for i in range(20)]
    lead = LoopDefinition(
        name="lead",
        model=ScriptedModel(lead_script),
        delegates=[Delegate(name="help", description="Help", definition=child)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead, checkpoint_every=EVERY) as s:
            for i in range(8):
                await s.submit(f"go {i}")
                await s.wait_idle()
            await s.verify()
        chain = await chain_of(journal, s.id)
        full = await read_restored(journal, s.id, use_checkpoints=False)
        fast = await read_restored(journal, s.id)
    [child_id] = [loop_id for loop_id in full.states if loop_id != "main"]
    with_child = [cp for cp in chain if any(i.loop == child_id for i in cp.loops)]
    assert with_child and len(with_child) < len(chain)
    assert all(any(i.loop == "main" for i in cp.loops) for cp in chain)
    assert fast.checkpoint_seq > 0
    assert fast.states == full.states


async def test_an_unusable_checkpoint_means_a_full_fold() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(), checkpoint_every=None) as s:
            await turns(s, 2)
        full = await read_restored(journal, s.id, use_checkpoints=False)
        lease = await journal.open_session(s.id)
        head = lease.head
        bogus = SessionCheckpoint(
            previous=0, loops=(LoopImage(loop="main", state=b"not a state", kept=3),)
        )
        await journal.append(
            lease, [Draft(id="cp_bad", loop=CHECKPOINT_STREAM, event=bogus)], expected_seq=head
        )
        restored = await read_restored(journal, s.id)
        chain = await journal.checkpoints(s.id)
    assert restored.checkpoint_seq == 0
    assert restored.states == full.states
    # What restore logged as checkpoint_unusable before folding everything:
    with pytest.raises(InvalidCheckpointError, match="keeps 3 messages"):
        states_from(chain)


def compacting() -> LoopDefinition:
    return LoopDefinition(
        name="counter",
        model=ScriptedModel(counting),
        tools=[count],
        limits=Limits(retained_exchanges=1),
        compactor=TestCompactor(summary()),
    )


async def test_a_compaction_after_the_last_checkpoint_starts_the_next_image_afresh() -> None:
    # Restore continues the chain from its last checkpoint, but the context
    # the tail folded to is a compacted one: the chain's messages are not its
    # prefix, however long it has grown since.
    async with open_journal("memory:") as journal:
        async with Session.create(journal, compacting(), checkpoint_every=EVERY) as s:
            await turns(s, 3)
        # A writer that wrote no checkpoints leaves the compaction in the tail.
        async with Session.restore(journal, s.id, compacting(), checkpoint_every=None) as quiet:
            await quiet.compact()
            await quiet.wait_idle()
            await turns(quiet, 6)
        async with Session.restore(journal, s.id, compacting(), checkpoint_every=EVERY) as again:
            await turns(again, 2)
            live = await again.snapshot()
        full = await read_restored(journal, s.id, use_checkpoints=False)
        fast = await read_restored(journal, s.id)
        report = await check(journal, s.id)
    assert live.compactions == 1
    assert report.ok, report.summary()
    assert fast.checkpoint_seq > 0
    assert fast.states == full.states
    assert fast.states["main"].messages == live.messages


def delegating() -> LoopDefinition:
    child = LoopDefinition(name="helper", model=ScriptedModel([Reply(text="helped")]))
    script = [
        Reply(tool_calls=[ToolCall(name="help", input={"task": "assist"})]),
        Reply(text="done"),
        Reply(text="second"),
        Reply(text="third"),
    ]
    return LoopDefinition(
        name="lead",
        model=ScriptedModel(script),
        delegates=[Delegate(name="help", description="Help", definition=child)],
    )


async def test_the_checkpoint_a_settling_restore_writes_has_every_loop() -> None:
    # The restore settles the lead's open turn before it has made the child
    # loop: a checkpoint written by that commit must still picture the child.
    async with open_journal("memory:") as journal:
        async with Session.create(journal, delegating(), checkpoint_every=None) as s:
            await s.submit("delegate")
            await s.wait_idle()
            await s.submit("again")
            await s.wait_idle()
        history = [r async for r in journal.read(s.id)]
        # The lead's last model call: the child has long finished by then.
        last_call = [
            r for r in history if r.loop == "main" and isinstance(r.event, ModelCallStarted)
        ][-1]
        crashed = await crashed_copy(journal, s.id, last_call.seq)
        async with Session.restore(
            journal, crashed, delegating(), checkpoint_every=EVERY
        ) as restored:
            await restored.verify()
        chain = await chain_of(journal, crashed)
        full = await read_restored(journal, crashed, use_checkpoints=False)
        fast = await read_restored(journal, crashed)
        report = await check(journal, crashed)
    assert len(full.states) == 2
    assert chain and chain[0].previous == 0
    assert report.ok, report.summary()
    assert fast.checkpoint_seq > 0
    assert fast.states == full.states


async def test_a_damaged_checkpoint_index_means_a_full_fold(tmp_path: Path) -> None:
    # The index names a record that is no checkpoint: the records themselves
    # are intact, so restore logs the index as unusable and folds them all.
    path = tmp_path / "journal.db"
    async with open_journal(f"sqlite:///{path}") as journal:
        async with Session.create(journal, definition(), checkpoint_every=EVERY) as s:
            await turns(s, 3)
        head = await journal.head(s.id)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO checkpoints (session, seq) VALUES (?, ?)", (s.id, head))
    conn.close()
    async with open_journal(f"sqlite:///{path}") as journal:
        full = await read_restored(journal, s.id, use_checkpoints=False)
        with structlog.testing.capture_logs() as logs:
            fast = await read_restored(journal, s.id)
        async with Session.restore(journal, s.id, definition(), checkpoint_every=EVERY) as again:
            await turns(again, 1)
            await again.verify()
    assert [entry["event"] for entry in logs] == ["checkpoint_unusable"]
    assert str(head) in logs[0]["error"]
    assert fast.checkpoint_seq == 0
    assert fast.states == full.states


@tool(permission="ask")
async def guarded(ctx: ToolContext, *, path: str) -> str:
    """Needs approval."""
    return f"guarded {path}"


def leading(request: ModelRequest) -> Reply:
    # What the newest user message asks for: a delegation, a guarded call,
    # or a plain answer.
    last = request.messages[-1]
    if any(isinstance(b, ToolResult) for b in last.blocks):
        return Reply(text="ok")
    text = "".join(b.text for b in last.blocks if isinstance(b, Text))
    if text.startswith("delegate"):
        return Reply(tool_calls=[ToolCall(name="help", input={"task": text})])
    if text.startswith("guard"):
        return Reply(tool_calls=[ToolCall(name="guarded", input={"path": text})])
    return Reply(text=f"plain {len(request.messages)}")


def lead_with_everything() -> LoopDefinition:
    helper = LoopDefinition(name="helper", model=ScriptedModel(lambda _: Reply(text="helped")))
    return LoopDefinition(
        name="lead",
        model=ScriptedModel(leading),
        tools=[guarded],
        modes=[Mode(name="quiet", system="say little")],
        delegates=[Delegate(name="help", description="Help", definition=helper)],
        limits=Limits(retained_exchanges=1),
        compactor=TestCompactor(summary()),
    )


async def assert_restores_exactly(journal: Journal, session_id: str) -> Restored:
    full = await read_restored(journal, session_id, use_checkpoints=False)
    fast = await read_restored(journal, session_id)
    report = await check(journal, session_id)
    assert report.ok, report.summary()
    assert fast.checkpoint_seq > 0
    assert fast.states == full.states
    return fast


@pytest.mark.parametrize("every", [1, 3, EVERY])
async def test_several_loops_compactions_gates_and_a_crash_between_checkpoints(
    every: int,
) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead_with_everything(), checkpoint_every=every) as s:
            await s.submit("delegate the first part")
            await s.wait_idle()
            await s.submit("and then")
            await s.wait_idle()
            await s.compact()
            await s.wait_idle()
            await s.change_mode("quiet")
            await s.submit("delegate the second part")
            await s.wait_idle()
            await s.compact()
            await s.wait_idle()
            await s.submit("guard the door")
            await s.wait_idle()
            # Held at the gate: a queued input and steering wait in the state.
            await s.submit("afterwards")
            await s.steer("be brief")
            await s.wait_idle()
            held = await assert_restores_exactly(journal, s.id)
            [gate] = held.states["main"].open_gates
            assert held.states["main"].queued and held.states["main"].steering
            await s.decide(gate.gate_id, allow=True, scope="session")
            await s.wait_idle()
            live = await s.snapshot()
            await s.verify()
        fast = await assert_restores_exactly(journal, s.id)
        assert live.compactions == 2 and live.mode == "quiet" and live.grants == ["guarded"]
        assert len(fast.states) == 3
        assert fast.states["main"].messages == live.messages
        # A crash right after the guarded call started: its outcome is unknown.
        started = next(
            r
            for r in await records(journal, s.id)
            if isinstance(r.event, ToolStarted) and r.event.name == "guarded"
        )
        crashed = await crashed_copy(journal, s.id, started.seq)
        async with Session.restore(
            journal, crashed, lead_with_everything(), checkpoint_every=every
        ) as again:
            await again.wait_idle()
            [unknown] = (await again.snapshot()).unknown_effects
            await assert_restores_exactly(journal, crashed)
            await again.resolve(unknown.execution_id, "it was guarded")
            await again.submit("delegate once more")
            await again.wait_idle()
            await again.verify()
        await assert_restores_exactly(journal, crashed)


async def test_a_negative_kept_is_refused() -> None:
    # A count of messages is never negative; as a slice it would quietly
    # drop messages from the end of the chain's context instead.
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(), checkpoint_every=EVERY) as s:
            await turns(s, 3)
        chain = await journal.checkpoints(s.id)
    last = chain[-1]
    assert isinstance(last.event, SessionCheckpoint)
    [image] = last.event.loops
    assert image.kept > 0
    forged = msgspec.structs.replace(last.event, loops=(msgspec.structs.replace(image, kept=-1),))
    with pytest.raises(InvalidCheckpointError, match="keeps -1 messages"):
        states_from([*chain[:-1], msgspec.structs.replace(last, event=forged)])


class _CountingReads(ForwardingJournal):
    """Counts the records each read yields to restore, and the streams it left out."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.yielded: list[Record] = []
        self.skipped: list[str | None] = []

    async def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        self.skipped.append(skip_stream)
        async for record in self.inner.read(session, after=after, skip_stream=skip_stream):
            self.yielded.append(record)
            yield record


async def test_a_full_fold_does_not_decode_the_checkpoints(journal_url: str) -> None:
    # They change no state: the read verifies them on the chain and leaves
    # them out, and the fold is the same.
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition(), checkpoint_every=EVERY) as s:
            await turns(s, 6)
            live = await s.snapshot()
        assert len(await chain_of(journal, s.id)) >= 2
        counting_reads = _CountingReads(journal)
        full = await read_restored(counting_reads, s.id, use_checkpoints=False)
        every = await records(journal, s.id)
    assert counting_reads.skipped == [CHECKPOINT_STREAM]
    assert counting_reads.yielded == [r for r in every if r.loop != CHECKPOINT_STREAM]
    assert full.head == every[-1].seq
    assert full.states["main"].messages == live.messages


class _ShortTails(_CountingReads):
    """Restore's one read of the checkpoints and tail, with tails of at most
    ``limit`` records (the rest then comes by ``read``), counted."""

    def __init__(self, inner: Journal, limit: int) -> None:
        super().__init__(inner)
        self.limit = limit
        self.calls = 0

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        self.calls += 1
        return await self.inner.read_checkpointed(session, tail_limit=self.limit)


@pytest.mark.parametrize("limit", [1, 3, TAIL_LIMIT])
async def test_restore_folds_every_record_after_the_last_checkpoint(
    journal_url: str, limit: int
) -> None:
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition(), checkpoint_every=EVERY) as s:
            await turns(s, 6)
        # A turn more with no checkpoint: a tail after the last one, however the
        # writer's groups fell against the checkpoints above.
        async with Session.restore(journal, s.id, definition(), checkpoint_every=None) as again:
            await turns(again, 1)
            live = await again.snapshot()
        last = (await journal.checkpoints(s.id))[-1].seq
        every = await records(journal, s.id)
        tail = every[last:]
        assert len(tail) > 3  # records after the last checkpoint: its tail
        reads = _ShortTails(journal, limit)
        fast = await read_restored(reads, s.id)
        full = await read_restored(journal, s.id, use_checkpoints=False)
    assert reads.calls == 1
    assert (fast.checkpoint_seq, fast.head) == (last, every[-1].seq)
    assert fast.states == full.states
    assert fast.states["main"].messages == live.messages
    # What the one read held, and only the rest read after it.
    assert reads.yielded == tail[limit:]


async def test_a_checkpoint_off_the_chain_is_never_restored_from(tmp_path: Path) -> None:
    # Its bytes changed under its digest: restore refuses it and reads every
    # record, which finds the same damage and reports it: nothing is folded
    # from a checkpoint the chain does not vouch for.
    path = tmp_path / "journal.db"
    async with open_journal(f"sqlite:///{path}") as journal:
        async with Session.create(journal, definition(), checkpoint_every=EVERY) as s:
            await turns(s, 3)
        seq = (await journal.checkpoints(s.id))[-1].seq
    forged = encode_event(SessionCheckpoint(previous=0, loops=()))
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE records SET body = ? WHERE session = ? AND seq = ?", (forged, s.id, seq)
        )
    conn.close()
    async with open_journal(f"sqlite:///{path}") as journal:
        with structlog.testing.capture_logs() as logs:
            with pytest.raises(JournalCorruptError) as caught:
                await read_restored(journal, s.id)
    assert (caught.value.session, caught.value.seq) == (s.id, seq)
    assert [entry["event"] for entry in logs] == ["checkpoint_unusable"]
