"""Deadlines: a tool that never returns, a model stream that stalls, a turn
over its deadline.  Time is trio's autojump clock: a hanging tool is
``trio.sleep_forever()`` and each deadline passes in virtual time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from journal import Journal, open_journal
from journal.content import Text, ToolResult
from journal.events import (
    DeadlinePassed,
    ModelCallFailed,
    ModelCallStarted,
    ModelMessageCommitted,
    Notice,
    ToolAbandoned,
    ToolCompleted,
    ToolStarted,
    TurnEnded,
)
from loopruntime import (
    INTERRUPTED_NOTICE,
    TRUNCATED_NOTICE,
    Limits,
    LoopDefinition,
    LoopStatus,
    Tool,
    ToolContext,
    deadlines,
    tool,
)
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.notices import INTERRUPTED_TOOL_RESULT
from session import Session
from session.replay import build_tree, check, render_transcript
from tests.support.loops import crashed_copy, events_of, records

# -- helpers ----------------------------------------------------------------------------

DAY = 3_600
"""Virtual seconds after which a test that should long have settled fails (an hour)."""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory:"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


class Runs:
    """What the tools of a test did: (tool, execution id) per run, in order."""

    def __init__(self) -> None:
        self.entered: list[tuple[str, str]] = []

    def hanging(self, name: str, **options: Any) -> Tool:
        """A tool that enters, records it, and never returns."""

        async def run(ctx: ToolContext) -> str:
            self.entered.append((name, ctx.execution_id))
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        run.__name__ = name
        return tool(permission="allow", **options)(run)


def call(name: str, **input: Any) -> Reply:
    return Reply(tool_calls=[ToolCall(name=name, input=input)])


def result_text(request: ModelRequest) -> str:
    [result] = [b for b in request.messages[-1].blocks if isinstance(b, ToolResult)]
    return " ".join(c.text for c in result.content if isinstance(c, Text))


async def checked(journal: Journal, session_id: str) -> None:
    report = await check(journal, session_id)
    assert report.ok, report.summary()


# -- tool calls --------------------------------------------------------------------------


async def test_a_tool_that_never_returns_becomes_an_unknown_effect_the_host_resolves(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    runs = Runs()
    charge = runs.hanging("charge", timeout=5)
    model = ScriptedModel([call("charge"), Reply(text="charged")])
    d = LoopDefinition(name="t", model=model, tools=[charge])
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, d) as s:
            await s.submit("charge it")
            await s.wait_idle()
            state = await s.snapshot()
            assert state.status is LoopStatus.AWAITING_RESOLUTION
            [unknown] = state.unknown_effects
            assert runs.entered == [("charge", unknown.execution_id)]
            assert state.turn_open  # the turn waits for the host, as after a crash
            await s.verify()
        # The unknown outcome outlives the process: restore finds it as it was.
        async with Session.restore(journal, s.id, d) as again:
            await again.wait_idle()
            assert [u.execution_id for u in (await again.snapshot()).unknown_effects] == [
                unknown.execution_id
            ]
            await again.resolve(unknown.execution_id, "the provider shows the charge")
            await again.wait_idle()
            state = await again.snapshot()
            await again.verify()
        [passed] = await events_of(journal, s.id, DeadlinePassed)
        [abandoned] = await events_of(journal, s.id, ToolAbandoned)
        notices = await events_of(journal, s.id, Notice)
        transcript = render_transcript(await records(journal, s.id))
        await checked(journal, s.id)
    assert (passed.deadline, passed.action, passed.ref, passed.seconds) == (
        "tool",
        "unknown",
        unknown.execution_id,
        5,
    )
    assert (abandoned.execution_id, abandoned.reason) == (unknown.execution_id, "deadline")
    [notice] = [n for n in notices if n.code == "unknown_effects"]
    assert notice.refs == (unknown.execution_id,)
    assert "5 s deadline" in notice.text and "resolve" in notice.text
    assert runs.entered == [("charge", unknown.execution_id)]  # never run again
    assert result_text(model.requests[-1]) == "the provider shows the charge"
    assert state.last_outcome == "completed" and not state.unknown
    assert f"⏱ deadline passed (5 s): tool call {unknown.execution_id}" in transcript


async def test_a_replay_safe_tool_runs_again_under_the_same_execution_id_then_fails(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    runs = Runs()
    fetch = runs.hanging("fetch", timeout=5, replay_safe=True)
    model = ScriptedModel([call("fetch"), Reply(text="the page would not load")])
    d = LoopDefinition(name="t", model=model, tools=[fetch], limits=Limits(tool_retries=2))
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, d) as s:
            await s.submit("read it")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        passed = await events_of(journal, s.id, DeadlinePassed)
        [completed] = await events_of(journal, s.id, ToolCompleted)
        [started] = await events_of(journal, s.id, ToolStarted)
        await checked(journal, s.id)
    execution = started.execution_id
    # Three runs in all (the first and two retries), each under the same id.
    assert runs.entered == [("fetch", execution)] * 3
    assert [(p.action, p.attempt, p.ref) for p in passed] == [
        ("retried", 1, execution),
        ("retried", 2, execution),
        ("failed", 3, execution),
    ]
    assert completed.disposition == "failed"
    text = result_text(model.requests[-1])
    assert "did not finish within its 5 s deadline in any of 3 runs" in text
    assert state.last_outcome == "completed" and not state.unknown


async def test_a_replay_safe_tool_that_finishes_on_its_retry_succeeds(
    autojump_clock: trio.abc.Clock,
) -> None:
    tries: list[str] = []

    @tool(permission="allow", replay_safe=True, timeout=5)
    async def fetch(ctx: ToolContext) -> str:
        """Slow the first time."""
        tries.append(ctx.execution_id)
        if len(tries) == 1:
            await trio.sleep_forever()
        return "the page"

    model = ScriptedModel([call("fetch"), Reply(text="read")])
    d = LoopDefinition(name="t", model=model, tools=[fetch])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("read it")
            await s.wait_idle()
        [passed] = await events_of(journal, s.id, DeadlinePassed)
        [completed] = await events_of(journal, s.id, ToolCompleted)
    assert passed.action == "retried" and len(set(tries)) == 1 and len(tries) == 2
    assert completed.disposition == "succeeded"
    assert result_text(model.requests[-1]) == "the page"


async def test_no_retries_fails_a_replay_safe_tool_at_its_first_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    runs = Runs()
    fetch = runs.hanging("fetch", timeout=5, replay_safe=True)
    model = ScriptedModel([call("fetch"), Reply(text="gave up")])
    d = LoopDefinition(name="t", model=model, tools=[fetch], limits=Limits(tool_retries=0))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("read it")
            await s.wait_idle()
        [passed] = await events_of(journal, s.id, DeadlinePassed)
    assert len(runs.entered) == 1 and (passed.action, passed.attempt) == ("failed", 1)
    assert "did not finish within its 5 s deadline and was cancelled" in result_text(
        model.requests[-1]
    )


async def test_a_restore_keeps_the_retry_budget_of_a_replay_safe_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    runs = Runs()
    fetch = runs.hanging("fetch", timeout=5, replay_safe=True)
    model = ScriptedModel([call("fetch"), Reply(text="gave up")])
    d = LoopDefinition(name="t", model=model, tools=[fetch])  # tool_retries=1
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("read it")
            # A lost budget would retry for ever.  (The memory journal only:
            # under the autojump clock a commit waiting on a socket or thread
            # lets virtual time jump to this bound.)
            with trio.fail_after(DAY):
                await s.wait_idle()
        # The process dies right after the first deadline's retry was committed.
        first = next(
            r.seq for r in await records(journal, s.id) if isinstance(r.event, DeadlinePassed)
        )
        copy = await crashed_copy(journal, s.id, first)
        runs.entered.clear()
        again = LoopDefinition(
            name="t", model=ScriptedModel([Reply(text="gave up")]), tools=[fetch]
        )
        async with Session.restore(journal, copy, again) as restored:
            with trio.fail_after(DAY):
                await restored.wait_idle()
            state = await restored.snapshot()
            await restored.verify()
        passed = await events_of(journal, copy, DeadlinePassed)
        await checked(journal, copy)
    # Restore re-runs the call: that run is its second, the last its budget allows.
    assert len(runs.entered) == 1
    assert [(p.action, p.attempt) for p in passed] == [("retried", 1), ("failed", 2)]
    assert state.last_outcome == "completed"


async def test_an_atomic_tool_cut_by_its_deadline_fails_visibly(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    runs = Runs()
    transfer = runs.hanging("transfer", timeout=5, atomic=True)
    model = ScriptedModel([call("transfer"), Reply(text="the transfer timed out")])
    d = LoopDefinition(name="t", model=model, tools=[transfer])
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, d) as s:
            await s.submit("move the money")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        [passed] = await events_of(journal, s.id, DeadlinePassed)
        [completed] = await events_of(journal, s.id, ToolCompleted)
        assert await events_of(journal, s.id, ToolAbandoned) == []
        await checked(journal, s.id)
    assert len(runs.entered) == 1  # never re-run: it did nothing, the model decides
    assert (passed.action, passed.seconds) == ("failed", 5)
    assert completed.disposition == "failed"
    assert "it is atomic, so the cancelled call had no effect" in result_text(model.requests[-1])
    assert state.last_outcome == "completed" and not state.unknown


async def test_limits_tool_timeout_applies_unless_the_tool_sets_its_own(
    autojump_clock: trio.abc.Clock,
) -> None:
    runs = Runs()
    plain = runs.hanging("plain", atomic=True)
    quick = runs.hanging("quick", atomic=True, timeout=1)

    @tool(permission="allow", timeout=None)
    async def patient(ctx: ToolContext) -> str:
        """Takes long, and may."""
        await trio.sleep(10_000)
        return "finally"

    model = ScriptedModel(
        [
            *(call("plain"), Reply(text="a")),
            *(call("quick"), Reply(text="b")),
            *(call("patient"), Reply(text="c")),
        ]
    )
    d = LoopDefinition(
        name="t", model=model, tools=[plain, quick, patient], limits=Limits(tool_timeout=30)
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            for text in ("plain", "quick", "patient"):
                await s.submit(text)
                await s.wait_idle()
        passed = await events_of(journal, s.id, DeadlinePassed)
    assert [p.seconds for p in passed] == [30, 1]
    assert result_text(model.requests[-1]) == "finally"


async def test_time_waiting_on_a_person_counts_against_no_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(permission="allow", timeout=10)
    async def confirm(ctx: ToolContext) -> str:
        """Asks, then works a little."""
        answer = await ctx.ask_user("go?")
        await trio.sleep(6)  # 6 s of its 10: the hours the person took do not count
        return f"went: {answer}"

    @tool(permission="ask", timeout=10)
    async def deploy(ctx: ToolContext) -> str:
        """Needs approval first."""
        await trio.sleep(6)
        return "deployed"

    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="confirm"), ToolCall(name="deploy")]),
            Reply(text="done"),
        ]
    )
    d = LoopDefinition(
        name="t", model=model, tools=[confirm, deploy], limits=Limits(turn_timeout=20)
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            [permission] = (await s.snapshot()).open_gates
            await trio.sleep(7200)
            await s.decide(permission.gate_id, allow=True)
            await s.wait_idle()
            [question] = (await s.snapshot()).open_gates
            await trio.sleep(7200)
            await s.answer(question.gate_id, "yes")
            await s.wait_idle()
            state = await s.snapshot()
        assert await events_of(journal, s.id, DeadlinePassed) == []
    assert state.last_outcome == "completed"
    texts = [
        " ".join(c.text for c in b.content if isinstance(c, Text))
        for b in model.requests[-1].messages[-1].blocks
        if isinstance(b, ToolResult)
    ]
    assert texts == ["went: yes", "deployed"]


# -- model calls --------------------------------------------------------------------------


async def test_a_model_stream_stalled_before_its_first_token_is_sent_again(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel([Reply(stall_after_chunks=0), Reply(text="hello")])
    d = LoopDefinition(name="t", model=model, limits=Limits(model_first_token_timeout=10))
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, d) as s:
            await s.submit("hi")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        [passed] = await events_of(journal, s.id, DeadlinePassed)
        [started] = await events_of(journal, s.id, ModelCallStarted)
        await checked(journal, s.id)
    assert (passed.deadline, passed.action, passed.attempt, passed.ref, passed.seconds) == (
        "model_first_token",
        "retried",
        1,
        started.effect_id,
        10,
    )
    assert len(model.requests) == 2 and model.requests[0] == model.requests[1]
    assert state.last_outcome == "completed"
    assert state.messages[-1].blocks == (Text(text="hello"),)


async def test_a_model_that_never_starts_fails_the_turn_after_its_retries(
    autojump_clock: trio.abc.Clock,
) -> None:
    stall = Reply(stall_after_chunks=0)
    model = ScriptedModel([stall, stall, stall, Reply(text="later")])
    d = LoopDefinition(
        name="t", model=model, limits=Limits(model_first_token_timeout=10, model_retries=2)
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("hi")
            await s.wait_idle()
            state = await s.snapshot()
            await s.submit("again")  # the loop is not stuck: the next turn runs
            await s.wait_idle()
            after = await s.snapshot()
        passed = await events_of(journal, s.id, DeadlinePassed)
        [failed] = await events_of(journal, s.id, ModelCallFailed)
        ended = await events_of(journal, s.id, TurnEnded)
        notices = await events_of(journal, s.id, Notice)
        await checked(journal, s.id)
    assert [(p.action, p.attempt) for p in passed] == [
        ("retried", 1),
        ("retried", 2),
        ("failed", 3),
    ]
    assert (failed.kind, failed.code) == ("timeout", "model.first_token_timeout")
    assert (ended[0].outcome, ended[0].code) == ("failed", "model.first_token_timeout")
    assert "in 3 attempts" in ended[0].detail
    # Nothing arrived: no words enter the context, a notice names the call.
    assert any(n.code == "truncated" for n in notices)
    assert state.last_outcome == "failed"
    assert after.last_outcome == "completed"


async def test_a_model_stream_stalled_after_its_first_token_keeps_what_arrived(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    model = ScriptedModel(
        [Reply(text="partial answer that stops", chunk_size=8, stall_after_chunks=2)]
    )
    d = LoopDefinition(name="t", model=model, limits=Limits(model_call_timeout=30))
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, d) as s:
            await s.submit("hi")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        [passed] = await events_of(journal, s.id, DeadlinePassed)
        [message] = await events_of(journal, s.id, ModelMessageCommitted)
        [ended] = await events_of(journal, s.id, TurnEnded)
        await checked(journal, s.id)
    assert (passed.deadline, passed.action, passed.seconds) == ("model_call", "truncated", 30)
    assert len(model.requests) == 1  # never sent again: it would repeat what arrived
    assert message.notice == "truncated"
    assert message.message.blocks == (
        Text(text="partial answer t"),
        Text(text=TRUNCATED_NOTICE),
    )
    assert (ended.outcome, ended.code) == ("failed", "model.call_timeout")
    assert state.last_outcome == "failed"


async def test_the_call_deadline_alone_also_retries_a_call_with_no_output(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel([Reply(stall_after_chunks=0), Reply(text="hello")])
    limits = Limits(model_first_token_timeout=None, model_call_timeout=30)
    d = LoopDefinition(name="t", model=model, limits=limits)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("hi")
            await s.wait_idle()
            state = await s.snapshot()
        [passed] = await events_of(journal, s.id, DeadlinePassed)
    assert (passed.deadline, passed.action, passed.seconds) == ("model_call", "retried", 30)
    assert state.last_outcome == "completed"


async def test_a_slow_but_steady_stream_is_not_cut_by_the_first_token_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    # 40 chunks of 2 s each: 80 s in all, far past the first-token deadline
    # but within the call's.
    model = ScriptedModel([Reply(text="x" * 40, chunk_size=1, chunk_delay=2.0)])
    limits = Limits(model_first_token_timeout=5, model_call_timeout=100)
    d = LoopDefinition(name="t", model=model, limits=limits)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("hi")
            await s.wait_idle()
            state = await s.snapshot()
        assert await events_of(journal, s.id, DeadlinePassed) == []
    assert state.last_outcome == "completed"


# -- turns --------------------------------------------------------------------------------


async def test_a_turn_over_its_deadline_is_interrupted_and_ends_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The memory journal: under the autojump clock a commit that waits on a
    # thread (SQLite) or a socket (PostgreSQL) lets virtual time jump past
    # the turn's deadline, so where the turn is cut would vary there.
    runs = Runs()
    wait = runs.hanging("wait")  # no tool deadline: only the turn's
    model = ScriptedModel([call("wait"), Reply(text="next turn")])
    d = LoopDefinition(name="t", model=model, tools=[wait], limits=Limits(turn_timeout=60))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("wait")
            await s.wait_idle()
            state = await s.snapshot()
            await s.submit("and now?")
            await s.wait_idle()
            after = await s.snapshot()
            await s.verify()
        passed = await events_of(journal, s.id, DeadlinePassed)
        [abandoned] = await events_of(journal, s.id, ToolAbandoned)
        ended = await events_of(journal, s.id, TurnEnded)
        tree = build_tree(s.id, await records(journal, s.id))
        await checked(journal, s.id)
    assert [(p.deadline, p.action, p.turn, p.seconds) for p in passed] == [
        ("turn", "interrupted", 1, 60)
    ]
    assert abandoned.reason == "interrupted"
    assert (ended[0].outcome, ended[0].kind, ended[0].code) == (
        "limit",
        "limit",
        "limit.turn_timeout",
    )
    assert "60 s deadline" in ended[0].detail
    assert state.last_outcome == "limit" and not state.unknown
    # Every tool_use was answered: the next turn's request is valid.
    assert result_text(model.requests[-1]) == INTERRUPTED_TOOL_RESULT
    assert after.last_outcome == "completed"
    assert '"code":"deadline.turn"' in msgspec.json.encode(tree).decode()


async def test_a_turn_over_its_deadline_is_settled_on_every_backend(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    # Wherever virtual time lets the deadline pass (see above), the turn is
    # settled the same way: answered, ended limit, and the loop goes on.
    runs = Runs()
    wait = runs.hanging("wait")
    model = ScriptedModel(lambda request: call("wait"))
    d = LoopDefinition(name="t", model=model, tools=[wait], limits=Limits(turn_timeout=60))
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, d) as s:
            for text in ("wait", "again"):
                await s.submit(text)
                await s.wait_idle()
                state = await s.snapshot()
                assert state.last_outcome == "limit" and not state.turn_open
                assert state.awaiting == [] and state.running == {}
            await s.verify()
        passed = await events_of(journal, s.id, DeadlinePassed)
        ended = await events_of(journal, s.id, TurnEnded)
        await checked(journal, s.id)
    assert [(p.deadline, p.turn) for p in passed] == [("turn", 1), ("turn", 2)]
    assert [(e.outcome, e.code) for e in ended] == [("limit", "limit.turn_timeout")] * 2


async def test_a_turn_deadline_cuts_a_streaming_reply_with_the_interrupted_notice(
    autojump_clock: trio.abc.Clock,
) -> None:
    model = ScriptedModel([Reply(text="word " * 100, chunk_size=5, chunk_delay=1.0)])
    d = LoopDefinition(name="t", model=model, limits=Limits(turn_timeout=10))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("talk")
            await s.wait_idle()
            state = await s.snapshot()
        [message] = await events_of(journal, s.id, ModelMessageCommitted)
        await checked(journal, s.id)
    assert message.notice == "interrupted"
    blocks = message.message.blocks
    assert blocks[-1] == Text(text=INTERRUPTED_NOTICE)
    assert isinstance(blocks[0], Text) and blocks[0].text.startswith("word word")
    assert state.last_outcome == "limit"


# -- limits are checked when made ---------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        "max_model_calls_per_turn",
        "max_tool_iterations",
        "max_tool_calls_per_turn",
        "max_parallel_tool_calls",
        "max_tool_result_bytes",
        "max_tokens",
    ],
)
@pytest.mark.parametrize("value", [0, -1])
def test_a_budget_below_one_is_refused_naming_the_field(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"Limits.{field} must be 1 or more, not {value}"):
        Limits(**{field: value})


@pytest.mark.parametrize(
    "field", ["tool_timeout", "model_first_token_timeout", "model_call_timeout", "turn_timeout"]
)
@pytest.mark.parametrize("value", [0, -5, math.nan, math.inf])
def test_a_timeout_that_is_not_a_positive_number_is_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"Limits.{field} must be a positive, finite number"):
        Limits(**{field: value})


@pytest.mark.parametrize("value", ["30", True, [5]])
def test_a_timeout_of_the_wrong_type_is_refused(value: object) -> None:
    with pytest.raises(
        TypeError, match=r"Limits\.turn_timeout must be a number of seconds or None"
    ):
        Limits(turn_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"tool_retries": -1}, ValueError, "Limits.tool_retries must be 0 or more"),
        ({"model_retries": -2}, ValueError, "Limits.model_retries must be 0 or more"),
        ({"retained_exchanges": -1}, ValueError, "Limits.retained_exchanges must be 0 or more"),
        ({"max_tokens": 1.5}, TypeError, "Limits.max_tokens must be an int"),
        ({"max_tool_calls_per_turn": True}, TypeError, "Limits.max_tool_calls_per_turn must"),
        ({"compact_at": 0}, ValueError, "Limits.compact_at must be above 0 and at most 1"),
        ({"compact_at": 1.5}, ValueError, "Limits.compact_at must be above 0 and at most 1"),
        ({"compact_at": "0.5"}, TypeError, "Limits.compact_at must be a fraction"),
    ],
)
def test_other_bad_limits_are_refused_naming_the_field(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Limits(**kwargs)


def test_good_limits_are_accepted() -> None:
    limits = Limits(
        tool_timeout=2.5, turn_timeout=600, tool_retries=0, model_retries=0, retained_exchanges=0
    )
    assert limits.model_first_token_timeout == 120 and limits.model_call_timeout == 600
    assert Limits(model_first_token_timeout=None, model_call_timeout=None).tool_retries == 1


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(0, ValueError), (-1, ValueError), (math.nan, ValueError), ("5", TypeError)],
)
def test_a_tool_timeout_that_is_not_a_positive_number_is_refused(
    timeout: object, error: type[Exception]
) -> None:
    async def slow(ctx: ToolContext) -> str:
        """Slow."""
        return ""

    with pytest.raises(error, match="tool slow: timeout must be"):
        tool(timeout=timeout)(slow)  # type: ignore[call-overload]


# -- timers without a deadline ------------------------------------------------------------


async def test_a_call_and_a_turn_without_deadlines_open_no_cancel_scope() -> None:
    """A timer of no deadline has no scope (nothing can cut its block), so a
    tool call and a turn with none pay no cancel scope, nor a place among the
    task's timers (pausing it would do nothing); with one, they do."""
    seen: list[list[bool]] = []

    @tool(permission="allow")
    async def probe(ctx: ToolContext) -> str:
        seen.append([t.scope is not None for t in deadlines.current()])
        return "ok"

    for limits in (Limits(), Limits(tool_timeout=30, turn_timeout=600)):
        model = ScriptedModel([call("probe"), Reply(text="done")])
        d = LoopDefinition(name="t", model=model, tools=[probe], limits=limits)
        async with open_journal("memory:") as journal:
            async with Session.create(journal, d) as s:
                await s.submit("go")
                await s.wait_idle()
                assert (await s.snapshot()).last_outcome == "completed"
    # The turn's timer, then the call's.
    assert seen == [[], [True, True]]


async def test_a_timer_without_a_deadline_cannot_be_given_one(autojump_clock: Any) -> None:
    with deadlines.timer(None) as clock:
        clock.reset(None)  # still none: allowed
        with clock.paused():
            await trio.lowlevel.checkpoint()
        with pytest.raises(deadlines.TimerError, match="cannot be given one"):
            clock.reset(5.0)
    assert not clock.passed and not clock.cancel_called
    with deadlines.timer(1.0) as timed:
        await trio.sleep(2)
    assert timed.passed and timed.cancel_called


async def test_a_reset_deadline_counts_from_the_opening_less_the_time_paused(
    autojump_clock: Any,
) -> None:
    # A model call's timer is reset at its first piece: the new deadline is
    # counted from when the timer opened, and time paused never counts.
    start = trio.current_time()
    with deadlines.timer(5.0) as clock:
        await trio.sleep(3)
        clock.reset(10.0)
        await trio.sleep(100)
    assert clock.passed
    assert trio.current_time() - start == pytest.approx(10.0)

    start = trio.current_time()
    with deadlines.timer(5.0) as clock:
        with clock.paused():
            await trio.sleep(4)
            clock.reset(6.0)  # while paused: counted from the pause on
        await trio.sleep(100)
    assert trio.current_time() - start == pytest.approx(10.0)

    start = trio.current_time()
    with deadlines.timer(5.0) as clock:
        with clock.paused():
            await trio.sleep(4)
        await trio.sleep(1)
        clock.reset(10.0)
        await trio.sleep(100)
    assert clock.passed
    assert trio.current_time() - start == pytest.approx(14.0)
