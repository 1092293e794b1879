"""The unified model of the runtime's newer records, from journals the runtime
wrote: direct results are the run's answer (``ends_with`` each tool step,
exactly), a tool's progress belongs to its one step, and a token budget shows
as its notice, the context it injected, the submit it refused, and a child's
allowance and spend."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio

from journal import Record, open_journal
from journal.content import Usage
from journal.events import ChildFinished, ChildStarted, ToolProgress, TurnEnded, TurnRejected
from loopruntime import (
    BudgetExhaustedError,
    Delegate,
    Limits,
    LoopDefinition,
    ToolContext,
    tool,
)
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.notices import BUDGET_EXHAUSTED
from session import Session
from session.replay import build_unified, unified_json
from session.replay.unified import counts_as_agent_output
from session.replay.unified_facts import BUDGET_CODE
from tests.replay.bad import opening
from tests.replay.test_unified import assert_well_formed, kinds, rels, session_of
from tests.support.loops import records

Doc = dict[str, Any]


def document(session_id: str, recs: list[Record], **kw: Any) -> Doc:
    doc: Doc = json.loads(unified_json(build_unified(session_id, recs, **kw)))
    assert_well_formed(doc)
    return doc


async def session_records(definition: LoopDefinition, *inputs: str) -> tuple[str, list[Record]]:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            for text in inputs:
                await s.submit(text)
                await s.wait_idle()
        return s.id, await records(journal, s.id)


def spending(tokens: int, **reply: Any) -> Reply:
    return Reply(usage=Usage(input_tokens=tokens // 2, output_tokens=tokens - tokens // 2), **reply)


# -- direct results -------------------------------------------------------------


@tool(permission="allow", direct=True)
async def lookup(ctx: ToolContext, *, order: str) -> str:
    """Looks an order up; its answer goes straight to the user."""
    return f"order {order}: shipped"


class Shipment(msgspec.Struct):
    order: str
    status: str


def looking_up() -> Reply:
    return Reply(
        text="let me look",
        tool_calls=[
            ToolCall(name="lookup", input={"order": "1"}),
            ToolCall(name="lookup", input={"order": "2"}),
        ],
    )


async def test_direct_results_are_the_runs_answer(autojump_clock: trio.abc.Clock) -> None:
    orders = LoopDefinition(name="orders", model=ScriptedModel([looking_up()]), tools=[lookup])
    session_id, recs = await session_records(orders, "where are my orders?")
    [ended] = [r.event for r in recs if isinstance(r.event, TurnEnded)]
    doc = document(session_id, recs)
    [run] = kinds(doc, "run")
    steps = kinds(doc, "tool")
    assert [s["text"] for s in steps] == ["order 1: shipped", "order 2: shipped"]
    assert (
        run["attrs"]["direct"] == list(ended.direct) == [s["attrs"]["tool_use_id"] for s in steps]
    )
    # The answer is the tool steps, each by the tool_use id turn.ended names.
    assert rels(doc, "ends_with") == {(run["id"], s["id"], "exact_unique") for s in steps}
    vias = [r["via"] for r in doc["relations"] if r["type"] == "ends_with"]
    assert vias == [[use] for use in ended.direct]
    # The words the reply said before its calls are the agent's, not the answer;
    # and no model call came after the results.
    [said] = kinds(doc, "message.assistant")
    assert said["text"] == "let me look"
    assert len(kinds(doc, "llm.call")) == 1
    assert not any(r["to"] == said["id"] for r in doc["relations"] if r["type"] == "ends_with")
    assert not any(counts_as_agent_output(s["kind"]) for s in steps)


async def test_direct_results_that_do_not_fit_are_no_answer(
    autojump_clock: trio.abc.Clock,
) -> None:
    typed = LoopDefinition(
        name="orders", model=ScriptedModel([looking_up()]), tools=[lookup], output=Shipment
    )
    session_id, recs = await session_records(typed, "where?")
    doc = document(session_id, recs)
    [run] = kinds(doc, "run")
    assert run["attrs"]["outcome"] == "invalid_output"
    assert run["attrs"]["code"] == "output.direct_invalid"
    assert len(run["attrs"]["direct"]) == 2
    assert rels(doc, "ends_with") == set()


async def test_an_ordinary_run_names_no_direct_answer(autojump_clock: trio.abc.Clock) -> None:
    plain = LoopDefinition(name="plain", model=ScriptedModel([Reply(text="hi")]))
    session_id, recs = await session_records(plain, "hello")
    doc = document(session_id, recs)
    [run] = kinds(doc, "run")
    assert "direct" not in run["attrs"]
    assert rels(doc, "ends_with") == set()


async def test_a_direct_answer_the_journal_does_not_show_is_unresolved() -> None:
    """A turn.ended naming a use no record shows (a damaged journal): the
    answer points at an unavailable stand-in, never at a guess."""
    recs = await session_of(
        ("main", [*opening(), TurnEnded(turn=1, outcome="completed", direct=("tu_gone",))])
    )
    doc = document("ses_bad", recs)
    [run] = kinds(doc, "run")
    [stand_in] = [n for n in kinds(doc, "tool") if n["attrs"]["tool_use_id"] == "tu_gone"]
    assert stand_in["claim"] == "unavailable" and stand_in["content"] == "unavailable"
    assert stand_in["parent"] == run["id"]
    assert rels(doc, "ends_with") == {(run["id"], stand_in["id"], "unresolved")}


# -- tool progress --------------------------------------------------------------


@tool(permission="allow")
async def crawl(ctx: ToolContext, *, pages: int) -> str:
    """Crawls pages, saying how far it got after each."""
    for i in range(pages):
        await trio.sleep(1)
        ctx.progress(f"page {i + 1} of {pages}", (i + 1) / pages)
    return f"crawled {pages}"


async def crawled() -> tuple[str, list[Record]]:
    crawler = LoopDefinition(
        name="crawler",
        model=ScriptedModel(
            [Reply(tool_calls=[ToolCall(name="crawl", input={"pages": 3})]), Reply(text="done")]
        ),
        tools=[crawl],
    )
    return await session_records(crawler, "crawl")


async def test_progress_is_part_of_the_one_tool_step(autojump_clock: trio.abc.Clock) -> None:
    session_id, recs = await crawled()
    reports = [(r.seq, r.event) for r in recs if isinstance(r.event, ToolProgress)]
    assert len(reports) == 3
    doc = document(session_id, recs)
    [step] = kinds(doc, "tool")
    assert step["text"] == "crawled 3"
    assert {seq for seq, _ in reports} <= set(step["seqs"])
    assert step["attrs"]["progress"] == [
        {
            "seq": seq,
            "fraction": report.fraction,
            "coalesced": report.coalesced,
            "content": "available",
            "text": report.message,
            "size": len(report.message),
        }
        for seq, report in reports
    ]
    # No other node is made of a progress record: it is not a step of its own.
    for node in doc["nodes"]:
        if node is not step and node["kind"] not in ("stream", "epoch", "talk", "run", "segment"):
            assert not {seq for seq, _ in reports} & set(node["seqs"]), node
    # The model never reads progress: it is the input of no call.
    assert {r["from"] for r in doc["relations"] if r["type"] == "input_of"} >= {step["id"]}
    [second] = [c for c in kinds(doc, "llm.call") if c["attrs"]["step"] == 1]
    assert second["manifest"]["seqs"] and not {s for s, _ in reports} & set(
        second["manifest"]["seqs"]
    )


async def test_progress_content_is_held_as_the_document_holds_payloads(
    autojump_clock: trio.abc.Clock,
) -> None:
    session_id, recs = await crawled()
    [omitted] = kinds(document(session_id, recs, omit_content=True), "tool")
    assert {(p["content"], p["text"], p["size"]) for p in omitted["attrs"]["progress"]} == {
        ("omitted", "", len("page 1 of 3"))
    }
    [small] = kinds(document(session_id, recs, content_limit=4), "tool")
    assert {p["content"] for p in small["attrs"]["progress"]} == {"size_only"}


# -- token budgets --------------------------------------------------------------


@tool(permission="allow")
async def count(ctx: ToolContext, *, n: int) -> str:
    """Counts."""
    return str(n)


async def test_a_budget_ends_a_turn_with_a_notice_and_injects_its_words(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel(
        [
            spending(600, tool_calls=[ToolCall(name="count", input={"n": 1})]),
            spending(600, tool_calls=[ToolCall(name="count", input={"n": 2})]),
            spending(50, text="done"),
        ]
    )
    budgeted = LoopDefinition(
        name="budgeted",
        model=model,
        tools=[count],
        limits=Limits(max_turn_tokens=1000, max_session_tokens=1250),
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, budgeted) as s:
            await s.submit("count twice")
            await s.wait_idle()
            await s.submit("go on")
            await s.wait_idle()
            with pytest.raises(BudgetExhaustedError):
                await s.submit("and more")
        recs = await records(journal, s.id)
    assert BUDGET_CODE == BUDGET_EXHAUSTED
    doc = document(s.id, recs)
    first, second = kinds(doc, "run")
    assert (first["attrs"]["outcome"], first["attrs"]["code"]) == ("limit", BUDGET_CODE)
    # For the reader: a notice, never agent output.
    [notice] = [n for n in kinds(doc, "control.notice") if n["attrs"]["code"] == BUDGET_CODE]
    assert notice["parent"] == first["id"]
    assert notice["text"].startswith("[budget exhausted: this turn spent 1200 tokens")
    # For the model: the same words, injected by the runtime, read by the next call.
    [steer] = [n for n in kinds(doc, "context.injection") if n["attrs"]["source"] == "budget"]
    assert steer["text"] == notice["text"] and steer["parent"] == first["id"]
    [next_call] = [c for c in kinds(doc, "llm.call") if c["parent"] == second["id"]]
    assert (steer["id"], next_call["id"], "exact_unique") in rels(doc, "input_of")
    assert steer["id"] in next_call["manifest"]["nodes"]
    said = [n["text"] for n in kinds(doc, "message.external")]
    assert said == ["count twice", "go on"]
    assert not any(notice["text"] in n["text"] for n in kinds(doc, "message.assistant"))
    assert kinds(doc, "message.synthetic") == []
    # The submit the spent session refused: a command that started nothing.
    [rejected] = [(r.seq, r.event) for r in recs if isinstance(r.event, TurnRejected)]
    [refused] = [n for n in kinds(doc, "control.command") if n["attrs"].get("status") == "refused"]
    assert refused["seqs"] == [rejected[0]]
    assert refused["attrs"]["reason"] == "budget_exhausted"
    assert refused["attrs"]["input_id"] == rejected[1].input_id
    assert refused["content"] == "unavailable"  # the refused words are not recorded
    assert kinds(doc, "epoch")[0]["id"] == refused["parent"]
    assert len(kinds(doc, "talk")) == 2
    assert not any(refused["id"] in (r["from"], r["to"]) for r in doc["relations"])


async def test_a_submit_refused_while_a_turn_runs_is_a_command_in_that_run() -> None:
    recs = await session_of(
        ("main", [*opening(), TurnRejected(input_id="in9", reason="queue_full", principal="ann")])
    )
    doc = document("ses_bad", recs)
    [run] = kinds(doc, "run")
    [refused] = kinds(doc, "control.command")
    assert refused["parent"] == run["id"] and refused["seqs"] == [recs[-1].seq]
    assert refused["attrs"] == {
        "record": "turn.rejected",
        "status": "refused",
        "input_id": "in9",
        "reason": "queue_full",
        "principal": "ann",
    }
    assert len(kinds(doc, "talk")) == 1


async def test_a_childs_allowance_and_spend_are_on_its_stream_and_output(
    autojump_clock: trio.abc.Clock,
) -> None:
    helper = LoopDefinition(name="helper", model=ScriptedModel([spending(300, text="X=42")]))
    lead = LoopDefinition(
        name="lead",
        model=ScriptedModel(
            [
                spending(100, tool_calls=[ToolCall(name="research", input={"task": "x"})]),
                spending(100, text="42"),
            ]
        ),
        delegates=[Delegate(name="research", description="Research", definition=helper)],
        limits=Limits(max_turn_tokens=5000),
    )
    session_id, recs = await session_records(lead, "what is X?")
    [started] = [r.event for r in recs if isinstance(r.event, ChildStarted)]
    [finished] = [r.event for r in recs if isinstance(r.event, ChildFinished)]
    allowance = started.provenance.token_allowance
    assert allowance is not None and 0 < allowance < 5000
    assert finished.tokens == 300
    doc = document(session_id, recs)
    [child] = [n for n in kinds(doc, "stream") if n["role"] == "child"]
    [main] = [n for n in kinds(doc, "stream") if n["role"] == "main"]
    assert child["attrs"]["token_allowance"] == allowance
    assert "token_allowance" not in main["attrs"]
    [ack] = kinds(doc, "agent.launch_ack")
    assert ack["attrs"]["token_allowance"] == allowance
    [output] = kinds(doc, "agent.output")
    [note] = kinds(doc, "runtime.notification")
    assert output["attrs"]["tokens"] == note["attrs"]["tokens"] == 300
    # What each call spent stays on the call: the child's 300 are its own call's.
    [child_call] = [
        c for c in kinds(doc, "llm.call") if c["id"].startswith(f"call:{child['attrs']['loop']}:")
    ]
    assert child_call["attrs"]["input_tokens"] + child_call["attrs"]["output_tokens"] == 300
