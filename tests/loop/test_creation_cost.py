"""What each new session repeats that its definition could answer once: the
definition resolved under the choices no server listing or tool choice changes is
made once per definition and shared by every session and turn."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest

from journal import open_journal
from loopruntime import Limits, LoopDefinition, Mode, ModeNotFoundError, ToolContext, tool
from loopruntime.definition import RESOLUTIONS_KEPT
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session


@tool(permission="allow")
async def echo(ctx: ToolContext, *, q: str) -> str:
    """Say it back."""
    return q


@tool(permission="allow")
async def other(ctx: ToolContext, *, q: str) -> str:
    """Another tool."""
    return q


def one_step(**overrides: Any) -> LoopDefinition:
    def script(request: Any) -> Reply:
        if len(request.messages) > 1:
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="echo", input={"q": "x"})])

    fields: dict[str, Any] = {
        "name": "made",
        "model": ScriptedModel(script),
        "tools": [echo, other],
        "modes": [Mode(name="narrow", tools=["echo"], limits=Limits(max_tokens=99))],
    }
    return LoopDefinition(**(fields | overrides))


def test_a_definition_resolves_each_choice_once() -> None:
    d = one_step()
    first = d.resolved(None)
    assert d.resolved(None) is first
    assert d.resolved("narrow") is d.resolved("narrow")
    assert d.resolved("narrow") is not first
    assert [t.name for t in d.resolved("narrow").tools] == ["echo"]
    assert [t.name for t in first.tools] == ["echo", "other"]
    budget = d.resolved(None, max_tokens=7)
    assert budget is d.resolved(None, max_tokens=7) and budget.limits.max_tokens == 7
    assert first.limits.max_tokens != 7  # another choice, its own answer
    assert d.resolved(None, model="made-up").model is first.model


def kept_choices(d: LoopDefinition, tries: int) -> int:
    """How many of ``tries`` new choices ``d`` keeps: a kept one answers with
    the same object when asked again."""
    return sum(
        d.resolved(None, max_tokens=n + 1) is d.resolved(None, max_tokens=n + 1)
        for n in range(tries)
    )


def test_a_listing_or_a_tool_choice_is_resolved_each_time() -> None:
    d = one_step()
    chosen = d.resolved(None, tools=["other"])
    assert [t.name for t in chosen.tools] == ["other"]
    assert d.resolved(None, tools=["other"]) is not chosen
    listed = d.resolved(None, [other])
    assert d.resolved(None, [other]) is not listed


def test_an_unknown_mode_is_refused_every_time_and_nothing_is_kept_for_it() -> None:
    d = one_step()
    for _ in range(2):
        with pytest.raises(ModeNotFoundError):
            d.resolved("nope")
    # Every place is still free for a choice that resolves.
    assert kept_choices(d, RESOLUTIONS_KEPT) == RESOLUTIONS_KEPT


def test_a_definition_keeps_a_bounded_number_of_resolutions() -> None:
    d = one_step()
    answers = [d.resolved(None, max_tokens=n + 1) for n in range(RESOLUTIONS_KEPT + 10)]
    again = [d.resolved(None, max_tokens=n + 1) for n in range(RESOLUTIONS_KEPT + 10)]
    assert [a is b for a, b in zip(answers, again, strict=True)] == [True] * RESOLUTIONS_KEPT + [
        False
    ] * 10
    # Past the bound a choice is resolved each time, to the same answer.
    late = d.resolved(None, max_tokens=RESOLUTIONS_KEPT + 5)
    assert late is not answers[-6] and late == answers[-6]


def test_what_a_definition_kept_does_not_make_it_differ() -> None:
    model = ScriptedModel([])
    a = LoopDefinition(name="same", model=model, tools=[echo])
    b = LoopDefinition(name="same", model=model, tools=[echo])
    a.resolved(None)
    assert a == b
    assert "_resolutions" not in repr(a)
    # A changed copy resolves for itself.
    c = dataclasses.replace(a, tools=[other])
    assert [t.name for t in c.resolved(None).tools] == ["other"]


async def test_sessions_of_one_definition_share_its_resolution() -> None:
    d = one_step()
    seen = []
    async with open_journal("memory:") as journal:
        for _ in range(3):
            async with Session.create(journal, d) as s:
                await s.submit("go")
                await s.wait_idle()
                seen.append(s.loops["main"].resolved())
    assert seen[0] is seen[1] is seen[2]
    # Before its first turn a loop resolves with no model named; after, by the
    # name its records chose: two choices, one answer each, so two places of
    # the bound are taken.
    assert kept_choices(d, RESOLUTIONS_KEPT) == RESOLUTIONS_KEPT - 2


def test_a_definition_digests_its_prompts_once() -> None:
    from loopruntime.configuration import digest, prompts_of

    long = "Be careful. " * 2000
    d = one_step(system=long, modes=[Mode(name="brief", system="Be brief.")])
    prompts = prompts_of(d)
    assert prompts == {digest(long): long, digest("Be brief."): "Be brief."}
    assert prompts_of(d) is prompts
    # Another definition object digests for itself, and what was kept for one
    # goes with it.
    other = one_step(system=long)
    kept = prompts_of(other)
    assert kept == {digest(long): long}
    del other
    # Only this test holds them now (the name and getrefcount's own argument).
    assert sys.getrefcount(kept) == 2


async def test_every_session_of_a_definition_records_its_prompt() -> None:
    d = one_step(system="Answer in French.")
    async with open_journal("memory:") as journal:
        ids = []
        for _ in range(2):
            async with Session.create(journal, d) as s:
                ids.append(s.id)
        for session_id in ids:
            configured = [r.event async for r in journal.read(session_id) if r.seq == 2]
            assert list(configured[0].prompts.values()) == ["Answer in French."]
