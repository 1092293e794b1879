"""Session surface: subscribers, unknown commands, verify."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing

from journal import Record, open_journal
from journal.content import TextDelta
from journal.events import ToolCompleted
from loopruntime import LoopDefinition, Mode, ToolContext, tool
from loopruntime.commands import Reply as CommandReply
from loopruntime.errors import UnknownCommandError
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session, SessionLagError, StreamDelta
from tests.support.loops import crashed_copy, events_of, tags


def chatty() -> LoopDefinition:
    return LoopDefinition(
        name="t", model=ScriptedModel(lambda _r: Reply(text="word " * 20, chunk_size=5))
    )


async def test_subscriber_sees_history_then_live_records_in_order() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, chatty()) as s:
            await s.submit("one")
            await s.wait_idle()
            seen: list[Record] = []
            deltas: list[StreamDelta] = []

            async def follow() -> None:
                async for item in s.subscribe(after=0, deltas=True):
                    if isinstance(item, Record):
                        seen.append(item)
                    else:
                        deltas.append(item)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await trio.testing.wait_all_tasks_blocked()
                await s.submit("two")
                await s.wait_idle()
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
        head = await journal.head(s.id)
    assert [r.seq for r in seen] == list(range(1, head + 1))
    assert deltas and all(d.loop == "main" for d in deltas)
    assert "".join(d.delta.text for d in deltas if isinstance(d.delta, TextDelta)) == "word " * 20


async def test_a_slow_subscriber_gets_a_lag_error_never_a_silent_gap() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, chatty()) as s:
            subscription = s.subscribe(after=0, capacity=4)
            await s.submit("first")
            await s.wait_idle()
            head = await journal.head(s.id)
            got: list[int] = []
            while not got or got[-1] < head:  # caught up with the history
                item = await subscription.__anext__()
                assert isinstance(item, Record)
                got.append(item.seq)
            for i in range(2):  # many more records than the buffer holds
                await s.submit(f"message {i}")
                await s.wait_idle()
            with pytest.raises(SessionLagError) as info:
                async for item in subscription:
                    assert isinstance(item, Record)
                    got.append(item.seq)
            resume_at = info.value.last_seq
            assert got == list(range(1, resume_at + 1))  # nothing skipped before the error
            await s.submit("after the lag")
            await s.wait_idle()
            head = await journal.head(s.id)
            rest: list[int] = []
            async for item in s.subscribe(after=resume_at):
                assert isinstance(item, Record)
                rest.append(item.seq)
                if item.seq == head:
                    break
            assert rest == list(range(resume_at + 1, head + 1))  # resumed with no gap


@dataclass(eq=False, kw_only=True)
class Bogus:
    """A command no loop knows, shaped like the ones it does."""

    reply: CommandReply[Any] = field(default_factory=CommandReply)
    cause: str | None = None
    key: str | None = None
    principal: str | None = None


async def test_unknown_command_is_refused_and_commits_nothing() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, chatty()) as s:
            before = await tags(journal, s.id)
            with pytest.raises(UnknownCommandError):
                await s.loops["main"].send(Bogus())  # type: ignore[arg-type]
            assert await tags(journal, s.id) == before
            await s.submit("still works")
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"


async def test_create_refuses_a_session_id_that_has_records() -> None:
    from session import SessionExistsError

    async with open_journal("memory:") as journal:
        async with Session.create(journal, chatty(), session_id="ses_taken") as s:
            await s.submit("hello")
            await s.wait_idle()
        before = await tags(journal, "ses_taken")
        incarnation = [i.incarnation for i in await journal.sessions()]
        with pytest.raises(SessionExistsError, match=r"Session\.restore"):
            async with Session.create(journal, chatty(), session_id="ses_taken"):
                pass
        assert await tags(journal, "ses_taken") == before
        # refused before taking a lease: a live writer would not have been fenced
        assert [i.incarnation for i in await journal.sessions()] == incarnation


async def test_a_replay_safe_call_outlives_a_mode_that_no_longer_offers_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Restore re-runs a replay-safe call started in a mode the loop has left
    since; the resumed turn finishes that call instead of spinning on it."""
    runs: list[str] = []

    @tool(permission="allow", replay_safe=True)
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Fetch a page."""
        runs.append(ctx.execution_id)
        await trio.sleep(10)
        return "the page"

    def definition() -> LoopDefinition:
        script = [Reply(tool_calls=[ToolCall(name="fetch", input={"url": "u"})]), Reply(text="ok")]
        return LoopDefinition(
            name="t",
            model=ScriptedModel(script),
            tools=[fetch],
            modes=[Mode(name="plain", tools=[])],
        )

    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition()) as s:
            await s.submit("go")
            await trio.sleep(1)
            await s.change_mode("plain")
            crash = (await s.snapshot()).last_seq
        copy = await crashed_copy(journal, s.id, crash)
        async with Session.restore(journal, copy, definition()) as restored:
            await restored.wait_idle()
            state = await restored.snapshot()
            await restored.verify()
        [completed, *_] = await events_of(journal, copy, ToolCompleted)
    assert runs == [runs[0], runs[0]]  # the crashed run, then the replay under its id
    assert completed.execution_id == runs[0] and completed.disposition == "succeeded"
    assert state.last_outcome == "completed"
