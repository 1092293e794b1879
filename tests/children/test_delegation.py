"""Child loops: foreground and background delegates, cascading cancellation,
restore of a tree after SIGKILL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from journal import JournalUnavailableError, open_journal
from journal.content import Text, ToolResult
from journal.events import (
    ChildFinished,
    ChildStarted,
    InputQueued,
    LoopStarted,
    ModelMessageCommitted,
    TurnEnded,
)
from journal.forwarding import ForwardingJournal
from loopruntime import INTERRUPTED_NOTICE, TRUNCATED_NOTICE, Delegate, LoopDefinition
from loopruntime.context import unanswered_tool_uses
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.replay import check
from tests.support.crash_scenarios import team
from tests.support.loops import records, squash, tags
from tests.support.processes import kill_when_ready

CHILD_RUN = [
    "loop.started",
    "loop.configured",
    "input.queued",
    "turn.started",
    "model.call_started",
    "model.output",
    "model.message_committed",
    "context.measured",
    "turn.ended",
]


async def test_foreground_delegate_golden_sequence() -> None:
    lead_model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="research", input={"task": "find X"})]),
            Reply(text="X is 42"),
        ]
    )
    researcher = LoopDefinition(name="researcher", model=ScriptedModel([Reply(text="X=42")]))
    lead = LoopDefinition(
        name="lead",
        model=lead_model,
        delegates=[Delegate(name="research", description="Research", definition=researcher)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead) as s:
            await s.submit("what is X?")
            await s.wait_idle()
            await s.verify()
        recs = await records(journal, s.id)
        [started] = [r.event for r in recs if isinstance(r.event, ChildStarted)]
        child_loop = started.child_loop
        main_tags = squash(await tags(journal, s.id, loop="main"))
        child_tags = squash(await tags(journal, s.id, loop=child_loop))
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    schema = lead_model.requests[0].tools[0]
    assert schema.name == "research"
    assert schema.input_schema["properties"] == {"task": {"type": "string"}}
    assert main_tags[8:12] == ["tool.started", "child.started", "child.finished", "tool.completed"]
    assert child_tags == [*CHILD_RUN, "loop.stopped"]
    [child_started] = [
        r.event for r in recs if r.loop == child_loop and isinstance(r.event, LoopStarted)
    ]
    assert child_started.parent is not None
    assert child_started.parent.parent_loop == "main"
    assert child_started.parent.execution_id == started.provenance.execution_id
    [queued] = [r.event for r in recs if r.loop == child_loop and isinstance(r.event, InputQueued)]
    assert queued.messages[0].blocks == (Text(text="find X"),)
    last = lead_model.requests[1].messages[-1].blocks[0]
    assert isinstance(last, ToolResult) and last.content == (Text(text="X=42"),)


async def test_background_delegate_reports_by_notification(autojump_clock: trio.abc.Clock) -> None:
    lead_model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="watch", input={"task": "watch the build"})]),
            Reply(text="started the watcher"),
            Reply(text="the build passed"),
        ]
    )
    watcher = LoopDefinition(
        name="watcher", model=ScriptedModel([Reply(text="build passed", chunk_delay=5.0)])
    )
    lead = LoopDefinition(
        name="lead",
        model=lead_model,
        delegates=[
            Delegate(name="watch", description="Watch", definition=watcher, background=True)
        ],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead) as s:
            await s.submit("watch the build")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        recs = await records(journal, s.id)
    ended = [r.event for r in recs if r.loop == "main" and isinstance(r.event, TurnEnded)]
    assert [e.outcome for e in ended] == ["completed", "completed"]
    [note] = [
        r.event
        for r in recs
        if r.loop == "main"
        and isinstance(r.event, InputQueued)
        and r.event.trigger == "notification"
    ]
    assert "build passed" in note.messages[0].blocks[0].text  # type: ignore[union-attr]
    finished = [r.event for r in recs if isinstance(r.event, ChildFinished)]
    assert [(f.status, f.output) for f in finished] == [("completed", "build passed")]
    first_result = lead_model.requests[1].messages[-1].blocks[0]
    assert isinstance(first_result, ToolResult)
    assert "in the background" in first_result.content[0].text  # type: ignore[union-attr]
    assert state.turn_index == 2


async def test_interrupting_the_parent_cancels_two_levels_of_children(
    autojump_clock: trio.abc.Clock,
) -> None:
    slow = Reply(text="digging " * 50, chunk_size=4, chunk_delay=1.0)
    grandchild = LoopDefinition(name="digger", model=ScriptedModel([slow]))
    child = LoopDefinition(
        name="researcher",
        model=ScriptedModel([Reply(tool_calls=[ToolCall(name="dig", input={"task": "dig"})])]),
        delegates=[Delegate(name="dig", description="Dig", definition=grandchild)],
    )
    lead = LoopDefinition(
        name="lead",
        model=ScriptedModel(
            [Reply(tool_calls=[ToolCall(name="research", input={"task": "research"})])]
        ),
        delegates=[Delegate(name="research", description="Research", definition=child)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead) as s:
            await s.submit("go deep")
            await trio.sleep(10)
            assert len(s.loops) == 3
            assert await s.interrupt()
            await s.wait_idle()
            await s.verify()
            state = await s.snapshot()
        recs = await records(journal, s.id)
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    outcomes = {r.loop: r.event.outcome for r in recs if isinstance(r.event, TurnEnded)}
    assert set(outcomes.values()) == {"interrupted"} and len(outcomes) == 3
    digger = next(loop for loop in outcomes if loop.count("/") == 2)
    [reply] = [
        r.event for r in recs if r.loop == digger and isinstance(r.event, ModelMessageCommitted)
    ]
    assert reply.message.blocks[-1] == Text(text=INTERRUPTED_NOTICE)
    stopped = {r.loop for r in recs if r.event.__struct_config__.tag == "loop.stopped"}
    assert stopped == set(outcomes) - {"main"}
    assert unanswered_tool_uses(state.messages) == []


async def test_shutdown_stops_background_children(autojump_clock: trio.abc.Clock) -> None:
    watcher = LoopDefinition(
        name="watcher", model=ScriptedModel([Reply(text="z" * 100, chunk_size=1, chunk_delay=1.0)])
    )
    lead = LoopDefinition(
        name="lead",
        model=ScriptedModel(
            [Reply(tool_calls=[ToolCall(name="watch", input={"task": "w"})]), Reply(text="ok")]
        ),
        delegates=[Delegate(name="watch", description="W", definition=watcher, background=True)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead) as s:
            await s.submit("go")
            await trio.sleep(5)
            await s.shutdown()
        recs = await records(journal, s.id)
    child_ends = [r.event for r in recs if "/" in r.loop and isinstance(r.event, TurnEnded)]
    assert [e.outcome for e in child_ends] == ["interrupted"]


@pytest.mark.slow
async def test_sigkill_with_three_running_children_then_restore(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    await kill_when_ready("delegation", url, "ses_tree")

    lead = team([Reply(text="summarised what the researchers had")], Reply(text="unused"))
    async with open_journal(url) as journal:
        before = await records(journal, "ses_tree")
        async with Session.restore(journal, "ses_tree", lead) as s:
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        after = await records(journal, "ses_tree")
        report = await check(journal, "ses_tree")
    assert report.ok, report.summary()
    assert [(r.seq, r.digest) for r in before] == [(r.seq, r.digest) for r in after[: len(before)]]
    children = {r.event.child_loop for r in after if isinstance(r.event, ChildStarted)}
    assert len(children) == 3
    for child in children:
        ends = [r.event for r in after if r.loop == child and isinstance(r.event, TurnEnded)]
        assert [e.outcome for e in ends] == ["crashed"]
        [reply] = [
            r.event for r in after if r.loop == child and isinstance(r.event, ModelMessageCommitted)
        ]
        assert reply.message.blocks[-1] == Text(text=TRUNCATED_NOTICE)
    finished = [r.event for r in after if isinstance(r.event, ChildFinished)]
    assert sorted(f.status for f in finished) == ["crashed"] * 3
    assert state.last_outcome == "completed"
    assert state.messages[-1].blocks == (Text(text="summarised what the researchers had"),)
    assert unanswered_tool_uses(state.messages) == []


class _DiesBeforeDelivery(ForwardingJournal):
    """A journal that fails (like a crash) on the append delivering a child's
    result to its parent; everything before it is durable in ``inner``."""

    async def append(
        self, lease: Any, drafts: Any, *, expected_seq: int, consumes: Any = ()
    ) -> Any:
        if any(isinstance(d.event, ChildFinished) for d in drafts):
            raise JournalUnavailableError("the process died here")
        return await self.inner.append(lease, drafts, expected_seq=expected_seq, consumes=consumes)


async def test_background_result_is_delivered_exactly_once_after_a_crash(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The watcher answers a virtual second later, once the lead's turn has
    # ended: the crash comes at the delivery to an idle lead, whatever order
    # trio runs the two loops' steps in (else the lead's own turn may still be
    # open at the crash, and its restore resumes that turn first).
    watcher = LoopDefinition(
        name="watcher", model=ScriptedModel([Reply(text="all green", chunk_delay=1.0)])
    )

    def lead(replies: list[Reply]) -> LoopDefinition:
        return LoopDefinition(
            name="lead",
            model=ScriptedModel(replies),
            delegates=[
                Delegate(name="watch", description="W", definition=watcher, background=True)
            ],
        )

    async with open_journal("memory:") as inner:
        dying = _DiesBeforeDelivery(inner)
        with pytest.raises(JournalUnavailableError):
            async with Session.create(
                dying,
                lead(
                    [
                        Reply(tool_calls=[ToolCall(name="watch", input={"task": "w"})]),
                        Reply(text="watching"),
                    ]
                ),
                session_id="ses_bg",
            ) as s:
                await s.submit("watch")
                await s.wait_idle()
        before = await records(inner, "ses_bg")
        assert not any(isinstance(r.event, ChildFinished) for r in before)
        assert any(
            r.event.__struct_config__.tag == "turn.ended" and "/" in r.loop for r in before
        )  # the child had finished; its result never reached the parent
        d = lead([Reply(text="the watcher reported: all green")])
        async with Session.restore(inner, "ses_bg", d) as s2:
            await s2.wait_idle()
            state = await s2.snapshot()
            await s2.verify()
        async with Session.restore(inner, "ses_bg", d) as s3:  # and once more
            await s3.wait_idle()
        after = await records(inner, "ses_bg")
    finished = [r.event for r in after if isinstance(r.event, ChildFinished)]
    notes = [
        r.event
        for r in after
        if isinstance(r.event, InputQueued) and r.event.trigger == "notification"
    ]
    assert len(finished) == 1 and len(notes) == 1
    assert state.messages[-1].blocks == (Text(text="the watcher reported: all green"),)


def _researching_lead() -> LoopDefinition:
    """A lead that asks a foreground researcher once, then answers (scripts are
    used up by one session, so each gets its own)."""
    researcher = LoopDefinition(name="researcher", model=ScriptedModel([Reply(text="X=42")]))
    return LoopDefinition(
        name="lead",
        model=ScriptedModel(
            [
                Reply(tool_calls=[ToolCall(name="research", input={"task": "find X"})]),
                Reply(text="X is 42"),
            ]
        ),
        delegates=[Delegate(name="research", description="Research", definition=researcher)],
    )


async def test_a_parent_whose_foreground_child_settled_is_not_quiet() -> None:
    """The moment a foreground child settles, its parent has the child's result
    to take, though its task may not have run yet: it must not count as quiet
    then, or ``wait_idle`` returns (and the session closes) before the parent's
    answer.  Whether this task or the parent's runs first after the child
    settles is trio's choice, so it is checked in many sessions."""
    async with open_journal("memory:") as journal:
        for _ in range(40):
            async with Session.create(journal, _researching_lead()) as s:
                parent = s.loops["main"]
                await s.submit("what is X?")
                while len(s.loops) < 2:
                    await trio.lowlevel.checkpoint()
                (child,) = [loop for loop in s.loops.values() if loop is not parent]
                await child.wait_settled()
                assert not parent.quiescent
                await s.wait_idle()
                assert parent.state.last_outcome == "completed"
