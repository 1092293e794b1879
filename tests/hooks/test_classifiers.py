"""Permission classifiers: a call the policy would ask a person about is
reviewed first; allow and deny need no person, ask (or a failure) opens the
gate as it would with no classifier, and every verdict is a ``gate.reviewed`` record."""

from __future__ import annotations

from typing import Any

import trio

from journal import Journal, open_journal
from journal.content import Text, ToolResult
from journal.events import GateOpened, GateReviewed, ToolCompleted
from loopruntime import (
    Limits,
    LoopDefinition,
    PermissionRequest,
    Review,
    ToolContext,
    classifier,
    tool,
)
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.state import LoopState
from session import Session
from session.replay import build_tree, check, render_transcript, tree_json
from tests.support.loops import crashed_copy, events_of, records, tags


def brain(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    results = [b for b in last.blocks if isinstance(b, ToolResult)]
    if results:
        said = " ".join(c.text for c in results[0].content if isinstance(c, Text))
        return Reply(text=f"tool said: {said}")
    target = "staging" if any("staging" in str(b) for b in last.blocks) else "prod"
    return Reply(tool_calls=[ToolCall(name="deploy", input={"target": target})])


def definition(classifiers: list[Any], ran: list[str], **options: Any) -> LoopDefinition:
    @tool(permission="ask")
    async def deploy(ctx: ToolContext, *, target: str) -> str:
        """Deploy (asks a person)."""
        ran.append(target)
        return f"deployed {target}"

    return LoopDefinition(
        name="reviewed",
        model=ScriptedModel(brain),
        tools=[deploy],
        classifiers=classifiers,
        **options,
    )


def rules(request: PermissionRequest) -> Review:
    """A rule set: staging is fine, production needs a person."""
    if request.input["target"] == "staging":
        return Review("allow", "staging deploys are routine")
    return Review("ask", "production deploys need a person")


async def run(journal: Journal, d: LoopDefinition, text: str) -> tuple[str, LoopState]:
    async with Session.create(journal, d) as s:
        await s.submit(text)
        await s.wait_idle()
        return s.id, await s.snapshot()


async def test_a_classifier_allows_without_a_person() -> None:
    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([rules], ran), "deploy to staging")
        [review] = await events_of(journal, sid, GateReviewed)
        seq = await tags(journal, sid)
        text = render_transcript(await records(journal, sid))
        tree = tree_json(build_tree(sid, await records(journal, sid))).decode()
        assert (await check(journal, sid)).ok
    assert ran == ["staging"]
    assert "gate.opened" not in seq
    assert (review.classifier, review.verdict, review.reason, review.failed) == (
        "rules",
        "allow",
        "staging deploys are routine",
        False,
    )
    assert state.last_outcome == "completed"
    assert "classifier rules: allow deploy: staging deploys are routine" in text
    assert '"code":"gate.reviewed.allow"' in tree


async def test_a_classifier_denies_with_its_reason_and_the_turn_goes_on() -> None:
    async def strict(request: PermissionRequest) -> Review:
        return Review("deny", "deploys are frozen this week")

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([strict], ran), "deploy to prod")
        seq = await tags(journal, sid)
        [completed] = await events_of(journal, sid, ToolCompleted)
        assert (await check(journal, sid)).ok
    assert ran == []
    assert "gate.opened" not in seq
    # The review and the rejection are one commit.
    assert seq[seq.index("gate.reviewed") + 1] == "tool.completed"
    assert completed.disposition == "rejected"
    assert completed.content == (Text(text="[denied by strict: deploys are frozen this week]"),)
    assert state.last_outcome == "completed"


async def test_ask_falls_through_the_classifiers_to_the_gate_and_a_person_decides() -> None:
    asked: list[str] = []

    def second(request: PermissionRequest) -> str:
        asked.append(request.tool)
        return "ask"

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition([rules, second], ran)) as s:
            await s.submit("deploy to prod")
            await s.wait_idle()
            [gate] = (await s.snapshot()).gates
            await s.decide(gate, True)
            await s.wait_idle()
            state = await s.snapshot()
        reviews = await events_of(journal, s.id, GateReviewed)
        seq = await tags(journal, s.id)
        assert (await check(journal, s.id)).ok
    assert asked == ["deploy"]
    assert [(r.classifier, r.verdict) for r in reviews] == [("rules", "ask"), ("second", "ask")]
    # The reviews and the gate they left to a person are one commit.
    i = seq.index("gate.reviewed")
    assert seq[i : i + 3] == ["gate.reviewed", "gate.reviewed", "gate.opened"]
    assert ran == ["prod"]
    assert state.last_outcome == "completed"


async def test_the_first_classifier_that_decides_ends_the_review() -> None:
    later: list[str] = []

    def never(request: PermissionRequest) -> str:
        later.append(request.tool)
        return "deny"

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, _ = await run(journal, definition([rules, never], ran), "deploy to staging")
        reviews = await events_of(journal, sid, GateReviewed)
    assert later == [] and [r.classifier for r in reviews] == ["rules"]
    assert ran == ["staging"]


async def test_the_policy_decides_first_classifiers_only_review_what_it_would_ask() -> None:
    reviewed: list[str] = []

    def spy(request: PermissionRequest) -> str:
        reviewed.append(request.tool)
        return "deny"

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        d = definition([spy], ran, permissions={"deploy": "allow"})
        sid, _ = await run(journal, d, "deploy to prod")
        assert await events_of(journal, sid, GateReviewed) == []
    assert reviewed == [] and ran == ["prod"]


async def test_classifier_errors_count_as_ask(autojump_clock: trio.abc.Clock) -> None:
    def raises(request: PermissionRequest) -> str:
        raise ConnectionError("the rules service is down")

    async def hangs(request: PermissionRequest) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def mumbles(request: PermissionRequest) -> str:
        return "maybe"

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        d = definition([raises, hangs, mumbles], ran, limits=Limits(hook_timeout=2))
        sid, state = await run(journal, d, "deploy to prod")
        reviews = await events_of(journal, sid, GateReviewed)
        [opened] = await events_of(journal, sid, GateOpened)
        text = render_transcript(await records(journal, sid))
    assert [(r.classifier, r.verdict, r.failed) for r in reviews] == [
        ("raises", "ask", True),
        ("hangs", "ask", True),
        ("mumbles", "ask", True),
    ]
    assert (
        reviews[0].reason == "classifier raises raised ConnectionError: the rules service is down"
    )
    assert reviews[1].reason == "classifier hangs did not answer within its 2 s deadline"
    assert "is not a verdict" in reviews[2].reason
    assert list(state.gates) == [opened.gate_id]  # a person is asked
    assert ran == []
    assert "classifier raises: ask deploy (failed, so ask)" in text


async def test_restore_between_the_review_and_the_persons_decision() -> None:
    reviewed: list[str] = []

    def counting(request: PermissionRequest) -> Review:
        reviewed.append(request.tool_use_id)
        return rules(request)

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition([counting], ran)) as s:
            await s.submit("deploy to prod")
            await s.wait_idle()
            [gate] = (await s.snapshot()).gates
        async with Session.restore(journal, s.id, definition([counting], ran)) as again:
            assert list((await again.snapshot()).gates) == [gate]
            await again.decide(gate, True)
            await again.wait_idle()
            state = await again.snapshot()
        assert len(await events_of(journal, s.id, GateReviewed)) == 1
        assert (await check(journal, s.id)).ok
    assert len(reviewed) == 1  # restore does not review again
    assert ran == ["prod"] and state.last_outcome == "completed"


async def test_restore_after_an_allow_review_runs_the_call_without_reviewing_again() -> None:
    reviewed: list[str] = []

    def counting(request: PermissionRequest) -> Review:
        reviewed.append(request.tool_use_id)
        return rules(request)

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, _ = await run(journal, definition([counting], ran), "deploy to staging")
        [review] = [r for r in await records(journal, sid) if isinstance(r.event, GateReviewed)]
        cut = await crashed_copy(journal, sid, review.seq)
        reviewed.clear()
        ran.clear()
        async with Session.restore(journal, cut, definition([counting], ran)) as again:
            await again.wait_idle()
            state = await again.snapshot()
        assert (await check(journal, cut)).ok
    assert reviewed == []
    assert ran == ["staging"] and state.last_outcome == "completed"


async def test_named_classifiers_and_sync_ones_with_a_decorator() -> None:
    @classifier(name="change-freeze")
    def freeze(request: PermissionRequest) -> Review:
        return Review("deny", "frozen")

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, _ = await run(journal, definition([freeze], ran), "deploy to prod")
        [review] = await events_of(journal, sid, GateReviewed)
    assert review.classifier == "change-freeze" and ran == []
