"""The rules a definition's delegates follow: names the model sees
are unique, a delegate may start its child in a mode and narrow its authority,
and a child refused at its start is a rejected call, not a failed one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from journal import Journal, JournalUnavailableError, open_journal
from journal.content import Text, ToolResult
from journal.events import (
    ChildFinished,
    ChildStarted,
    LoopModeChanged,
    LoopStarted,
    ToolCompleted,
)
from journal.forwarding import ForwardingJournal
from loopruntime import (
    DefinitionError,
    Delegate,
    LoopDefinition,
    Mode,
    NameClashError,
    ToolContext,
    tool,
)
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.notices import DENIED_RESULT
from loopruntime.toolsets import McpServer
from session import Session
from session.replay import check
from tests.support.loops import events_of, records
from tests.toolsets.test_mcp_failures import raw_server

JOURNALS = ["memory", "sqlite"]


@asynccontextmanager
async def journal_of(kind: str, tmp_path: Path) -> AsyncIterator[Journal]:
    url = "memory:" if kind == "memory" else f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as journal:
        yield journal


@tool(permission="allow")
async def search(ctx: ToolContext, query: str) -> str:
    """Look something up."""
    return f"found {query}"


@tool(permission="allow")
async def write(ctx: ToolContext, text: str) -> str:
    """Write a file."""
    return f"wrote {text}"


@tool(permission="ask")
async def publish(ctx: ToolContext, text: str) -> str:
    """Publish a text."""
    return f"published {text}"


def worker(model: ScriptedModel, name: str = "worker", **options: Any) -> LoopDefinition:
    return LoopDefinition(name=name, model=model, **options)


def calling(name: str, task: str = "do it", *, then: str = "done") -> ScriptedModel:
    return ScriptedModel(
        [Reply(tool_calls=[ToolCall(name=name, input={"task": task})]), Reply(text=then)]
    )


def result_texts(request: ModelRequest) -> list[tuple[bool, str]]:
    return [
        (b.is_error, "".join(x.text for x in b.content if isinstance(x, Text)))
        for b in request.messages[-1].blocks
        if isinstance(b, ToolResult)
    ]


# -- 1. names the model sees are unique ------------------------------------------


@tool(permission="allow", name="helper")
async def helper_tool(ctx: ToolContext, note: str = "") -> str:
    """A tool called helper."""
    return "tool"


@tool(permission="allow", name="helper", deferred=True)
async def deferred_helper(ctx: ToolContext, note: str = "") -> str:
    """A deferred tool called helper."""
    return "deferred"


def _helper_delegate(name: str = "helper") -> Delegate:
    child = worker(ScriptedModel([Reply(text="hi")]), name=f"w_{name}")
    return Delegate(name=name, description="Helps.", definition=child)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"tools": [helper_tool], "delegates": [_helper_delegate()]}, "a tool and a delegate"),
        ({"delegates": [_helper_delegate(), _helper_delegate()]}, "a delegate and a delegate"),
        ({"tools": [helper_tool, deferred_helper]}, "a tool and a deferred tool"),
        ({"tools": [helper_tool, helper_tool]}, "a tool and a tool"),
        (
            {"delegates": [_helper_delegate()], "tool_registry": [helper_tool]},
            "a delegate and a registry tool",
        ),
        (
            {"tools": [helper_tool], "tool_registry": [deferred_helper]},
            "a tool and a registry tool",
        ),
    ],
)
def test_a_name_the_model_sees_means_one_thing(options: dict[str, Any], said: str) -> None:
    with pytest.raises(NameClashError) as caught:
        LoopDefinition(name="lead", model=ScriptedModel([]), **options)
    err = caught.value
    assert (err.definition, err.name, err.rule, err.server) == (
        "lead",
        "helper",
        "name_clash",
        None,
    )
    assert err.code == "definition.name_clash"
    assert said in str(err) and "'lead'" in str(err) and "'helper'" in str(err)
    assert isinstance(err, ValueError)  # as the definition's other value checks


@pytest.mark.slow  # a real MCP server process, on the real clock
async def test_an_mcp_listing_whose_names_clash_refuses_the_start(tmp_path: Path) -> None:
    definition = LoopDefinition(
        name="m", model=ScriptedModel([]), toolsets=[raw_server(tmp_path / "calls", "twice")]
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        with pytest.raises(NameClashError) as caught:
            async with Session.create(journal, definition, session_id="s"):
                pass  # pragma: no cover - the start is refused
        assert await records(journal, "s") == []
    err = caught.value
    assert (err.definition, err.name, err.server) == ("m", "raw__ok", "raw")
    assert "MCP server 'raw'" in str(err) and "another of its own tools" in str(err)


@tool(permission="allow", name="raw__ok")
async def registered_ok(ctx: ToolContext) -> str:
    """A registry tool named under the raw server's prefix."""
    return "registered"


@pytest.mark.parametrize(
    ("options", "name", "server", "said"),
    [
        # ``replace_tools`` may offer a registry tool: a listed tool of its
        # name would shadow it.
        ({"tool_registry": [registered_ok]}, "raw__ok", "raw", "start with the prefix 'raw__'"),
        ({"tools": [registered_ok]}, "raw__ok", "raw", "start with the prefix 'raw__'"),
        (
            {"toolsets": [McpServer.stdio("x", name="twin", prefix="raw__")]},
            "raw__",
            "twin",
            "MCP servers 'raw' and 'twin' would give clashing tool names",
        ),
    ],
)
def test_names_under_a_servers_prefix_are_refused_when_made(
    tmp_path: Path, options: dict[str, Any], name: str, server: str, said: str
) -> None:
    raw = raw_server(tmp_path / "calls")
    options = {**options, "toolsets": [raw, *options.get("toolsets", [])]}
    with pytest.raises(NameClashError) as caught:
        LoopDefinition(name="m", model=ScriptedModel([]), **options)
    err = caught.value
    assert (err.definition, err.name, err.server, err.rule) == ("m", name, server, "name_clash")
    assert said in str(err) and "'m'" in str(err)


def test_a_tool_may_be_listed_and_registered_as_itself() -> None:
    definition = LoopDefinition(
        name="lead", model=ScriptedModel([]), tools=[helper_tool], tool_registry=[helper_tool]
    )
    assert [t.name for t in definition.all_tools()] == ["helper"]


# -- 4. a delegate starts its child in a mode --------------------------------------


def _planner(model: ScriptedModel) -> LoopDefinition:
    return worker(
        model,
        system="Do the work.",
        tools=[search, write],
        modes=[Mode(name="plan", system="Only plan.", tools=["search"])],
    )


def test_a_delegate_naming_an_unknown_mode_is_refused() -> None:
    with pytest.raises(DefinitionError) as caught:
        Delegate(
            name="plan", description="Plans.", definition=_planner(ScriptedModel([])), mode="draft"
        )
    err = caught.value
    assert (err.definition, err.name, err.rule) == ("worker", "draft", "delegate_mode_unknown")
    assert "delegate 'plan'" in str(err) and "modes: plan" in str(err)


@pytest.mark.parametrize("kind", JOURNALS)
async def test_a_delegate_starts_its_child_in_its_mode(kind: str, tmp_path: Path) -> None:
    child_model = ScriptedModel([Reply(text="the plan")])
    delegate = Delegate(
        name="plan", description="Plans.", definition=_planner(child_model), mode="plan"
    )
    lead = LoopDefinition(name="lead", model=calling("plan"), delegates=[delegate])
    async with journal_of(kind, tmp_path) as journal:
        async with Session.create(journal, lead, session_id="s") as s:
            await s.submit("plan it")
            await s.wait_idle()
            [child_id] = (await s.snapshot()).children
        # Born in the mode: its first record names it, and no mode change follows.
        child_records = [r.event for r in await records(journal, "s") if r.loop == child_id]
        assert isinstance(child_records[0], LoopStarted) and child_records[0].mode == "plan"
        assert not any(isinstance(e, LoopModeChanged) for e in child_records)
        [request] = child_model.requests
        assert request.system == "Only plan."
        assert [t.name for t in request.tools] == ["search"]
        async with Session.restore(journal, "s", lead) as s:
            # The child settled and stopped; its restored state is the fold.
            assert s.loops[child_id].state.mode == "plan"
            assert s.loops[child_id].resolved().system == "Only plan."
            await s.verify()


# -- 6. children get attenuated authority --------------------------------------------


@pytest.mark.parametrize(
    ("options", "name", "said"),
    [
        ({"tools": ["search", "delete"]}, "delete", "does not have"),
        ({"permissions": {"publish": "allow"}}, "publish", "where the definition says 'ask'"),
        ({"permissions": {"nothing": "deny"}}, "nothing", "has no tool of"),
        (
            {"tools": ["search"], "permissions": {"write": "deny"}},
            "write",
            "a tool its tools= leaves out",
        ),
    ],
)
def test_a_delegate_never_widens_its_childs_authority(
    options: dict[str, Any], name: str, said: str
) -> None:
    child = worker(ScriptedModel([]), tools=[search, write, publish])
    with pytest.raises(DefinitionError) as caught:
        Delegate(name="narrow", description="Narrow.", definition=child, **options)
    err = caught.value
    assert (err.definition, err.name, err.rule) == ("worker", name, "capabilities_widened")
    assert err.code == "definition.capabilities_widened"
    assert said in str(err) and "delegate 'narrow'" in str(err)


@pytest.mark.parametrize("kind", JOURNALS)
async def test_a_delegate_narrows_its_childs_tools_and_permissions(
    kind: str, tmp_path: Path
) -> None:
    child_model = ScriptedModel(
        [
            Reply(
                tool_calls=[
                    ToolCall(name="search", input={"query": "x"}),
                    ToolCall(name="write", input={"text": "y"}),
                ]
            ),
            Reply(text="searched"),
        ]
    )
    child = worker(child_model, tools=[search, write, publish])
    delegate = Delegate(
        name="narrow",
        description="Narrow.",
        definition=child,
        tools=["search", "write"],
        permissions={"write": "deny"},
    )
    assert delegate.child.name == "worker[narrow]"
    assert child.permissions == {}  # the definition itself is unchanged
    lead = LoopDefinition(name="lead", model=calling("narrow"), delegates=[delegate])
    async with journal_of(kind, tmp_path) as journal:
        async with Session.create(journal, lead, session_id="s") as s:
            await s.submit("go")
            await s.wait_idle()
            [child_id] = (await s.snapshot()).children
        assert [t.name for t in child_model.requests[0].tools] == ["search", "write"]
        assert result_texts(child_model.requests[1]) == [
            (False, "found x"),
            (True, DENIED_RESULT),
        ]
        # The narrowing is recorded: the child runs the narrowed definition by
        # its own name, and a restore finds that same child again.
        [started] = [r.event for r in await records(journal, "s") if r.loop == child_id][:1]
        assert isinstance(started, LoopStarted) and started.definition == "worker[narrow]"
        async with Session.restore(journal, "s", lead) as s:
            assert s.loops[child_id].definition is delegate.child
            assert [t.name for t in s.loops[child_id].resolved().tools] == ["search", "write"]
            await s.verify()
        report = await check(journal, "s")
        assert report.ok, report.summary()


@pytest.mark.parametrize("kind", JOURNALS)
async def test_a_child_started_before_its_delegate_narrowed_it_keeps_its_definition(
    kind: str, tmp_path: Path
) -> None:
    wide = Delegate(
        name="narrow",
        description="Narrow.",
        definition=worker(ScriptedModel([Reply(text="done")]), tools=[search, write]),
    )
    lead = LoopDefinition(name="lead", model=calling("narrow"), delegates=[wide])
    async with journal_of(kind, tmp_path) as journal:
        async with Session.create(journal, lead, session_id="s") as s:
            await s.submit("go")
            await s.wait_idle()
            [child_id] = (await s.snapshot()).children
        narrowed = Delegate(
            name="narrow",
            description="Narrow.",
            definition=worker(ScriptedModel([]), tools=[search, write]),
            tools=["search"],
        )
        later = LoopDefinition(name="lead", model=ScriptedModel([]), delegates=[narrowed])
        async with Session.restore(journal, "s", later) as s:
            # Its records name "worker": restore finds the definition it narrows.
            assert s.loops[child_id].definition is narrowed.definition
            await s.verify()


def test_a_delegate_keeps_an_mcp_server_by_its_name() -> None:
    from loopruntime.toolsets import McpServer

    git = McpServer.stdio("git-mcp", name="git", permission="ask")
    crm = McpServer.stdio("crm-mcp", name="crm", permission="allow")
    child = worker(ScriptedModel([]), tools=[search], toolsets=[git, crm])
    delegate = Delegate(
        name="narrow",
        description="Narrow.",
        definition=child,
        tools=["git"],
        permissions={"git__status": "deny"},
    )
    assert delegate.child.toolsets == [git] and delegate.child.tools == []
    assert delegate.child.permissions == {"git__status": "deny"}
    with pytest.raises(DefinitionError) as caught:
        Delegate(
            name="narrow",
            description="Narrow.",
            definition=child,
            permissions={"git__push": "allow"},  # the server's tools ask
        )
    assert (caught.value.name, caught.value.rule) == ("git__push", "capabilities_widened")


def test_a_function_policy_is_combined_never_widened() -> None:
    child = worker(ScriptedModel([]), tools=[publish])
    delegate = Delegate(
        name="narrow",
        description="Narrow.",
        definition=child,
        permissions={"publish": lambda name, raw: "allow"},
    )
    policy = delegate.child.permissions["publish"]
    assert callable(policy) and policy("publish", {}) == "ask"  # the definition's ask stays


# -- 7. a rejected delegate start ------------------------------------------------------


@pytest.mark.slow  # a real MCP server process, on the real clock
@pytest.mark.parametrize("kind", JOURNALS)
async def test_a_refused_child_start_is_a_rejected_result(kind: str, tmp_path: Path) -> None:
    broken = worker(
        ScriptedModel([]), name="broken", toolsets=[raw_server(tmp_path / "calls", "twice")]
    )
    sound = worker(ScriptedModel([Reply(text="all fine")]), name="sound")
    lead_model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="first", input={"task": "go"})]),
            Reply(tool_calls=[ToolCall(name="second", input={"task": "go"})]),
            Reply(text="done by the second"),
        ]
    )
    lead = LoopDefinition(
        name="lead",
        model=lead_model,
        delegates=[
            Delegate(name="first", description="Broken.", definition=broken),
            Delegate(name="second", description="Sound.", definition=sound),
        ],
    )
    async with journal_of(kind, tmp_path) as journal:
        async with Session.create(journal, lead, session_id="s") as s:
            await s.submit("go")
            await s.wait_idle()
            state = await s.snapshot()
            assert len(s.loops) == 2  # the refused child left no loop behind
        [rejected, ran] = await events_of(journal, "s", ToolCompleted)
        assert (rejected.disposition, ran.disposition) == ("rejected", "succeeded")
        [(is_error, text)] = result_texts(lead_model.requests[1])
        assert is_error and text.startswith("[rejected: delegate first could not start")
        assert "MCP server 'raw'" in text
        first, second = await events_of(journal, "s", ChildFinished)
        assert first.rejected and first.status == "failed" and not second.rejected
        statuses = sorted(c.status for c in state.children.values())
        assert statuses == ["completed", "rejected"]
        assert state.messages[-1].blocks[-1].text == "done by the second"
        report = await check(journal, "s")
        assert report.ok, report.summary()
        async with Session.restore(journal, "s", lead) as s:
            await s.verify()


class _DiesAtTheRejection(ForwardingJournal):
    """A journal that fails (like a crash) on the append carrying the rejected
    call's ``tool.completed``: the child's refusal is durable, the call's
    result is not."""

    async def append(
        self, lease: Any, drafts: Any, *, expected_seq: int, consumes: Any = ()
    ) -> Any:
        if any(
            isinstance(d.event, ToolCompleted) and d.event.disposition == "rejected" for d in drafts
        ):
            raise JournalUnavailableError("the process died here")
        return await self.inner.append(lease, drafts, expected_seq=expected_seq, consumes=consumes)


@pytest.mark.slow  # a real MCP server process, on the real clock
@pytest.mark.parametrize("kind", JOURNALS)
async def test_a_rejected_call_cut_by_a_crash_stays_rejected(kind: str, tmp_path: Path) -> None:
    def lead(replies: list[Reply]) -> LoopDefinition:
        broken = worker(
            ScriptedModel([]), name="broken", toolsets=[raw_server(tmp_path / "calls", "twice")]
        )
        return LoopDefinition(
            name="lead",
            model=ScriptedModel(replies),
            delegates=[Delegate(name="first", description="Broken.", definition=broken)],
        )

    async with journal_of(kind, tmp_path) as inner:
        with pytest.raises(JournalUnavailableError):
            async with Session.create(
                _DiesAtTheRejection(inner),
                lead([Reply(tool_calls=[ToolCall(name="first", input={"task": "go"})])]),
                session_id="s",
            ) as s:
                await s.submit("go")
                await s.wait_idle()
        [refused] = await events_of(inner, "s", ChildFinished)
        assert refused.rejected and not await events_of(inner, "s", ToolCompleted)
        restored = lead([Reply(text="no worker could start")])
        async with Session.restore(inner, "s", restored) as s:
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        # Re-entered, the call said "rejected" again and started no child.
        [completed] = await events_of(inner, "s", ToolCompleted)
        assert completed.disposition == "rejected"
        assert len(await events_of(inner, "s", ChildStarted)) == 1
        assert [c.status for c in state.children.values()] == ["rejected"]
        assert state.messages[-1].blocks[-1].text == "no worker could start"
