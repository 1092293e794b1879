"""Token budgets (``Limits.max_turn_tokens``, ``max_session_tokens``): a turn
stops before the model call past its budget, a session past its budget refuses
input, and a delegate's child draws from its parent's budget."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.content import Text, ToolResult, Usage
from journal.events import (
    ChildFinished,
    ChildStarted,
    InputQueued,
    Notice,
    TurnEnded,
    TurnRejected,
)
from loopruntime import BudgetExhaustedError, Delegate, Limits, LoopDefinition
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.replay import render_transcript
from tests.support.loops import count, events_of, records


@pytest.fixture(params=["memory", "sqlite"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'j.db'}"


def spending(tokens: int, *, text: str = "", calls: int = 0, n: int = 0) -> Reply:
    """A reply whose usage is ``tokens`` (input and output halves), asking for
    ``calls`` calls of ``count`` (else answering ``text``)."""
    usage = Usage(input_tokens=tokens // 2, output_tokens=tokens - tokens // 2)
    tool_calls = [ToolCall(name="count", input={"n": n + i}) for i in range(calls)]
    return Reply(text=text, tool_calls=tool_calls, usage=usage)


@pytest.mark.parametrize("field", ["max_turn_tokens", "max_session_tokens"])
def test_a_token_budget_is_checked_when_made(field: str) -> None:
    for bad in (0, -5):
        with pytest.raises(ValueError, match=f"Limits.{field} must be 1 or more"):
            Limits(**{field: bad})
    with pytest.raises(TypeError, match=f"Limits.{field} must be an int"):
        Limits(**{field: 1.5})
    assert getattr(Limits(), field) is None
    assert getattr(Limits(**{field: 1}), field) == 1


def test_every_token_the_provider_reports_counts_once() -> None:
    from loopruntime.state import tokens_of

    usage = Usage(
        input_tokens=1, output_tokens=20, cache_read_tokens=300, cache_creation_tokens=4000
    )
    assert tokens_of(usage) == 4321
    assert tokens_of(None) == 0


async def test_a_turn_at_its_budget_makes_no_further_model_call(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel(
        [
            spending(600, calls=1),
            spending(600, calls=1, n=1),
            spending(50, text="done"),
        ]
    )
    definition = LoopDefinition(
        name="budgeted", model=model, tools=[count], limits=Limits(max_turn_tokens=1000)
    )
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("count twice")
            await s.wait_idle()
            state = await s.snapshot()
            assert s.tokens_used() == 1200
            assert len(model.requests) == 2
            # The next turn has a budget of its own, and the model reads the notice.
            await s.submit("go on")
            await s.wait_idle()
            after = await s.snapshot()
            await s.verify()
        ended = await events_of(journal, s.id, TurnEnded)
        notices = await events_of(journal, s.id, Notice)
        shown = render_transcript(await records(journal, s.id))
    assert "[budget exhausted: this turn spent 1200 tokens" in shown
    assert [(e.outcome, e.code) for e in ended] == [
        ("limit", "budget_exhausted"),
        ("completed", None),
    ]
    assert "1200 tokens of its budget of 1000" in ended[0].detail
    [notice] = [n for n in notices if n.code == "budget_exhausted"]
    assert notice.text.startswith("[budget exhausted: this turn spent 1200 tokens")
    # The context stays a transcript the provider takes: results, then the
    # notice, in the user's turn.
    last = state.messages[-1]
    assert last.role == "user" and last.blocks == (Text(text=notice.text),)
    assert isinstance(state.messages[-2].blocks[0], ToolResult)
    assert state.turn_tokens == 1200 and state.tokens_used == 1200
    third = model.requests[2].messages
    assert [m.role for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert Text(text=notice.text) in third[-1].blocks
    assert after.turn_tokens == 50 and after.tokens_used == 1250


async def test_a_session_past_its_budget_refuses_input(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel([spending(600, text="a costly answer")])
    definition = LoopDefinition(name="budgeted", model=model, limits=Limits(max_session_tokens=500))
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("answer")
            await s.wait_idle()
            with pytest.raises(BudgetExhaustedError, match="600 tokens of its budget of 500") as e:
                await s.submit("once more", key="k-1")
            state = await s.snapshot()
            await s.verify()
        rejected = await events_of(journal, s.id, TurnRejected)
        queued = await events_of(journal, s.id, InputQueued)
    assert (e.value.spent, e.value.budget, e.value.code) == (600, 500, "input.budget_exhausted")
    assert [(r.reason, r.key) for r in rejected] == [("budget_exhausted", "k-1")]
    assert len(queued) == 1 and not state.queued
    assert len(model.requests) == 1


def researcher(replies: list[Reply]) -> LoopDefinition:
    return LoopDefinition(name="researcher", model=ScriptedModel(replies), tools=[count])


def lead(model: ScriptedModel, child: LoopDefinition, *, background: bool) -> LoopDefinition:
    return LoopDefinition(
        name="lead",
        model=model,
        limits=Limits(max_turn_tokens=1000),
        delegates=[
            Delegate(name="research", description="R", definition=child, background=background)
        ],
    )


def research(tokens: int) -> Reply:
    usage = Usage(input_tokens=tokens - 1, output_tokens=1)
    return Reply(tool_calls=[ToolCall(name="research", input={"task": "dig"})], usage=usage)


async def test_a_foreground_child_spends_what_its_parents_turn_has_left(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    child = researcher([spending(500, calls=1), spending(500, calls=1, n=1), spending(9, text="x")])
    model = ScriptedModel([research(300), spending(10, text="never asked for")])
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, lead(model, child, background=False)) as s:
            await s.submit("research")
            await s.wait_idle()
            state = await s.snapshot()
            assert s.tokens_used() == 1300
            await s.verify()
        recs = await records(journal, s.id)
    [started] = [r.event for r in recs if isinstance(r.event, ChildStarted)]
    [finished] = [r.event for r in recs if isinstance(r.event, ChildFinished)]
    ended = {r.loop: r.event for r in recs if isinstance(r.event, TurnEnded)}
    # 1000 - 300: what the parent's turn had left when the child started.
    assert started.provenance.token_allowance == 700
    assert (finished.status, finished.tokens) == ("failed", 1000)
    assert ended[started.child_loop].code == "budget_exhausted"
    assert "of the 700 its parent had left" in ended[started.child_loop].detail
    # The child's spend counts toward the parent's turn: no second parent call.
    assert (ended["main"].outcome, ended["main"].code) == ("limit", "budget_exhausted")
    assert len(model.requests) == 1
    assert (state.turn_tokens, state.tokens_used, state.children_tokens) == (1300, 300, 1000)


async def test_a_background_child_draws_from_the_turn_that_started_it(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    child = researcher(
        [
            Reply(
                tool_calls=[ToolCall(name="count", input={"n": 1})],
                usage=Usage(input_tokens=499, output_tokens=1),
                chunk_delay=5.0,
            ),
            spending(500, calls=1, n=2),
            spending(9, text="x"),
        ]
    )
    model = ScriptedModel(
        [research(300), spending(100, text="started"), spending(100, text="noted")]
    )
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, lead(model, child, background=True)) as s:
            await s.submit("research in the background")
            await s.wait_idle()
            state = await s.snapshot()
            assert s.tokens_used() == 300 + 100 + 1000 + 100
            await s.verify()
        recs = await records(journal, s.id)
    [started] = [r.event for r in recs if isinstance(r.event, ChildStarted)]
    [finished] = [r.event for r in recs if isinstance(r.event, ChildFinished)]
    ended = [r.event for r in recs if r.loop == "main" and isinstance(r.event, TurnEnded)]
    assert started.provenance.token_allowance == 700
    assert finished.tokens == 1000
    # The starting turn had ended: the spend counts toward the session only.
    assert [e.outcome for e in ended] == ["completed", "completed"]
    assert (state.turn_tokens, state.children_tokens, state.tokens_used) == (100, 1000, 500)


async def test_a_child_with_nothing_left_to_draw_is_refused(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    child = researcher([spending(9, text="never run")])
    model = ScriptedModel([research(1000), spending(10, text="never asked for")])
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, lead(model, child, background=True)) as s:
            await s.submit("research")
            await s.wait_idle()
            await s.verify()
        recs = await records(journal, s.id)
    [finished] = [r.event for r in recs if isinstance(r.event, ChildFinished)]
    [ended] = [r.event for r in recs if r.loop == "main" and isinstance(r.event, TurnEnded)]
    assert finished.rejected and "no tokens are left" in finished.output
    assert not any(r.loop != "main" for r in recs)
    assert ended.code == "budget_exhausted" and len(model.requests) == 1


async def test_a_turn_that_reaches_the_session_budget_ends_the_same_way(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel([spending(600, calls=1), spending(600, calls=1, n=1), spending(5)])
    definition = LoopDefinition(
        name="budgeted", model=model, tools=[count], limits=Limits(max_session_tokens=1000)
    )
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("count twice")
            await s.wait_idle()
            with pytest.raises(BudgetExhaustedError):
                await s.submit("and again")
            await s.verify()
        [ended] = await events_of(journal, s.id, TurnEnded)
    assert (ended.outcome, ended.code) == ("limit", "budget_exhausted")
    assert ended.detail.startswith("the session spent 1200 tokens of its budget of 1000")
    assert len(model.requests) == 2
