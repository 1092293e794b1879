"""Session checkpoints: what the writer puts in them, and restore from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from journal import Draft, Journal, open_journal
from journal.events import CHECKPOINT_STREAM, LoopImage, SessionCheckpoint
from loopruntime import Delegate, LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.checkpoints import InvalidCheckpointError, read_restored, states_from
from session.replay import check

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
