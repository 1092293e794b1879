"""Golden sequences of compaction: manual, automatic, stale, invalid, failed,
restore, and what the model sees afterwards (DESIGN.md §7)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from journal import Journal, Record, open_journal
from journal.content import ToolResult, ToolUse, Usage
from journal.errors import JournalUnavailableError
from journal.events import (
    CompactionCommitted,
    CompactionRejected,
    CompactionStarted,
    ContextMeasured,
    Event,
    ModelMessageCommitted,
    ToolCompleted,
)
from journal.forwarding import ForwardingJournal
from loopruntime import Limits, LoopDefinition, LoopStatus, ModelCompactor, ToolContext, tool
from loopruntime.compaction import SUMMARY_HEADER, measured_fraction
from loopruntime.context import unanswered_tool_uses
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.embedded.restore import read_states
from session.replay import build_tree, check, render_transcript
from tests.compaction.support import (
    TestCompactor,
    outcome,
    overloaded,
    summary,
    texts,
    wait_for,
)
from tests.support.loops import events_of, records, squash, tags

TURN = [
    "turn.started",
    "model.call_started",
    "model.output",
    "model.message_committed",
    "context.measured",
    "turn.ended",
]


def request_texts(request: ModelRequest) -> list[str]:
    return [t for m in request.messages for t in texts(m)]


def assert_no_orphans(request: ModelRequest) -> None:
    """Every tool_use answered in the next message, every tool_result
    preceded by its tool_use."""
    assert unanswered_tool_uses(request.messages) == []
    for i, m in enumerate(request.messages):
        results = [b.tool_use_id for b in m.blocks if isinstance(b, ToolResult)]
        if results:
            previous = request.messages[i - 1] if i else None
            assert previous is not None and previous.role == "assistant"
            uses = {b.id for b in previous.blocks if isinstance(b, ToolUse)}
            assert set(results) <= uses


# -- context measurement -------------------------------------------------------------


async def test_every_model_message_records_usage_and_the_context_is_measured() -> None:
    usage = Usage(
        input_tokens=700, output_tokens=50, cache_read_tokens=200, cache_creation_tokens=30
    )
    model = ScriptedModel([Reply(text="hi", usage=usage)], context_window=2000)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="a", model=model)) as s:
            assert (await s.snapshot()).context is None
            await s.submit("hello")
            await s.wait_idle()
            state = await s.snapshot()
        [message] = await events_of(journal, s.id, ModelMessageCommitted)
        [measured] = await events_of(journal, s.id, ContextMeasured)
    assert message.usage == usage
    assert measured == ContextMeasured(
        input_tokens=700,
        output_tokens=50,
        cache_read_tokens=200,
        cache_creation_tokens=30,
        window=2000,
    )
    assert state.context == measured
    assert measured_fraction(state) == (700 + 50 + 200 + 30) / 2000


# -- manual compaction ---------------------------------------------------------------


def three_exchanges(compactor: object, *extra: Reply, retained: int = 1) -> LoopDefinition:
    model = ScriptedModel([Reply(text="a1"), Reply(text="a2"), Reply(text="a3"), *extra])
    return LoopDefinition(
        name="assistant",
        model=model,
        system="be brief",
        limits=Limits(retained_exchanges=retained),
        compactor=compactor,  # type: ignore[arg-type]
    )


async def talk(s: Session, *inputs: str) -> None:
    for text in inputs:
        await s.submit(text)
        await s.wait_idle()


async def test_manual_compaction_golden_sequence_and_what_the_model_sees() -> None:
    compaction_model = ScriptedModel([Reply(text=summary(decisions="a1 &amp; a2 said"))])
    d = three_exchanges(ModelCompactor(model=compaction_model), Reply(text="a4"))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            before = await s.snapshot()
            head = (await records(journal, s.id))[-1].seq
            attempt = await s.compact()
            await s.wait_idle()
            compacted = await s.snapshot()
            await s.verify()
            assert (await read_states(journal, s.id))["main"] == compacted
            await talk(s, "u4")
            after = await s.snapshot()
            await s.verify()
        seq = squash(await tags(journal, s.id))
        all_records = await records(journal, s.id)
        report = await check(journal, s.id)
    assert seq == [
        "loop.started",
        "loop.configured",
        *(["input.queued", *TURN] * 3),
        "compaction.started",
        "compaction.committed",
        "input.queued",
        *TURN,
    ]
    started = next(r.event for r in all_records if isinstance(r.event, CompactionStarted))
    committed = next(r.event for r in all_records if isinstance(r.event, CompactionCommitted))
    assert started.attempt_id == committed.attempt_id == attempt
    assert started.trigger == "manual"
    assert started.basis == committed.basis == before.history_seq
    assert (committed.replaced, committed.retained) == (4, 2)
    assert committed.summary.derived and committed.summary.role == "user"
    assert not committed.summary.synthetic
    [summary_text] = texts(committed.summary)
    assert summary_text.startswith(SUMMARY_HEADER + "\n<conversation_summary>")
    assert "<decisions>a1 &amp; a2 said</decisions>" in summary_text
    # The compactor was the configured model, asked with the replaced history.
    [ask] = compaction_model.requests
    assert "<conversation_summary>" in ask.system
    [asked] = ask.messages
    assert texts(asked)[0].splitlines() == [
        "user: u1",
        "assistant: a1",
        "user: u2",
        "assistant: a2",
    ]
    # The context: the derived summary, then the newest exchange verbatim.
    assert compacted.messages == [committed.summary, *before.messages[4:]]
    assert compacted.compactions == 1 and compacted.compacting is None
    assert compacted.history_seq == head + 2
    # What the model sees next: summary, retained exchange, new input.
    request = d.model.requests[-1]  # type: ignore[attr-defined]
    assert request_texts(request) == [summary_text, "u3", "a3", "u4"]
    assert [m.role for m in request.messages] == ["user", "assistant", "user"]
    assert after.messages[0] is not None and after.messages[0].derived
    assert report.ok, report.summary()
    # Nothing is destroyed: every original message is still in the journal,
    # and the replay splits the conversation into two epochs.
    transcript = render_transcript(all_records)
    for text in ("u1", "a1", "u2", "a2", "u3", "a3", "u4", "a4"):
        assert text in transcript
    assert "compaction: 4 messages summarised, 2 kept" in transcript
    [stream] = build_tree(s.id, all_records).streams
    assert len(stream.epochs) == 2
    assert stream.epochs[1].compaction is not None
    assert stream.epochs[1].compaction.attempt_id == attempt


async def test_default_compactor_asks_the_loops_own_model() -> None:
    d = three_exchanges(None, Reply(text=summary()), retained=2)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            await s.compact()
            await s.wait_idle()
            state = await s.snapshot()
        assert isinstance(await outcome(journal, s.id), CompactionCommitted)
    ask = d.model.requests[-1]  # type: ignore[attr-defined]
    assert ask.system != "be brief" and ask.tools == ()
    assert texts(ask.messages[0])[0].splitlines() == ["user: u1", "assistant: a1"]
    assert [texts(m) for m in state.messages[1:]] == [["u2"], ["a2"], ["u3"], ["a3"]]


async def test_restore_after_compaction_equals_the_live_compacted_state() -> None:
    d = three_exchanges(TestCompactor(summary()), Reply(text="a4"))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            await s.compact()
            await s.wait_idle()
            live = await s.snapshot()
        restored_d = three_exchanges(TestCompactor(summary()), Reply(text="a4"))
        async with Session.restore(journal, s.id, restored_d) as r:
            restored = await r.snapshot()
            await r.verify()
            assert restored == live
            assert (await read_states(journal, s.id))["main"] == live
            await talk(r, "u4")
            await r.verify()
    request = restored_d.model.requests[-1]  # type: ignore[attr-defined]
    assert request.messages[0].blocks[0] == live.messages[0].blocks[0]
    assert request_texts(request)[1:] == ["u3", "a3", "u4"]


async def test_a_second_compaction_summarises_the_first_summary() -> None:
    compactor = TestCompactor(summary())
    model = ScriptedModel([Reply(text=f"a{i}") for i in range(1, 6)])
    d = LoopDefinition(
        name="a", model=model, limits=Limits(retained_exchanges=1), compactor=compactor
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2")
            await s.compact()
            await s.wait_idle()
            first = (await s.snapshot()).messages[0]
            await talk(s, "u3", "u4")
            await s.compact()
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    assert compactor.calls[1].messages[0] == first
    assert [texts(m) for m in compactor.calls[1].messages[1:]] == [["u2"], ["a2"], ["u3"], ["a3"]]
    assert state.compactions == 2
    assert [texts(m) for m in state.messages[1:]] == [["u4"], ["a4"]]


# -- automatic compaction ------------------------------------------------------------


async def test_automatic_compaction_at_the_threshold() -> None:
    # Window 1000, compact at 0.5: 499 tokens stay, 500 compacts before the
    # next turn.  The default compactor asks the loop's own model.
    model = ScriptedModel(
        [
            Reply(text="a1", usage=Usage(input_tokens=300, output_tokens=199)),
            Reply(text="a2", usage=Usage(input_tokens=400, cache_read_tokens=90, output_tokens=10)),
            Reply(text=summary(goal="auto")),
            Reply(text="a3", usage=Usage(input_tokens=120, output_tokens=5)),
        ],
        context_window=1000,
    )
    d = LoopDefinition(name="a", model=model, limits=Limits(compact_at=0.5, retained_exchanges=1))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2")
            assert measured_fraction(await s.snapshot()) == 0.5
            await talk(s, "u3")
            state = await s.snapshot()
            await s.verify()
        seq = squash(await tags(journal, s.id))
        [started] = await events_of(journal, s.id, CompactionStarted)
    assert seq == [
        "loop.started",
        "loop.configured",
        *(["input.queued", *TURN] * 2),
        "input.queued",
        "compaction.started",
        "compaction.committed",
        *TURN,
    ]
    assert started.trigger == "auto"
    assert "user: u1" in texts(model.requests[2].messages[0])[0]
    last = model.requests[3]
    assert "<goal>auto</goal>" in request_texts(last)[0]
    assert request_texts(last)[1:] == ["u2", "a2", "u3"]
    assert state.compactions == 1
    assert measured_fraction(state) == 0.125


async def test_no_automatic_compaction_below_the_threshold_or_when_disabled() -> None:
    for limits in (
        Limits(compact_at=0.5, retained_exchanges=1),
        Limits(compact_at=None, retained_exchanges=1),
    ):
        # 499 of 1000 stays below 0.5 (the scripted model counts output >= 1).
        tokens = 489 if limits.compact_at else 989
        usage = Usage(input_tokens=tokens, output_tokens=10)
        model = ScriptedModel(
            [Reply(text=f"a{i}", usage=usage) for i in range(4)], context_window=1000
        )
        d = LoopDefinition(name="a", model=model, limits=limits)
        async with open_journal("memory:") as journal:
            async with Session.create(journal, d) as s:
                await talk(s, "u1", "u2", "u3", "u4")
            assert await events_of(journal, s.id, CompactionStarted) == []


async def test_a_rejected_automatic_compaction_is_not_retried_until_history_moves() -> None:
    compactor = TestCompactor("not a summary")
    usage = Usage(input_tokens=900)
    model = ScriptedModel([Reply(text=f"a{i}", usage=usage) for i in range(4)], context_window=1000)
    d = LoopDefinition(
        name="a",
        model=model,
        limits=Limits(compact_at=0.5, retained_exchanges=1),
        compactor=compactor,
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            state = await s.snapshot()
        rejected = await events_of(journal, s.id, CompactionRejected)
        seq = squash(await tags(journal, s.id))
    # Tried before turn 3 (two exchanges to replace one), rejected, and the
    # input it held back ran anyway.
    assert [r.reason for r in rejected] == ["invalid_summary"]
    assert seq[-9:] == ["input.queued", "compaction.started", "compaction.rejected", *TURN]
    assert state.turn_index == 3 and state.compactions == 0


# -- compare-and-swap: a stale compaction ------------------------------------------


@tool(permission="ask")
async def rm(ctx: ToolContext, *, path: str) -> str:
    """Remove a file (needs approval)."""
    return f"removed {path}"


def gated(compactor: TestCompactor, *, retained: int = 1) -> LoopDefinition:
    model = ScriptedModel(
        [
            Reply(text="hello"),
            Reply(tool_calls=[ToolCall(name="rm", input={"path": "a"})]),
            Reply(text="removed it"),
            Reply(text="anything else?"),
        ]
    )
    return LoopDefinition(
        name="g",
        model=model,
        tools=[rm],
        limits=Limits(retained_exchanges=retained),
        compactor=compactor,
    )


async def test_stale_compaction_when_a_tool_result_commits_meanwhile(
    autojump_clock: trio.abc.Clock,
) -> None:
    compactor = TestCompactor(summary(), delay=10.0)
    d = gated(compactor)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "hi", "clean up")
            parked = await s.snapshot()
            assert parked.status is LoopStatus.AWAITING_GATE
            [gate] = parked.open_gates
            attempt = await s.compact()
            started = await wait_for(s, CompactionStarted)
            assert isinstance(started.event, CompactionStarted)
            basis = started.event.basis
            assert (await s.snapshot()).compacting == attempt
            # The person decides while the compactor still works: the tool
            # runs, its result commits, and the turn goes on to its end.
            await s.decide(gate.gate_id, allow=True)
            await wait_for(s, ToolCompleted, after=started.seq)
            assert compactor.calls and (await s.snapshot()).compacting == attempt
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        seq = squash(await tags(journal, s.id))
        end = await outcome(journal, s.id)
    assert isinstance(end, CompactionRejected)
    assert end.reason == "stale" and end.attempt_id == attempt
    assert f"after basis {basis}" in end.detail
    assert basis == parked.history_seq
    assert seq[seq.index("gate.opened") :] == [
        "gate.opened",
        "compaction.started",
        "gate.resolved",
        "tool.started",
        "tool.completed",
        "model.call_started",
        "model.output",
        "model.message_committed",
        "context.measured",
        "turn.ended",
        "compaction.rejected",
    ]
    # The gate was an open obligation when the compactor was asked.
    [call] = compactor.calls
    assert any(gate.gate_id in o and "permission" in o for o in call.obligations)
    # Nothing changed: the context is the full history.
    assert state.compactions == 0 and state.compacting is None
    assert [m.derived for m in state.messages] == [False] * len(state.messages)
    assert [texts(m) for m in state.messages if m.role == "user" and texts(m)] == [
        ["hi"],
        ["clean up"],
    ]


async def test_compaction_while_parked_at_a_gate_keeps_the_call_with_its_result(
    autojump_clock: trio.abc.Clock,
) -> None:
    compactor = TestCompactor(summary(open_items="await the rm decision"), delay=5.0)
    d = gated(compactor, retained=0)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "hi", "clean up")
            [gate] = (await s.snapshot()).open_gates
            await s.compact()
            await s.wait_idle()  # compacted while the gate stays open
            compacted = await s.snapshot()
            assert compacted.status is LoopStatus.AWAITING_GATE
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()
            await talk(s, "thanks")
            state = await s.snapshot()
            await s.verify()
        [committed] = await events_of(journal, s.id, CompactionCommitted)
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    # Retaining 0 exchanges still keeps the exchange whose call is unanswered.
    assert (committed.replaced, committed.retained) == (2, 2)
    assert any(gate.gate_id in o for o in committed.obligations)
    assert "Open obligations:" in texts(committed.summary)[0]
    assert [m.role for m in compacted.messages] == ["user", "user", "assistant"]
    for request in d.model.requests[2:]:  # type: ignore[attr-defined]
        assert_no_orphans(request)
    assert state.last_outcome == "completed" and state.compactions == 1


async def test_after_compaction_every_tool_use_is_answered() -> None:
    @tool(permission="allow")
    async def add(ctx: ToolContext, *, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    calls = [ToolCall(name="add", input={"a": 1, "b": 2})]
    model = ScriptedModel(
        [
            Reply(tool_calls=calls),
            Reply(text="3"),
            Reply(tool_calls=calls),
            Reply(tool_calls=calls),
            Reply(text="still 3"),
            Reply(text="bye"),
        ]
    )
    d = LoopDefinition(
        name="t",
        model=model,
        tools=[add],
        limits=Limits(retained_exchanges=1),
        compactor=TestCompactor(summary()),
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "add", "again")
            await s.compact()
            await s.wait_idle()
            await talk(s, "bye")
            state = await s.snapshot()
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    assert state.compactions == 1
    request = model.requests[-1]
    assert_no_orphans(request)
    assert sum(isinstance(b, ToolUse) for m in request.messages for b in m.blocks) == 2


# -- rejections: invalid summaries and failures -------------------------------------


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("Here is the summary: we talked about releases.", "summary must start with"),
        (summary(goal="   "), "<goal> must not be empty"),
        (summary(decisions="x" * 5_000_000), "characters, more than the 64000 allowed"),
        (summary(state="<b>bold</b>"), "nested element <b>"),
        (summary() + " thanks!", "text after </conversation_summary>"),
        (b"<conversation_summary/>", "returned bytes, not text"),
    ],
    ids=["prose", "empty-goal", "5MB", "nested", "trailing", "not-text"],
)
async def test_invalid_summary_is_rejected_and_the_context_is_unchanged(
    text: object, detail: str
) -> None:
    d = three_exchanges(TestCompactor(text), Reply(text="a4"))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            before = await s.snapshot()
            attempt = await s.compact()
            await s.wait_idle()
            after = await s.snapshot()
            await s.verify()
            await talk(s, "u4")  # the loop is still usable
        end = await outcome(journal, s.id)
        seq = await tags(journal, s.id)
    assert isinstance(end, CompactionRejected)
    assert (end.attempt_id, end.reason) == (attempt, "invalid_summary")
    assert detail in end.detail
    assert after.messages == before.messages and after.history_seq == before.history_seq
    assert after.compacting is None and after.compactions == 0
    at = seq.index("compaction.started")
    assert seq[at : at + 3] == ["compaction.started", "compaction.rejected", "input.queued"]
    assert request_texts(d.model.requests[-1])[0] == "u1"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("compactor", "detail"),
    [
        (TestCompactor(error=overloaded()), "compactor model failed (model.overloaded)"),
        (ModelCompactor(model=ScriptedModel([Reply(error=overloaded())])), "model.overloaded"),
        (
            ModelCompactor(model=ScriptedModel([Reply(text=summary(), fail_after_chunks=1)])),
            "compactor model failed (model.connection",
        ),
        (TestCompactor(error=RuntimeError("compactor bug")), "RuntimeError('compactor bug')"),
    ],
    ids=["model-error", "model-refuses", "stream-breaks", "compactor-bug"],
)
async def test_compactor_failure_is_rejected_failed(compactor: object, detail: str) -> None:
    d = three_exchanges(compactor, Reply(text="a4"))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            before = await s.snapshot()
            await s.compact()
            await s.wait_idle()
            after = await s.snapshot()
            await talk(s, "u4")
            await s.verify()
        end = await outcome(journal, s.id)
    assert isinstance(end, CompactionRejected) and end.reason == "failed"
    assert detail in end.detail
    assert after.messages == before.messages


async def test_nothing_to_replace_is_rejected_without_asking_the_compactor() -> None:
    compactor = TestCompactor(summary())
    d = three_exchanges(compactor, retained=2)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.compact()  # an empty context
            await s.wait_idle()
            await talk(s, "u1")
            await s.compact()  # one exchange, two kept
            await s.wait_idle()
        rejected = await events_of(journal, s.id, CompactionRejected)
    assert [r.reason for r in rejected] == ["failed", "failed"]
    assert all("nothing to replace" in r.detail for r in rejected)
    assert compactor.calls == []


# -- when compaction runs --------------------------------------------------------------


async def test_compact_while_a_turn_runs_waits_for_the_turn_and_holds_queued_input(
    autojump_clock: trio.abc.Clock,
) -> None:
    compactor = TestCompactor(summary(), delay=3.0)
    model = ScriptedModel(
        [
            Reply(text="a1"),
            Reply(text="a slow second reply", chunk_size=2, chunk_delay=1.0),
            Reply(text="a3"),
        ]
    )
    d = LoopDefinition(
        name="a", model=model, limits=Limits(retained_exchanges=1), compactor=compactor
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1")
            await s.submit("u2")
            await trio.sleep(1.5)
            assert (await s.snapshot()).status is LoopStatus.RUNNING
            await s.compact()  # not an error: it waits for the turn
            await s.submit("u3")  # waits for the turn, then for the compaction
            assert compactor.calls == []
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        seq = squash(await tags(journal, s.id))
    tail = seq[seq.index("turn.ended", seq.index("input.queued", 8)) :]
    assert tail == ["turn.ended", "compaction.started", "compaction.committed", *TURN]
    assert seq.count("input.queued") == 3
    [call] = compactor.calls
    assert [texts(m) for m in call.messages] == [["u1"], ["a1"]]
    assert request_texts(model.requests[-1])[1:] == ["u2", "a slow second reply", "u3"]
    assert state.turn_index == 3 and state.compactions == 1


async def test_input_submitted_during_an_idle_compaction_waits_then_runs(
    autojump_clock: trio.abc.Clock,
) -> None:
    compactor = TestCompactor(summary(), delay=10.0)
    d = three_exchanges(compactor, Reply(text="a4"))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            await s.compact()
            await compactor.entered.wait()
            await s.submit("u4")
            await s.steer("and be quick")
            assert (await s.snapshot()).status is LoopStatus.IDLE  # no turn started
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        seq = squash(await tags(journal, s.id))
        [committed] = await events_of(journal, s.id, CompactionCommitted)
    assert seq[-10:] == [
        "compaction.started",
        "input.queued",
        "steer.queued",
        "compaction.committed",
        *TURN,
    ]
    # Queued steering is not history yet, so the compaction still commits,
    # and the summary carries it as an open obligation.
    assert committed.obligations == ("steering waits to be applied: and be quick",)
    assert state.messages[0] == committed.summary
    assert state.turn_index == 4


async def test_manual_compactions_requested_together_run_one_after_another() -> None:
    compactor = TestCompactor(summary())
    model = ScriptedModel([Reply(text=f"a{i}") for i in range(1, 4)])
    d = LoopDefinition(
        name="a", model=model, limits=Limits(retained_exchanges=1), compactor=compactor
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            first = await s.compact()
            second = await s.compact()
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        seq = await tags(journal, s.id)
        starts = await events_of(journal, s.id, CompactionStarted)
        [rejected] = await events_of(journal, s.id, CompactionRejected)
    assert [st.attempt_id for st in starts] == [first, second]
    assert seq[-4:] == [
        "compaction.started",
        "compaction.committed",
        "compaction.started",
        "compaction.rejected",
    ]
    # The second finds only the first summary and the kept exchange.
    assert (rejected.attempt_id, rejected.reason) == (second, "failed")
    assert "nothing to replace" in rejected.detail
    assert len(compactor.calls) == 1
    assert state.compactions == 1


# -- a journal failure is an error, never a rejection ---------------------------------


class FailingJournal(ForwardingJournal):
    """A real journal whose append fails when it holds a ``fail_on`` event."""

    def __init__(self, inner: Journal, fail_on: type[Event]) -> None:
        super().__init__(inner)
        self.fail_on = fail_on

    async def append(
        self, lease: Any, drafts: Any, *, expected_seq: int, consumes: Any = ()
    ) -> list[Record]:
        if any(isinstance(d.event, self.fail_on) for d in drafts):
            raise JournalUnavailableError("the journal's disk went away")
        return await self.inner.append(lease, drafts, expected_seq=expected_seq, consumes=consumes)


async def test_a_journal_failure_while_committing_stops_the_loop_not_a_rejection() -> None:
    d = three_exchanges(TestCompactor(summary()))
    async with open_journal("memory:") as journal:
        failing = FailingJournal(journal, CompactionCommitted)
        # The session stops with the journal's own error, not a rejection.
        with pytest.raises(JournalUnavailableError):
            async with Session.create(failing, d) as s:
                await talk(s, "u1", "u2", "u3")
                await s.compact()
                await s.wait_idle()
        seq = await tags(journal, s.id)
    assert seq[-1] == "compaction.started"
    assert "compaction.rejected" not in seq and "compaction.committed" not in seq


async def test_interrupt_leaves_a_compaction_alone_and_shutdown_abandons_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    compactor = TestCompactor(summary(), delay=60.0)
    d = three_exchanges(compactor)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await talk(s, "u1", "u2", "u3")
            before = await s.snapshot()
            attempt = await s.compact()
            await compactor.entered.wait()
            assert await s.interrupt() is False  # no turn runs; the compaction goes on
            assert (await s.snapshot()).compacting == attempt
        # Leaving the session shuts it down mid-compaction: the attempt is
        # abandoned with only its start recorded, the history untouched.
        assert (await tags(journal, s.id))[-1] == "compaction.started"
        assert (await read_states(journal, s.id))["main"].messages == before.messages
        # Restore settles the abandoned attempt as failed.
        async with Session.restore(journal, s.id, three_exchanges(compactor)) as r:
            restored = await r.snapshot()
            await r.verify()
        [rejected] = await events_of(journal, s.id, CompactionRejected)
    assert (rejected.attempt_id, rejected.reason) == (attempt, "failed")
    assert restored.compacting is None and restored.messages == before.messages
