"""Property: over random sessions (children in the foreground and the
background, compaction, interrupts, gates, failing tools and model calls,
hooks, direct tools, progress reports, token budgets, a crash and its
restore), every unified document is well formed.

Every relation's ends exist; every node but the conversation has exactly one
containment parent and the parents reach it along the spine; ids are unique;
every kind, relation type, quality, claim, content state, role and trigger is
one of the seed's constants; every manifest names nodes of the document; a
run ends only with tool steps (its direct answer), and every progress report
is held in a content state of the seed."""

from __future__ import annotations

import contextlib
import json
import typing
from collections.abc import Callable
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import Record, open_journal
from loopruntime import (
    AddContext,
    BeforeModel,
    BudgetExhaustedError,
    Delegate,
    Limits,
    LoopDefinition,
    Mode,
    ToolContext,
    hook,
    tool,
)
from loopruntime.errors import ModelError
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.replay import build_unified, unified_json
from session.replay.unified import (
    STRUCTURAL_KINDS,
    ClaimState,
    ContentState,
    NodeKind,
    Quality,
    RelationType,
    StreamRole,
    Trigger,
)
from tests.compaction.support import TestCompactor, summary
from tests.loop.test_property import boom, deploy, drive, gate_op, nap, quiz
from tests.support.loops import crashed_copy, records

CONTAINED_BY: dict[str, tuple[str, ...]] = {
    "segment": ("conversation",),
    "session": ("conversation",),
    "stream": ("session",),
    "epoch": ("stream",),
    "talk": ("epoch",),
    "run": ("talk",),
}
"""The spine; a step hangs from a run, or from an epoch when no run holds it."""


def assert_faithful(doc: dict[str, Any]) -> None:
    nodes = {n["id"]: n for n in doc["nodes"]}
    assert len(nodes) == len(doc["nodes"]), "two nodes share an id"
    [root] = [n for n in doc["nodes"] if n["parent"] is None]
    assert root["kind"] == "conversation"
    for node in doc["nodes"]:
        assert node["kind"] in typing.get_args(NodeKind), node
        assert node["claim"] in typing.get_args(ClaimState), node
        assert node["content"] is None or node["content"] in typing.get_args(ContentState)
        if node is not root:
            parent = nodes[node["parent"]]
            allowed = CONTAINED_BY.get(node["kind"], ("run", "epoch"))
            assert parent["kind"] in allowed, (node, parent["kind"])
        seen, up = {node["id"]}, node["parent"]
        while up is not None:
            assert up not in seen, f"a containment cycle through {up}"
            seen.add(up)
            up = nodes[up]["parent"]
        if node["kind"] == "stream":
            assert node["role"] in typing.get_args(StreamRole)
        if node["kind"] == "talk":
            assert node["trigger"] in typing.get_args(Trigger)
        manifest = node["manifest"]
        if manifest is not None:
            assert node["kind"] == "llm.call"
            assert set(manifest["nodes"]) <= set(nodes)
            assert all(0 < seq <= doc["head"] for seq in manifest["seqs"])
            assert manifest["request"] in typing.get_args(ContentState)
        for report in node["attrs"].get("progress", []) if node["kind"] == "tool" else []:
            assert report["content"] in typing.get_args(ContentState), node
            assert report["seq"] in node["seqs"], node
    edges = [(r["type"], r["from"], r["to"]) for r in doc["relations"]]
    assert len(edges) == len(set(edges)), "a relation made twice"
    for rel in doc["relations"]:
        assert rel["type"] in typing.get_args(RelationType), rel
        assert rel["quality"] in typing.get_args(Quality), rel
        assert rel["from"] in nodes and rel["to"] in nodes, rel
        if rel["type"] == "ends_with" and nodes[rel["from"]]["kind"] == "run":
            assert nodes[rel["to"]]["kind"] == "tool", rel
            answer = nodes[rel["to"]]["attrs"]["tool_use_id"]
            assert answer in nodes[rel["from"]]["attrs"]["direct"], rel
    assert {n["kind"] for n in doc["nodes"]} >= {"conversation", "session"}
    assert set(STRUCTURAL_KINDS) <= set(typing.get_args(NodeKind))


@tool(permission="allow", direct=True)
async def lookup(ctx: ToolContext, *, order: str) -> str:
    """Its result is the turn's answer."""
    return f"order {order}: shipped"


@tool(permission="allow")
async def crawl(ctx: ToolContext, *, pages: int) -> str:
    """Says how far it got, faster than the limit now and then."""
    for i in range(pages):
        await trio.sleep(0.3)
        ctx.progress(f"page {i + 1}", (i + 1) / pages)
    return f"crawled {pages}"


def helper_brain(request: ModelRequest) -> Reply:
    if "look it up" in str(request.messages[0]):
        # The foreground helper fails, so its parent sees a failed child.
        return Reply(error=ModelError("the provider gave up", kind="overloaded"))
    return Reply(text="found it", thinking="where to look", chunk_size=4, chunk_delay=0.1)


def lead_brain() -> Callable[[ModelRequest], Reply]:
    """Variety from the conversation's length: delegates in the foreground and
    the background, tools that ask, fail or nap, streams that break, and a
    provider that is busy once in a while (its call retried); by the count of
    calls, a tool that reports progress and direct tools that answer."""
    calls = 0

    def reply(request: ModelRequest) -> Reply:
        nonlocal calls
        calls += 1
        if calls % 5 == 4:
            return Reply(error=ModelError("busy", kind="overloaded", retryable=True))
        n = len(request.messages)
        if calls % 7 == 2:
            return Reply(tool_calls=[ToolCall(name="crawl", input={"pages": 4})])
        if calls % 7 == 6:
            return Reply(
                text="looking",
                tool_calls=[
                    ToolCall(name="lookup", input={"order": str(n)}),
                    ToolCall(name="lookup", input={"order": str(n + 1)}),
                ],
            )
        match n % 8:
            case 1:
                return Reply(
                    text="asking",
                    tool_calls=[
                        ToolCall(name="research", input={"task": "look it up"}),
                        ToolCall(name="watch", input={"task": "keep an eye"}),
                    ],
                )
            case 3:
                return Reply(tool_calls=[ToolCall(name="deploy", input={"target": "a"})])
            case 5:
                return Reply(tool_calls=[ToolCall(name="quiz"), ToolCall(name="boom")])
            case 6:
                return Reply(text="this breaks", chunk_size=3, chunk_delay=0.1, fail_after_chunks=1)
            case 7:
                return Reply(tool_calls=[ToolCall(name="nap", input={"seconds": 0.5})])

            case _:
                return Reply(text="fine " * (n % 3 + 1), chunk_size=3, chunk_delay=0.1)

    return reply


@hook("before_model")
async def remind(call: BeforeModel) -> AddContext | None:
    return AddContext("keep it short") if call.step == 1 else None


Budgets = tuple[int | None, int | None]
"""(max_turn_tokens, max_session_tokens) of the lead loop."""

budgets = st.tuples(st.sampled_from([None, 60, 400]), st.sampled_from([None, 150]))


def lead(budget: Budgets = (None, None)) -> LoopDefinition:
    helper = LoopDefinition(name="helper", model=ScriptedModel(helper_brain))
    return LoopDefinition(
        name="lead",
        model=ScriptedModel(lead_brain()),
        tools=[nap, deploy, quiz, boom, lookup, crawl],
        hooks=[remind],
        delegates=[
            Delegate(name="research", description="Looks up", definition=helper),
            Delegate(name="watch", description="Watches", definition=helper, background=True),
        ],
        modes=[Mode(name="quiet", tools=["nap"])],
        compactor=TestCompactor(summary(), delay=0.5),
        limits=Limits(
            compact_at=None,
            retained_exchanges=1,
            max_turn_tokens=budget[0],
            max_session_tokens=budget[1],
            max_progress_per_second=2,
        ),
    )


def unified(session_id: str, recs: list[Record], cut: int, omit: bool) -> None:
    for prefix in (recs, recs[:cut]):
        doc = json.loads(
            unified_json(build_unified(session_id, prefix, content_limit=64, omit_content=omit))
        )
        assert_faithful(doc)


async def scenario(
    ops: list[tuple[str, object]], cut: int, crash_at: float, omit: bool, budget: Budgets
) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead(budget), checkpoint_every=9) as s:
            # A session that spent its budget refuses input: the ops end there.
            with contextlib.suppress(BudgetExhaustedError):
                await drive(s, ops, [])
            await s.wait_idle()
        recs = await records(journal, s.id)
        unified(s.id, recs, cut, omit)
        # A crash right after any record, and the restore that settles it.
        copy = await crashed_copy(journal, s.id, max(1, int(len(recs) * crash_at)))
        async with Session.restore(journal, copy, lead(budget), checkpoint_every=9) as s2:
            await s2.wait_idle()
        unified(copy, await records(journal, copy), cut, omit)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(gate_op, max_size=20),
    st.integers(min_value=0, max_value=200),
    st.floats(0.05, 1.0),
    st.booleans(),
    budgets,
)
def test_every_random_session_makes_a_well_formed_document(
    ops: list[tuple[str, object]], cut: int, crash_at: float, omit: bool, budget: Budgets
) -> None:
    trio.run(
        scenario,
        ops,
        cut,
        crash_at,
        omit,
        budget,
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
