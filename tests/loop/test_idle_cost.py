"""What making an idle session costs beyond its own objects: no journal read for an
id the session made itself, no cyclic garbage (which the collector would have to
find by walking every live object, of every session, again and again), and no task
while it is idle (its loop's actor parked as data, woken by its mailbox)."""

from __future__ import annotations

import collections
import gc
import types
import weakref
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog
import trio

from journal import JournalUnavailableError, Record, open_journal
from journal.forwarding import ForwardingJournal
from loopruntime import LoopClosedError, LoopDefinition, ToolContext, tool
from loopruntime.empties import NO_LIST
from loopruntime.host import Snapshot
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.state import LoopState, shed_empty
from loopruntime.toolsets import McpServer
from session import Session, SessionExistsError
from session.embedded.linger import LINGER
from session.embedded.writer import IDLE_EXIT
from tests.support.holdings import holdings, library_tasks
from tests.support.loops import SpawnedTasks


@tool(permission="allow")
async def echo(ctx: ToolContext, *, q: str) -> str:
    """Say it back."""
    return q


def one_step() -> LoopDefinition:
    def script(request: Any) -> Reply:
        if len(request.messages) > 1:
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="echo", input={"q": "x"})])

    return LoopDefinition(name="idle", model=ScriptedModel(script), tools=[echo])


@asynccontextmanager
async def idle_session(definition: LoopDefinition | None = None) -> AsyncIterator[Session]:
    """A session on the memory journal after one turn, its writer and loop
    left idle long enough to have let go of what they hold while working."""
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition or one_step()) as s:
            await s.submit("go")
            await s.wait_idle()
            await trio.sleep(IDLE_EXIT * 2)
            yield s


class CountingHeads(ForwardingJournal):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.heads = 0

    async def head(self, session: str) -> int:
        self.heads += 1
        return await self.inner.head(session)


@contextmanager
def cyclic_garbage() -> Iterator[list[Any]]:
    """Everything the cyclic collector would have freed, kept for inspection."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[Any] = []
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


async def test_a_session_made_with_its_own_id_reads_nothing_first() -> None:
    async with open_journal("memory:") as inner:
        journal = CountingHeads(inner)
        async with Session.create(journal, one_step()) as s:
            await s.submit("go")
            await s.wait_idle()
        assert journal.heads == 0
        # A chosen id is still checked before the lease is taken.
        with pytest.raises(SessionExistsError):
            async with Session.create(journal, one_step(), session_id=s.id):
                pass
        assert journal.heads == 1


async def test_making_idle_sessions_leaves_no_cyclic_garbage(tmp_path: Path) -> None:
    definition = one_step()
    async with open_journal(f"sqlite:///{tmp_path / 'idle.db'}") as journal:
        async with Session.create(journal, definition) as warm:  # one-off costs
            await warm.submit("go")
            await warm.wait_idle()
        async with AsyncExitStack() as stack:
            with cyclic_garbage() as garbage:
                for _ in range(10):
                    s = await stack.enter_async_context(Session.create(journal, definition))
                    await s.submit("go")
                    await s.wait_idle()
            kinds = collections.Counter(type(o).__qualname__ for o in garbage)
    assert not garbage, kinds.most_common(10)


def writer_tasks() -> list[str]:
    return [name for name in library_tasks() if name.endswith("Writer.run")]


async def test_an_idle_session_keeps_no_task(autojump_clock: Any) -> None:
    # A slow reply: the call's start is appended on its own after LINGER,
    # by the writer's task, since no barrier comes to take it.
    slow = LoopDefinition(
        name="slow", model=ScriptedModel([Reply(text="done", chunk_delay=1.0)] * 2)
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, slow) as s:
            await s.submit("go")
            await trio.sleep(0.5)
            assert len(writer_tasks()) == 1
            await s.wait_idle()
            await trio.sleep(IDLE_EXIT * 2)
            # Neither the writer's task nor the loop's actor is left (a parked
            # task, with its nursery and cancel scopes, is several KB)...
            assert not library_tasks()
            # ...and both come back for the next command.
            await s.submit("again")
            await trio.sleep(0.5)
            assert len(writer_tasks()) == 1
            await s.wait_idle()
            await s.verify()
            assert (await s.snapshot()).turn_index == 2


async def test_a_new_session_starts_its_loop_parked_without_a_task() -> None:
    spawned = SpawnedTasks()
    async with open_journal("memory:") as journal:
        trio.lowlevel.add_instrument(spawned)
        try:
            async with Session.create(journal, one_step()) as s:
                # loop.started and loop.configured are durable, committed from
                # the creating task; the loop has no task until a command comes.
                assert [r.event.__struct_config__.tag async for r in journal.read(s.id)] == [
                    "loop.started",
                    "loop.configured",
                ]
                assert not [n for n in spawned.names if "Loop." in n], spawned.names
                assert s.loops["main"].parked
                await s.submit("go")
                await s.wait_idle()
                assert [n for n in spawned.names if "Loop." in n]
                assert (await s.snapshot()).turn_index == 1
                await s.verify()
        finally:
            trio.lowlevel.remove_instrument(spawned)


async def test_a_restored_session_at_rest_starts_its_loop_parked_without_a_task() -> None:
    spawned = SpawnedTasks()
    async with open_journal("memory:") as journal:
        async with Session.create(journal, one_step()) as s:
            await s.submit("go")
            await s.wait_idle()
            sid = s.id
        trio.lowlevel.add_instrument(spawned)
        try:
            async with Session.restore(journal, sid, one_step()) as again:
                # Nothing to resume: the loop has no task until a command comes.
                assert not [n for n in spawned.names if "Loop." in n], spawned.names
                assert again.loops["main"].parked
                await again.submit("go again")
                await again.wait_idle()
                assert [n for n in spawned.names if "Loop." in n]
                assert (await again.snapshot()).turn_index == 2
                await again.verify()
        finally:
            trio.lowlevel.remove_instrument(spawned)


class FailingAppends(ForwardingJournal):
    async def append(self, *args: Any, **kwargs: Any) -> Any:
        raise JournalUnavailableError("the journal's disk went away")


async def test_a_new_loop_whose_start_cannot_commit_fails_create_with_the_journal_error() -> None:
    # The parked start commits from the creating task: its failure still leaves
    # as the journal's own error, not a group, and the session is never entered.
    async with open_journal("memory:") as inner:
        entered: list[Session] = []
        with pytest.raises(JournalUnavailableError, match="disk went away"):
            async with Session.create(FailingAppends(inner), one_step()) as s:
                entered.append(s)
        assert not entered
        (info,) = await inner.sessions()
        assert await inner.head(info.session) == 0


async def test_a_parked_loop_wakes_for_every_kind_of_command(autojump_clock: Any) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, one_step()) as s:
            await s.submit("go")
            await s.wait_idle()
            seen: list[str] = []

            async def watch() -> None:
                async for record in s.subscribe(after=s.head):
                    assert isinstance(record, Record)
                    seen.append(type(record.event).__struct_config__.tag)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                for answer in ("priority", "plain", "input"):
                    await trio.sleep(IDLE_EXIT * 2)
                    assert not library_tasks()  # parked
                    if answer == "priority":
                        assert await s.interrupt() is False  # the priority lane
                    elif answer == "plain":
                        assert (await s.snapshot()).turn_index == 1
                    else:
                        await s.submit("again")
                        await s.wait_idle()
                await trio.sleep(IDLE_EXIT * 2)
                nursery.cancel_scope.cancel()
            # The woken loop's records reached a subscriber as they became durable.
            assert seen.count("turn.ended") == 1 and seen[0] == "input.queued", seen
            assert not library_tasks()
            await s.verify()
        # Leaving the session woke the parked loop once more, to stop it.
        with pytest.raises(LoopClosedError):
            await s.loops["main"].send(Snapshot())


async def test_commands_racing_to_a_parked_loop_start_one_actor(autojump_clock: Any) -> None:
    async with idle_session() as s:
        loop = s.loops["main"]
        actors: list[int] = []
        results: list[str] = []

        async def submit(text: str) -> None:
            results.append(await s.submit(text))
            actors.append(sum(1 for name in library_tasks() if name.endswith("Loop._act")))

        async with trio.open_nursery() as nursery:
            for text in ("one", "two", "three"):
                nursery.start_soon(submit, text)
        await s.wait_idle()
        assert len(results) == 3 and max(actors) == 1
        state = await s.snapshot()
        assert not state.queued and state.turn_index in (2, 3, 4)
        await s.verify()
        await trio.sleep(IDLE_EXIT * 2)
        assert not library_tasks() and loop.quiescent


async def test_a_session_cancelled_while_its_loop_is_parked_still_stops_it(
    autojump_clock: Any,
) -> None:
    async with open_journal("memory:") as journal:
        with trio.CancelScope() as scope:
            async with Session.create(journal, one_step()) as s:
                await s.submit("go")
                await s.wait_idle()
                await trio.sleep(IDLE_EXIT * 2)
                scope.cancel()
                await trio.sleep_forever()
        loop = s.loops["main"]
        with pytest.raises(LoopClosedError):
            await loop.send(Snapshot())
        # Nobody waiting on it is left waiting.
        with trio.fail_after(1):
            await loop.wait_settled()
            await loop.wait_quiescent()


async def test_sessions_of_one_definition_share_its_configuration() -> None:
    definition, other = one_step(), one_step()
    async with open_journal("memory:") as journal:
        async with (
            Session.create(journal, definition) as a,
            Session.create(journal, definition) as b,
            Session.create(journal, other) as c,
        ):
            configs = [s.loops["main"].state.configured for s in (a, b, c)]
            # One immutable object per definition, equal to what each describes.
            assert configs[0] is configs[1] and configs[0] is not configs[2]
            assert configs[0] == configs[2]
            for s in (a, b, c):
                await s.verify()


async def test_sharing_a_configuration_keeps_no_definition_alive() -> None:
    definition = one_step()
    alive = weakref.ref(definition)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("go")
            await s.wait_idle()
            config = s.loops["main"].state.configured
        del s, definition
        # Freed once the session's last pipelined commit has lingered out
        # (the run's linger task holds its writer until then).
        await trio.sleep(LINGER * 10)
        gc.collect()
        assert alive() is None
        # A new definition describes itself again, equal to the first.
        async with Session.create(journal, one_step()) as again:
            assert again.loops["main"].state.configured == config


async def test_a_loop_with_an_mcp_server_keeps_its_task(autojump_clock: Any) -> None:
    # Its connections, made again on demand, live in the loop's nursery: the
    # loop keeps its task even when no connection is open (the server could not
    # be started at all here).
    server = McpServer.stdio("/nonexistent/mcp-server", name="gone", connect_attempts=1)
    definition = LoopDefinition(
        name="m", model=ScriptedModel([Reply(text="fine without it")]), toolsets=[server]
    )
    async with idle_session(definition) as s:
        assert [name.rsplit(".", 1)[-1] for name in library_tasks()] == ["run"]
        await s.submit("again")
        await s.wait_idle()
        assert (await s.snapshot()).turn_index == 2


async def test_an_idle_writer_keeps_no_logger_or_event(autojump_clock: Any) -> None:
    async with idle_session() as s:
        kept = [type(v).__name__ for owner, v in holdings(s) if owner == "Writer" and v is not None]
        assert "Event" not in kept and not any("Logger" in k for k in kept), kept
        # The task, started again, waits on a new event and logs bound to its session.
        await s.submit("again")
        await s.wait_idle()
        assert (await s.snapshot()).turn_index == 2
        [writer] = [v for _, v in holdings(s) if type(v).__name__ == "Writer"]
        assert structlog.get_context(writer.log) == {"session": s.id}


def own_empty_containers(state: LoopState) -> list[str]:
    """The fields of ``state`` holding an empty list or dict of their own (not
    the one every idle state shares)."""
    fresh = LoopState()
    shed_empty(fresh)
    shared = (fresh.queued, fresh.results)
    return [
        name
        for name in LoopState.__struct_fields__
        if isinstance(value := getattr(state, name), list | dict)
        and not value
        and all(value is not s for s in shared)
        and name not in ("keys", "chosen_tools")
    ]


async def test_an_idle_loop_state_holds_no_empty_container_of_its_own(
    autojump_clock: Any,
) -> None:
    async with idle_session() as s:
        state = s.loops["main"].state
        assert not own_empty_containers(state), own_empty_containers(state)
        shared = state.queued
        # Woken, the fold writes into containers of the loop's own: the
        # shared ones stay empty, and the state is the fold of its records.
        await s.submit("again")
        await s.steer("also this")
        await s.wait_idle()
        assert shared == [] and state.results == {} and state.turn_index >= 2
        assert [m.role for m in state.messages][-2:] == ["user", "assistant"]
        await s.verify()  # the state is the fold of its records, restored apart


async def test_an_idle_session_holds_no_empty_set(autojump_clock: Any) -> None:
    # An empty set is several times the size of an empty dict and tracked by
    # the collector; an empty dict used as a set is not tracked.
    async with idle_session() as s:
        owners = ("Session", "Subscriptions", "Writer")
        empty = [
            owner
            for owner, value in holdings(s)
            if owner in owners and isinstance(value, set | frozenset) and not value
        ]
        assert not empty, empty


async def test_an_open_session_keeps_no_suspended_create_frame() -> None:
    def suspended(name: str) -> list[Any]:
        return [
            o
            for o in gc.get_objects()
            if isinstance(o, types.AsyncGeneratorType) and o.ag_code.co_name == name
        ]

    async with open_journal("memory:") as journal:
        async with Session.create(journal, one_step()) as s:
            await s.submit("go")
            await s.wait_idle()
            assert not suspended("create")
            # Nor a running one: the session's nursery is held by a small object.
            assert not suspended("_running")
        # Refused before anything runs.
        with pytest.raises(SessionExistsError):
            async with Session.create(journal, one_step(), session_id=s.id):
                pass
        opening = Session.create(journal, one_step())
        async with opening:
            pass
        with pytest.raises(RuntimeError, match="entered twice"):
            async with opening:
                pass


def own_lists(loop: Any) -> list[str]:
    """The classes of the loop's own objects (itself, its forms) that hold a
    list that is not the shared empty one."""
    return [
        owner
        for owner, value in holdings(loop)
        if owner in ("Loop", "Forms") and isinstance(value, list) and value is not NO_LIST
    ]


async def test_an_idle_loop_holds_no_empty_list_for_compactions_or_held_answers(
    autojump_clock: Any,
) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, one_step()) as s:
            await s.submit("go")
            await s.wait_idle()
            loop = s.loops["main"]
            assert not own_lists(loop), own_lists(loop)
            # A compaction asked for still runs (and leaves nothing pending).
            attempt = await s.compact()
            await s.wait_idle()
            await trio.sleep(1)
            tags = [
                (type(r.event).__struct_config__.tag, getattr(r.event, "attempt_id", None))
                async for r in journal.read(s.id)
            ]
            assert [t for t, a in tags if a == attempt and t.startswith("compaction.")], tags
            assert not own_lists(loop), own_lists(loop)
            await s.verify()


async def test_a_parked_loops_mailbox_holds_no_list_of_its_own(autojump_clock: Any) -> None:
    async with idle_session() as s:
        lanes = [v for owner, v in holdings(s) if owner == "Mailbox" and isinstance(v, list)]
        assert len(lanes) == 2 and all(lane is NO_LIST for lane in lanes)
        # Both lanes take commands again, and the shared list stays empty.
        assert await s.interrupt() is False
        await s.submit("again")
        await s.wait_idle()
        assert (await s.snapshot()).turn_index == 2 and NO_LIST == []


async def test_an_idle_writer_holds_no_queue_of_its_own(autojump_clock: Any) -> None:
    async with idle_session() as s:
        queues = [v for owner, v in holdings(s) if owner == "Writer" and isinstance(v, list)]
        assert len(queues) == 3 and all(q is NO_LIST for q in queues), queues
        await s.submit("again")
        await s.wait_idle()
        assert (await s.snapshot()).turn_index == 2 and NO_LIST == []
        await s.verify()


def test_the_shared_empty_containers_refuse_every_write() -> None:
    # A write that forgot to take a container of its own fails in the one
    # session that made it, instead of showing in every idle one.
    from loopruntime.empties import NO_DICT, NO_LIST

    writes: list[Any] = [
        lambda: NO_LIST.append(1),
        lambda: NO_LIST.extend([1]),
        lambda: NO_LIST.insert(0, 1),
        lambda: NO_LIST.__setitem__(slice(0, 0), [1]),
        lambda: NO_LIST.__iadd__([1]),
        lambda: NO_DICT.__setitem__("k", 1),
        lambda: NO_DICT.update(k=1),
        lambda: NO_DICT.setdefault("k", 1),
        lambda: NO_DICT.__ior__({"k": 1}),
    ]
    for write in writes:
        with pytest.raises(TypeError, match="take one of your own first"):
            write()
    assert NO_LIST == [] and NO_DICT == {}
    assert msgspec.msgpack.encode(NO_LIST) == msgspec.msgpack.encode([])
    # Taking from them is what it is from any empty container.
    assert NO_DICT.pop("k", None) is None
    NO_LIST.clear()
    NO_DICT.clear()
