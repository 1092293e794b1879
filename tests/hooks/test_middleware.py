"""Tool middleware: wrappers around the tool function inside a call whose
``tool.started`` is durable, outside the journal's view but for the result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from journal import open_journal
from journal.content import Text
from journal.events import ToolCompleted, ToolStarted
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.replay import check
from tests.support.loops import events_of, tags

Next = Callable[[], Awaitable[Any]]


def script(*inputs: dict[str, Any]) -> ScriptedModel:
    replies = [Reply(tool_calls=[ToolCall(name="fetch", input=i)]) for i in inputs]
    return ScriptedModel([*replies, Reply(text="done")])


async def test_a_retry_middleware_runs_the_tool_again_inside_one_call() -> None:
    attempts: list[str] = []

    async def retry(ctx: ToolContext, call_next: Next) -> Any:
        for _ in range(2):
            try:
                return await call_next()
            except ConnectionError:
                continue
        return await call_next()

    @tool(permission="allow", middleware=[retry])
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page; the network fails twice."""
        attempts.append(ctx.execution_id)
        if len(attempts) < 3:
            raise ConnectionError("reset by peer")
        return f"page {url}"

    async with open_journal("memory:") as journal:
        d = LoopDefinition(name="mw", model=script({"url": "a"}), tools=[fetch])
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
        [started] = await events_of(journal, s.id, ToolStarted)
        [completed] = await events_of(journal, s.id, ToolCompleted)
        seq = await tags(journal, s.id)
        assert (await check(journal, s.id)).ok
    # Three runs, one call: one start, one result, one execution id.
    assert attempts == [started.execution_id] * 3
    assert seq.count("tool.started") == 1
    assert completed.content == (Text(text="page a"),)
    assert completed.disposition == "succeeded"


async def test_middleware_order_definition_outermost_then_the_tools_own_first_outermost() -> None:
    order: list[str] = []

    def named(name: str) -> Callable[[ToolContext, Next], Awaitable[Any]]:
        async def mw(ctx: ToolContext, call_next: Next) -> Any:
            order.append(f"{name} in")
            value = await call_next()
            order.append(f"{name} out")
            return f"{name}({value})"

        return mw

    started: list[bool] = []

    @tool(permission="allow", middleware=[named("tool1"), named("tool2")])
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page."""
        order.append("tool")
        return url

    async with open_journal("memory:") as journal:

        async def durable(ctx: ToolContext, call_next: Next) -> Any:
            # Middleware runs after the call's start is in the journal.
            started.append(
                any(
                    e.execution_id == ctx.execution_id
                    for e in await events_of(journal, session_id, ToolStarted)
                )
            )
            return await call_next()

        d = LoopDefinition(
            name="mw",
            model=script({"url": "a"}),
            tools=[fetch],
            tool_middleware=[durable, named("def1"), named("def2")],
        )
        async with Session.create(journal, d) as s:
            session_id = s.id
            await s.submit("go")
            await s.wait_idle()
        [completed] = await events_of(journal, s.id, ToolCompleted)
    assert order == [
        "def1 in",
        "def2 in",
        "tool1 in",
        "tool2 in",
        "tool",
        "tool2 out",
        "tool1 out",
        "def2 out",
        "def1 out",
    ]
    assert started == [True]
    assert completed.content == (Text(text="def1(def2(tool1(tool2(a))))"),)


async def test_a_caching_middleware_answers_without_calling_the_tool() -> None:
    cache: dict[str, Any] = {}
    ran: list[str] = []

    async def cached(ctx: ToolContext, call_next: Next) -> Any:
        key = ctx.tool_name + repr(sorted(ctx.input.items()))
        if key not in cache:
            cache[key] = await call_next()
        return cache[key]

    @tool(permission="allow")
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page."""
        ran.append(url)
        return f"page {url}"

    async with open_journal("memory:") as journal:
        d = LoopDefinition(
            name="mw",
            model=script({"url": "a"}, {"url": "a"}, {"url": "b"}),
            tools=[fetch],
            tool_middleware=[cached],
        )
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
        completed = await events_of(journal, s.id, ToolCompleted)
        assert (await check(journal, s.id)).ok
    assert ran == ["a", "b"]
    assert [c.content for c in completed] == [
        (Text(text="page a"),),
        (Text(text="page a"),),
        (Text(text="page b"),),
    ]


async def test_a_middleware_that_raises_fails_the_call_visibly() -> None:
    async def broken(ctx: ToolContext, call_next: Next) -> Any:
        raise RuntimeError("metrics sink full")

    @tool(permission="allow")
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page."""
        return url

    async with open_journal("memory:") as journal:
        d = LoopDefinition(
            name="mw", model=script({"url": "a"}), tools=[fetch], tool_middleware=[broken]
        )
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            state = await s.snapshot()
        [completed] = await events_of(journal, s.id, ToolCompleted)
    assert completed.disposition == "failed"
    assert "RuntimeError: metrics sink full" in completed.content[0].text  # type: ignore[union-attr]
    assert state.last_outcome == "completed"


async def test_a_retried_call_may_ask_the_person_again() -> None:
    """The context stays open across ``call_next`` runs: a question asked by
    the second run opens a gate like the first one's."""

    async def twice(ctx: ToolContext, call_next: Next) -> Any:
        first = await call_next()
        return f"{first} / {await call_next()}"

    @tool(permission="allow")
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page after asking."""
        return await ctx.ask_user(f"read {url}?")

    async with open_journal("memory:") as journal:
        d = LoopDefinition(
            name="mw", model=script({"url": "a"}), tools=[fetch], tool_middleware=[twice]
        )
        async with Session.create(journal, d) as s:
            await s.submit("go")
            for answer in ("yes", "sure"):
                await s.wait_idle()
                [gate] = (await s.snapshot()).gates
                await s.answer(gate, answer)
            await s.wait_idle()
        [completed] = await events_of(journal, s.id, ToolCompleted)
        assert (await check(journal, s.id)).ok
    assert completed.content == (Text(text="yes / sure"),)
