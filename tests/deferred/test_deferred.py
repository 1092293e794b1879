"""Deferred tools: names only until loaded, load_tools, restore and compaction keep the load."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import open_journal
from journal.content import Text, ToolResult
from journal.events import ToolCompleted, ToolsLoaded
from loopruntime import Limits, LoopDefinition, ToolContext, tool
from loopruntime.deferred import LOAD_TOOLS
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.toolsets import McpServer
from session import Session
from session.replay import check, render_transcript
from tests.compaction.support import TestCompactor, summary
from tests.support.loops import events_of, records


@tool(permission="allow")
async def weather(ctx: ToolContext, *, city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


@tool(permission="allow", deferred=True)
async def invoice(ctx: ToolContext, *, number: int) -> str:
    """Find an invoice by number.

    Long details the model only needs once it uses the tool."""
    return f"invoice {number}: paid"


@tool(permission="allow")
async def refund(ctx: ToolContext, *, number: int) -> str:
    """Refund an invoice."""
    return f"refunded {number}"


def call(name: str, **fields: object) -> Reply:
    return Reply(tool_calls=[ToolCall(name=name, input=dict(fields))])


def offered(model: ScriptedModel, index: int) -> list[str]:
    return [t.name for t in model.requests[index].tools]


def results(request_messages: object) -> list[str]:
    return [
        b.text
        for m in request_messages  # type: ignore[attr-defined]
        for r in m.blocks
        if isinstance(r, ToolResult)
        for b in r.content
        if isinstance(b, Text)
    ]


def definition(model: ScriptedModel, **extra: object) -> LoopDefinition:
    return LoopDefinition(
        name="billing",
        model=model,
        tools=[weather, invoice, refund],
        deferred_tools=["refund"],
        **extra,  # type: ignore[arg-type]
    )


async def test_the_model_sees_names_until_it_loads_and_a_call_before_is_an_error(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [
            call("invoice", number=7),  # not loaded: refused, nothing runs
            call(LOAD_TOOLS, names=["invoice"]),
            call("invoice", number=7),
            Reply(text="invoice 7 is paid"),
        ]
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition(model), session_id="s") as s:
            await s.submit("is invoice 7 paid?")
            await s.wait_idle()
            state = await s.snapshot()
        assert state.loaded == ["invoice"]
        # First request: the plain tool and load_tools; no deferred schema.
        assert offered(model, 0) == ["weather", LOAD_TOOLS]
        (loader,) = [t for t in model.requests[0].tools if t.name == LOAD_TOOLS]
        assert "- invoice: Find an invoice by number." in loader.description
        assert "- refund: Refund an invoice." in loader.description
        assert "Long details" not in loader.description
        # The refused call named load_tools; after loading the schema is sent.
        refused = results(model.requests[1].messages)[0]
        assert "deferred and not loaded" in refused and LOAD_TOOLS in refused
        assert offered(model, 2) == ["weather", "invoice", LOAD_TOOLS]
        assert offered(model, 3) == ["weather", "invoice", LOAD_TOOLS]
        assert results(model.requests[3].messages)[-1] == "invoice 7: paid"
        completed = await events_of(journal, "s", ToolCompleted)
        assert [c.disposition for c in completed] == ["rejected", "succeeded", "succeeded"]
        assert [e.tools for e in await events_of(journal, "s", ToolsLoaded)] == [("invoice",)]
        assert "(tools loaded: invoice)" in render_transcript(await records(journal, "s"))
        assert not (await check(journal, "s")).problems


async def test_loaded_tools_survive_restore(tmp_path: Path) -> None:
    first = ScriptedModel([call(LOAD_TOOLS, names=["refund", "refund"]), Reply(text="ready")])
    url = f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as journal:
        async with Session.create(journal, definition(first), session_id="s") as s:
            await s.submit("get ready to refund")
            await s.wait_idle()
    second = ScriptedModel([call("refund", number=3), Reply(text="done")])
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", definition(second)) as s:
            await s.submit("refund 3")
            await s.wait_idle()
            assert (await s.snapshot()).loaded == ["refund"]
            await s.verify()
        assert offered(second, 0) == ["weather", "refund", LOAD_TOOLS]
        assert results(second.requests[1].messages)[-1] == "refunded 3"
        assert not (await check(journal, "s")).problems


async def test_loaded_tools_survive_compaction() -> None:
    model = ScriptedModel(
        [
            call(LOAD_TOOLS, names=["invoice"]),
            Reply(text="loaded"),
            Reply(text="something else"),
            call("invoice", number=1),
            Reply(text="paid"),
        ]
    )
    d = definition(model, limits=Limits(retained_exchanges=1), compactor=TestCompactor(summary()))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("load invoices")
            await s.wait_idle()
            await s.submit("chat")
            await s.wait_idle()
            await s.compact()
            await s.wait_idle()
            state = await s.snapshot()
            assert state.compactions == 1 and state.loaded == ["invoice"]
            await s.submit("is 1 paid?")
            await s.wait_idle()
        # The summary replaced the load_tools exchange; the load holds.
        assert "invoice" in offered(model, 3)
        assert results(model.requests[4].messages)[-1] == "invoice 1: paid"
        assert (await check(journal, s.id)).ok


async def test_loading_an_unknown_tool_is_a_model_visible_error() -> None:
    model = ScriptedModel([call(LOAD_TOOLS, names=["invoice", "nope"]), Reply(text="hm")])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(model)) as s:
            await s.submit("load")
            await s.wait_idle()
            assert (await s.snapshot()).loaded == []
        text = results(model.requests[1].messages)[0]
        assert "no deferred tool named 'nope'" in text and "invoice, refund" in text
        assert await events_of(journal, s.id, ToolsLoaded) == []


def test_a_definition_without_deferred_tools_offers_no_loader() -> None:
    d = LoopDefinition(name="plain", model=ScriptedModel([]), tools=[weather])
    resolved = d.resolved(None)
    assert [t.name for t in resolved.tools] == ["weather"] and not resolved.deferred


def test_deferring_a_tool_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match=r"names 'nope' in deferred_tools, but has no such tool"):
        LoopDefinition(name="x", model=ScriptedModel([]), tools=[weather], deferred_tools=["nope"])
    with pytest.raises(TypeError, match="deferred_tools takes a collection of tool names"):
        LoopDefinition(name="x", model=ScriptedModel([]), tools=[weather], deferred_tools="weather")


def test_a_tool_named_load_tools_is_refused_beside_deferred_tools() -> None:
    @tool(name=LOAD_TOOLS, permission="allow")
    async def mine(ctx: ToolContext) -> str:
        """Mine."""
        return ""

    with pytest.raises(ValueError, match="the name of the runtime's tool that loads"):
        LoopDefinition(name="x", model=ScriptedModel([]), tools=[mine, invoice])
    # Without deferred tools the name is free.
    LoopDefinition(name="x", model=ScriptedModel([]), tools=[mine])


def test_an_mcp_server_can_defer_its_tools() -> None:
    server = McpServer.http("http://127.0.0.1:9/mcp", name="crm", deferred=True)
    d = LoopDefinition(name="x", model=ScriptedModel([]), tools=[weather], toolsets=[server])
    listed = d.find_tool("crm__lookup")
    assert listed is not None and listed.deferred
    resolved = d.resolved(None, [listed])
    assert resolved.deferred == {"crm__lookup"}
    assert [t.name for t in resolved.tools] == ["weather", "crm__lookup", LOAD_TOOLS]


async def test_deferring_a_tool_in_a_new_deploy_is_recorded_at_restore() -> None:
    from journal.events import LoopReconfigured

    plain = LoopDefinition(name="billing", model=ScriptedModel([]), tools=[weather, refund])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, plain, session_id="s"):
            pass
        deferring = LoopDefinition(
            name="billing",
            model=ScriptedModel([]),
            tools=[weather, refund],
            deferred_tools=["refund"],
        )
        async with Session.restore(journal, "s", deferring):
            pass
        (reconfigured,) = await events_of(journal, "s", LoopReconfigured)
        (change,) = reconfigured.changes
        assert (change.what, change.name) == ("tool_flags", "refund")
        assert "deferred" in change.new and "deferred" not in change.old


@pytest.mark.slow
async def test_a_deferred_mcp_server_shows_names_until_loaded(tmp_path: Path) -> None:
    # A real server over stdio, on trio's real clock (tests/toolsets/test_mcp.py).
    pytest.importorskip("mcp")
    from tests.support.mcp_servers import calls_of, stdio_server

    calls = tmp_path / "calls.jsonl"
    model = ScriptedModel(
        [
            call("srv__add", a=2, b=3),
            call(LOAD_TOOLS, names=["srv__add"]),
            call("srv__add", a=2, b=3),
            Reply(text="5"),
        ]
    )
    d = LoopDefinition(
        name="m",
        model=model,
        tools=[weather],
        toolsets=[stdio_server(calls, permission="allow", deferred=True)],
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("add")
            await s.wait_idle()
        assert offered(model, 0) == ["weather", LOAD_TOOLS]
        (loader,) = [t for t in model.requests[0].tools if t.name == LOAD_TOOLS]
        assert "- srv__add: Add two integers." in loader.description
        assert "srv__echo" in loader.description
        assert "deferred and not loaded" in results(model.requests[1].messages)[0]
        assert offered(model, 2) == ["weather", "srv__add", LOAD_TOOLS]
        assert results(model.requests[3].messages)[-1] == "5"
        assert calls_of(calls) == ["add"]  # the refused call never reached the server
        assert not (await check(journal, "s")).problems
