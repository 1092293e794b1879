"""Hooks at their four points: each one letting things go on, deciding
otherwise, failing closed; and the records a restore and the replay read."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from journal import Journal, open_journal
from journal.content import Text, ToolResult, ToolUse
from journal.events import HookDecided, ToolCompleted, ToolStarted, TurnEnded
from loopruntime import (
    AddContext,
    AfterTool,
    BeforeModel,
    BeforeTool,
    Deny,
    Limits,
    LoopDefinition,
    ReplaceResult,
    Rewrite,
    StopTurn,
    ToolContext,
    TurnEnd,
    hook,
    tool,
)
from loopruntime.hooks import Hook
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.state import LoopState
from session import Session
from session.replay import check, render_transcript
from tests.support.loops import crashed_copy, events_of, records, tags

# -- a loop that copies a file -----------------------------------------------------------


class Brain:
    """Asks for ``copy`` once, then answers with what the tool said; keeps
    every request it got."""

    def __init__(self, call: dict[str, Any] | None = None) -> None:
        self.call = call if call is not None else {"path": "notes.txt"}
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> Reply:
        self.requests.append(request)
        last = request.messages[-1]
        results = [b for b in last.blocks if isinstance(b, ToolResult)]
        if results:
            said = " ".join(c.text for c in results[0].content if isinstance(c, Text))
            return Reply(text=f"tool said: {said}")
        if any(isinstance(b, ToolResult) for m in request.messages for b in m.blocks):
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="copy", input=self.call)])


def definition(
    hooks: list[Hook], ran: list[str], *, brain: Brain | None = None, **options: Any
) -> LoopDefinition:
    @tool(permission="allow")
    async def copy(ctx: ToolContext, *, path: str) -> str:
        """Copy a file."""
        ran.append(path)
        return f"copied {path}"

    return LoopDefinition(
        name="hooked",
        model=ScriptedModel(brain or Brain()),
        tools=[copy],
        hooks=hooks,
        **options,
    )


async def run(
    journal: Journal, d: LoopDefinition, text: str = "copy my notes"
) -> tuple[str, LoopState]:
    """A session of ``d`` that took ``text`` to its end: its id and last state."""
    async with Session.create(journal, d) as s:
        await s.submit(text)
        await s.wait_idle()
        return s.id, await s.snapshot()


def tool_result(state_messages: list[Any]) -> str:
    for m in state_messages:
        for b in m.blocks:
            if isinstance(b, ToolResult):
                return " ".join(c.text for c in b.content if isinstance(c, Text))
    raise AssertionError("no tool result")


# -- before_tool ---------------------------------------------------------------------------


async def test_a_before_tool_hook_that_returns_none_changes_nothing_and_leaves_no_record() -> None:
    seen: list[BeforeTool] = []

    @hook("before_tool")
    async def watch(call: BeforeTool) -> None:
        seen.append(call)

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([watch], ran))
        assert await events_of(journal, sid, HookDecided) == []
        assert (await check(journal, sid)).ok
    assert ran == ["notes.txt"]
    assert [(c.tool, dict(c.input)) for c in seen] == [("copy", {"path": "notes.txt"})]
    assert state.last_outcome == "completed"


async def test_a_before_tool_hook_denies_with_a_reason_the_model_reads() -> None:
    @hook("before_tool")
    async def guard(call: BeforeTool) -> Deny | None:
        return Deny("copies of notes are not allowed") if "notes" in call.input["path"] else None

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([guard], ran))
        [decided] = await events_of(journal, sid, HookDecided)
        [completed] = await events_of(journal, sid, ToolCompleted)
        seq = await tags(journal, sid)
        assert (await check(journal, sid)).ok
    assert ran == []  # never ran
    assert (decided.hook, decided.point, decided.action) == ("guard", "before_tool", "deny")
    assert decided.reason == "copies of notes are not allowed"
    assert completed.disposition == "rejected"
    assert "tool.started" not in seq
    # The denial and the rejection are one commit, the denial first.
    assert seq[seq.index("hook.decided") + 1] == "tool.completed"
    said = tool_result(state.messages)
    assert said == "[denied by hook guard: copies of notes are not allowed]"
    assert state.last_outcome == "completed"  # the turn goes on


async def test_a_before_tool_hook_rewrites_the_input_the_tool_runs_with_and_the_model_sees() -> (
    None
):
    @hook("before_tool")
    async def sandbox(call: BeforeTool) -> Rewrite:
        return Rewrite({"path": "/sandbox/" + call.input["path"]})

    ran: list[str] = []
    brain = Brain()
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([sandbox], ran, brain=brain))
        [decided] = await events_of(journal, sid, HookDecided)
        [started] = await events_of(journal, sid, ToolStarted)
        text = render_transcript(await records(journal, sid))
        assert (await check(journal, sid)).ok
    assert ran == ["/sandbox/notes.txt"]
    assert decided.action == "rewrite"
    assert decided.original == {"path": "notes.txt"}
    assert decided.input == {"path": "/sandbox/notes.txt"}
    assert started.input == {"path": "/sandbox/notes.txt"}
    # The model's next request shows its call as it ran.
    [use] = [b for m in brain.requests[-1].messages for b in m.blocks if isinstance(b, ToolUse)]
    assert use.input == {"path": "/sandbox/notes.txt"}
    [use] = [b for m in state.messages for b in m.blocks if isinstance(b, ToolUse)]
    assert use.input == {"path": "/sandbox/notes.txt"}
    assert "hook sandbox (before_tool) rewrote call" in text
    assert '{"path":"notes.txt"} → {"path":"/sandbox/notes.txt"}' in text


async def test_hooks_of_a_point_chain_in_order_each_seeing_the_rewrite_before() -> None:
    seen: list[str] = []

    @hook("before_tool")
    async def first(call: BeforeTool) -> Rewrite:
        return Rewrite({"path": call.input["path"] + ".1"})

    @hook("before_tool")
    async def second(call: BeforeTool) -> Rewrite:
        seen.append(call.input["path"])
        return Rewrite({"path": call.input["path"] + ".2"})

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, _ = await run(journal, definition([first, second], ran))
        decided = await events_of(journal, sid, HookDecided)
        assert (await check(journal, sid)).ok
    assert seen == ["notes.txt.1"]
    assert ran == ["notes.txt.1.2"]
    assert [(d.hook, d.original, d.input) for d in decided] == [
        ("first", {"path": "notes.txt"}, {"path": "notes.txt.1"}),
        ("second", {"path": "notes.txt.1"}, {"path": "notes.txt.1.2"}),
    ]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"path": 7}, "its rewrite does not fit the tool"),
        ({"path": "x", "mode": "w"}, "its rewrite does not fit the tool"),
        ({"path": {1, 2}}, "its rewrite does not fit the tool"),
    ],
)
async def test_a_rewrite_that_does_not_fit_the_tool_denies_the_call(
    answer: dict[str, Any], why: str
) -> None:
    @hook("before_tool")
    async def broken(call: BeforeTool) -> Rewrite:
        return Rewrite(answer)

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([broken], ran))
        [decided] = await events_of(journal, sid, HookDecided)
        assert (await check(journal, sid)).ok
    assert ran == []
    assert decided.action == "failed" and why in decided.reason
    assert "before_tool hook broken failed" in tool_result(state.messages)
    assert state.last_outcome == "completed"


async def test_a_raising_before_tool_hook_denies_the_call_and_the_turn_goes_on() -> None:
    @hook("before_tool")
    async def buggy(call: BeforeTool) -> None:
        raise KeyError("policy table")

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([buggy], ran))
        [decided] = await events_of(journal, sid, HookDecided)
        [completed] = await events_of(journal, sid, ToolCompleted)
        assert (await check(journal, sid)).ok
    assert ran == []
    assert decided.action == "failed"
    assert decided.reason == "it raised KeyError: 'policy table'"
    assert completed.disposition == "rejected"
    assert state.last_outcome == "completed"
    assert state.messages[-1].blocks == (Text(text="tool said: " + tool_result(state.messages)),)


async def test_a_before_tool_hook_past_its_deadline_denies_the_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    @hook("before_tool")
    async def slow(call: BeforeTool) -> None:
        await trio.sleep_forever()

    @hook("before_tool", name="patient", timeout=None)
    async def never_reached(call: BeforeTool) -> None:
        raise AssertionError("the hook after a failed one does not run")

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        d = definition([slow, never_reached], ran, limits=Limits(hook_timeout=5))
        sid, state = await run(journal, d)
        [decided] = await events_of(journal, sid, HookDecided)
    assert ran == []
    assert decided.hook == "slow"
    assert decided.reason == "it did not answer within its 5 s deadline"
    assert state.last_outcome == "completed"


async def test_a_hook_returning_what_its_point_cannot_take_fails_closed() -> None:
    @hook("before_tool")
    async def confused(call: BeforeTool) -> Any:
        return AddContext("this is a before_model decision")

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, _ = await run(journal, definition([confused], ran))
        [decided] = await events_of(journal, sid, HookDecided)
    assert ran == []
    assert decided.reason == (
        "it returned AddContext, which a before_tool hook cannot (None, Deny, Rewrite)"
    )


async def test_restore_after_a_rewritten_call_keeps_the_rewrite_and_runs_no_hook_again() -> None:
    """Cut after the rewrite and the start are durable, before the result:
    restore sees the started call with the rewritten input (a replay-safe
    tool runs again with it, the hook does not run again), and the model's
    call reads the rewritten input."""
    hooked: list[str] = []

    @hook("before_tool")
    async def sandbox(call: BeforeTool) -> Rewrite:
        hooked.append(call.input["path"])
        return Rewrite({"path": "/sandbox/" + call.input["path"]})

    ran: list[str] = []

    def safe_definition(brain: Brain) -> LoopDefinition:
        @tool(permission="allow", replay_safe=True)
        async def copy(ctx: ToolContext, *, path: str) -> str:
            """Copy a file (idempotent)."""
            ran.append(path)
            return f"copied {path}"

        return LoopDefinition(
            name="hooked", model=ScriptedModel(brain), tools=[copy], hooks=[sandbox]
        )

    async with open_journal("memory:") as journal:
        first = safe_definition(Brain())
        async with Session.create(journal, first) as s:
            await s.submit("copy my notes")
            await s.wait_idle()
        every = await records(journal, s.id)
        [start] = [r for r in every if isinstance(r.event, ToolStarted)]
        cut = await crashed_copy(journal, s.id, start.seq)
        hooked.clear()
        ran.clear()
        brain = Brain()
        async with Session.restore(journal, cut, safe_definition(brain)) as restored:
            await restored.wait_idle()
            state = await restored.snapshot()
        assert (await check(journal, cut)).ok
        text = render_transcript(await records(journal, cut))
    assert hooked == []  # the rewrite is durable: no second decision
    assert ran == ["/sandbox/notes.txt"]  # re-run with the input as rewritten
    assert state.last_outcome == "completed"
    [use] = [b for m in brain.requests[-1].messages for b in m.blocks if isinstance(b, ToolUse)]
    assert use.input == {"path": "/sandbox/notes.txt"}
    assert '→ copy {"path":"/sandbox/notes.txt"}' in text


# -- after_tool ------------------------------------------------------------------------------


async def test_an_after_tool_hook_sees_the_result_and_may_leave_it() -> None:
    seen: list[AfterTool] = []

    @hook("after_tool")
    async def audit(call: AfterTool) -> None:
        seen.append(call)

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([audit], ran))
        assert await events_of(journal, sid, HookDecided) == []
    [call] = seen
    assert (call.tool, call.content, call.is_error) == (
        "copy",
        (Text(text="copied notes.txt"),),
        False,
    )
    assert call.execution_id.startswith("exe_")
    assert tool_result(state.messages) == "copied notes.txt"


async def test_an_after_tool_hook_replaces_the_result_and_the_tools_own_is_not_kept() -> None:
    @hook("after_tool")
    async def redact(call: AfterTool) -> ReplaceResult:
        return ReplaceResult("copied [a file]", reason="paths are private")

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([redact], ran))
        [decided] = await events_of(journal, sid, HookDecided)
        [completed] = await events_of(journal, sid, ToolCompleted)
        every = await records(journal, sid)
        text = render_transcript(every)
        assert (await check(journal, sid)).ok
    assert ran == ["notes.txt"]
    assert (decided.action, decided.reason) == ("replace", "paths are private")
    assert completed.content == (Text(text="copied [a file]"),)
    assert completed.disposition == "succeeded"
    assert tool_result(state.messages) == "copied [a file]"
    assert not any("copied notes.txt" in repr(r.event) for r in every)
    assert "hook redact (after_tool) replaced the result of call" in text


async def test_an_after_tool_replacement_may_turn_the_result_into_an_error() -> None:
    @hook("after_tool")
    async def veto(call: AfterTool) -> ReplaceResult:
        return ReplaceResult("the copy landed outside the sandbox", is_error=True)

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, _ = await run(journal, definition([veto], ran))
        [completed] = await events_of(journal, sid, ToolCompleted)
    assert completed.disposition == "failed"


async def test_a_failing_after_tool_hook_withholds_the_result(
    autojump_clock: trio.abc.Clock,
) -> None:
    @hook("after_tool", timeout=1)
    async def stuck(call: AfterTool) -> None:
        await trio.sleep_forever()

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([stuck], ran))
        [decided] = await events_of(journal, sid, HookDecided)
        [completed] = await events_of(journal, sid, ToolCompleted)
        assert (await check(journal, sid)).ok
    assert ran == ["notes.txt"]  # it ran; its result is what is held back
    assert decided.action == "failed" and "1 s deadline" in decided.reason
    assert completed.disposition == "failed"
    assert "copied" not in tool_result(state.messages)
    assert "[withheld: after_tool hook stuck failed" in tool_result(state.messages)
    assert state.last_outcome == "completed"


# -- before_model ------------------------------------------------------------------------------


async def test_a_before_model_hook_adds_context_the_model_reads_once_per_call() -> None:
    seen: list[BeforeModel] = []

    @hook("before_model")
    async def today(call: BeforeModel) -> AddContext | None:
        seen.append(call)
        return AddContext("today is a holiday") if call.step == 0 else None

    brain = Brain()
    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([today], ran, brain=brain))
        decided = await events_of(journal, sid, HookDecided)
        text = render_transcript(await records(journal, sid))
        assert (await check(journal, sid)).ok
    assert [c.step for c in seen] == [0, 1]
    assert [(d.action, d.step, d.text) for d in decided] == [("context", 0, "today is a holiday")]
    # The request merges it into the person's message, after what they said.
    first = brain.requests[0].messages
    assert first[-1].blocks == (Text(text="copy my notes"), Text(text="today is a holiday"))
    assert (
        sum(
            1
            for m in brain.requests[-1].messages
            for b in m.blocks
            if isinstance(b, Text) and b.text == "today is a holiday"
        )
        == 1
    )
    assert state.last_outcome == "completed"
    assert "hook today (before_model) added context: today is a holiday" in text


async def test_a_before_model_hook_stops_the_turn_with_its_reason() -> None:
    @hook("before_model")
    async def budget(call: BeforeModel) -> StopTurn:
        return StopTurn("the monthly budget is spent")

    brain = Brain()
    async with open_journal("memory:") as journal:
        sid, state = await run(journal, definition([budget], [], brain=brain))
        [ended] = await events_of(journal, sid, TurnEnded)
        seq = await tags(journal, sid)
        assert (await check(journal, sid)).ok
    assert brain.requests == []  # no model call was made
    assert "model.call_started" not in seq
    assert seq[-2:] == ["hook.decided", "turn.ended"]
    assert (ended.outcome, ended.kind, ended.code) == ("failed", "hook", "hook.stopped")
    assert ended.detail == "hook 'budget' stopped the turn: the monthly budget is spent"
    assert state.last_failure_code == "hook.stopped"


async def test_a_raising_before_model_hook_ends_the_turn_without_a_model_call() -> None:
    @hook("before_model")
    async def buggy(call: BeforeModel) -> None:
        raise RuntimeError("no database")

    brain = Brain()
    async with open_journal("memory:") as journal:
        sid, _ = await run(journal, definition([buggy], [], brain=brain))
        [decided] = await events_of(journal, sid, HookDecided)
        [ended] = await events_of(journal, sid, TurnEnded)
        # The session goes on: the next input gets a turn of its own.
        async with Session.restore(journal, sid, definition([], [], brain=brain)) as again:
            await again.submit("and now?")
            await again.wait_idle()
            state = await again.snapshot()
    assert brain.requests and state.last_outcome == "completed"
    assert decided.action == "failed" and decided.reason == "it raised RuntimeError: no database"
    assert (ended.outcome, ended.code) == ("failed", "hook.failed")


async def test_context_added_before_a_crash_is_not_added_again_on_restore() -> None:
    calls: list[int] = []

    @hook("before_model")
    async def note(call: BeforeModel) -> AddContext:
        calls.append(call.step)
        return AddContext("remember the style guide")

    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition([note], [])) as s:
            await s.submit("copy my notes")
            await s.wait_idle()
        every = await records(journal, s.id)
        [first_context] = [
            r for r in every if isinstance(r.event, HookDecided) and r.event.step == 0
        ]
        cut = await crashed_copy(journal, s.id, first_context.seq)
        calls.clear()
        brain = Brain()
        async with Session.restore(journal, cut, definition([note], [], brain=brain)) as again:
            await again.wait_idle()
            state = await again.snapshot()
        assert (await check(journal, cut)).ok
    assert calls == [1]  # step 0's context was durable; step 1 is new
    first = brain.requests[0].messages
    notes = [b for m in first for b in m.blocks if b == Text(text="remember the style guide")]
    assert len(notes) == 1
    assert state.last_outcome == "completed"


# -- turn_end ------------------------------------------------------------------------------------


async def test_turn_end_hooks_see_the_outcome_and_a_failing_one_changes_nothing() -> None:
    seen: list[TurnEnd] = []

    @hook("turn_end")
    async def metrics(end: TurnEnd) -> None:
        seen.append(end)

    @hook("turn_end")
    async def broken(end: TurnEnd) -> None:
        raise ValueError("metrics server down")

    @hook("before_model")
    async def budget(call: BeforeModel) -> StopTurn | None:
        return StopTurn("spent") if call.turn == 2 else None

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        d = definition([metrics, broken, budget], ran)
        async with Session.create(journal, d) as s:
            await s.submit("copy my notes")
            await s.wait_idle()
            await s.submit("again")
            await s.wait_idle()
        decided = await events_of(journal, s.id, HookDecided)
    assert [(e.turn, e.outcome, e.code) for e in seen] == [
        (1, "completed", None),
        (2, "failed", "hook.stopped"),
    ]
    assert [d.hook for d in decided] == ["budget"]  # turn_end hooks leave no record


async def test_a_hook_is_not_run_at_the_other_points() -> None:
    points: list[str] = []

    def spy(point: str) -> Hook:
        async def fn(shown: Any) -> None:
            points.append(point)

        return hook(point, fn, name=point)

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        hooks = [spy(p) for p in ("before_model", "before_tool", "after_tool", "turn_end")]
        await run(journal, definition(hooks, ran))
    assert points == [
        "before_model",
        "before_tool",
        "after_tool",
        "before_model",
        "turn_end",
    ]


async def test_a_hook_cannot_change_the_input_but_by_a_recorded_rewrite() -> None:
    @hook("before_tool")
    async def sneaky(call: BeforeTool) -> None:
        call.input["path"] = "/etc/passwd"  # type: ignore[index]

    ran: list[str] = []
    async with open_journal("memory:") as journal:
        sid, _ = await run(journal, definition([sneaky], ran))
        [decided] = await events_of(journal, sid, HookDecided)
    assert ran == []  # the hook raised (the input is read only): the call is denied
    assert decided.action == "failed" and "TypeError" in decided.reason
