"""Principals: who gave each command, recorded on what it made, shown by
replay and traces; checked text; a host that knows its principals."""

from __future__ import annotations

import pytest
import trio

from journal import Journal, Record, open_journal
from journal.events import (
    CommandKeyed,
    CompactionStarted,
    GateOpened,
    GateResolved,
    InputCancelled,
    InputQueued,
    LoopModeChanged,
    LoopStarted,
    SteerQueued,
    ToolResolved,
    ToolStarted,
    TurnEnded,
)
from loopruntime import LoopDefinition, Mode, ToolContext, tool
from loopruntime.host import MAX_PRINCIPAL_LENGTH
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Client, CommandRefusedError, Host, Session
from session.replay import check, render_transcript
from tests.compaction.support import TestCompactor, summary
from tests.host.support import ask_definition, counting_definition, trio_clock_journal, wait_for
from tests.support.loops import events_of, records

DEFS = {"counter": counting_definition(), "asker": ask_definition()}


@tool(permission="ask")
async def deploy(ctx: ToolContext, *, target: str) -> str:
    """Deploy."""
    return f"deployed {target}"


@tool(permission="allow", resumable=True)
async def confirm(ctx: ToolContext, *, what: str) -> str:
    """Asks a person."""
    return await ctx.ask_user(f"confirm {what}?")


async def test_each_command_records_its_principal_and_replay_shows_it(
    autojump_clock: object,
) -> None:
    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="deploy", input={"target": "prod"})]),
            Reply(tool_calls=[ToolCall(name="confirm", input={"what": "it"})]),
            Reply(text="done"),
            Reply(text="second", stall_after_chunks=0),
        ]
    )
    d = LoopDefinition(
        name="ops",
        model=model,
        tools=[deploy, confirm],
        modes=[Mode(name="careful")],
        compactor=TestCompactor(summary()),
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("deploy", principal="alice", key="k1")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            await s.decide(gate.gate_id, True, principal="bob")
            await s.wait_idle()
            (question,) = (await s.snapshot()).open_gates
            await s.answer(question.gate_id, "yes", principal="carol")
            await s.wait_idle()
            await s.change_mode("careful", principal="dave")
            await s.compact(principal="erin")
            await s.wait_idle()
            await s.submit("again", principal="alice")
            queued = await s.submit("later", principal="frank")
            await s.cancel_queued(queued, principal="frank")
            await s.steer("faster", principal="gina")
            assert await s.interrupt(principal="hank")
            await s.wait_idle()
        by = {
            type(e).__name__: e.principal
            for e in [
                *(await events_of(journal, "s", CommandKeyed)),
                *(await events_of(journal, "s", GateResolved)),
                *(await events_of(journal, "s", LoopModeChanged)),
                *(await events_of(journal, "s", CompactionStarted)),
                *(await events_of(journal, "s", InputCancelled)),
                *(await events_of(journal, "s", SteerQueued)),
            ]
        }
        assert by == {
            "CommandKeyed": "alice",
            "GateResolved": "carol",  # the last one; both are checked below
            "LoopModeChanged": "dave",
            "CompactionStarted": "erin",
            "InputCancelled": "frank",
            "SteerQueued": "gina",
        }
        resolved = await events_of(journal, "s", GateResolved)
        assert [g.principal for g in resolved] == ["bob", "carol"]
        inputs = await events_of(journal, "s", InputQueued)
        assert [i.principal for i in inputs] == ["alice", "alice", "frank"]
        ended = await events_of(journal, "s", TurnEnded)
        assert [(t.outcome, t.principal) for t in ended] == [
            ("completed", None),
            ("interrupted", "hank"),
        ]
        text = render_transcript(await records(journal, "s"))
        for line in (
            "user [alice]: deploy",
            "! allowed by bob (once)",
            "! answered by carol: yes",
            "(mode: careful [dave])",
            "(compaction asked by erin)",
            "steer [gina]: faster",
            "── turn 2 interrupted by hank ──",
            "(submit, key 'k1' [alice])",
        ):
            assert line in text, line
        assert (await check(journal, "s")).ok


async def resolved_by_ops_bot(journal: Journal) -> str:
    """A session whose call's outcome is unknown after a crash, resolved on
    its restored copy by principal ``ops-bot``; the copy's id."""
    from tests.support.loops import crashed_copy

    @tool(permission="allow")
    async def pay(ctx: ToolContext) -> str:
        """Pays."""
        await trio.sleep_forever()
        return ""

    def definition(*replies: Reply) -> LoopDefinition:
        return LoopDefinition(name="payer", model=ScriptedModel(list(replies)), tools=[pay])

    first = definition(Reply(tool_calls=[ToolCall(name="pay", input={})]))
    async with Session.create(journal, first, session_id="s") as s:
        await s.submit("pay")
        async for item in s.subscribe():
            if isinstance(item, Record) and isinstance(item.event, ToolStarted):
                last = item.seq
                break
    # A crash right after the call started: its outcome is unknown.
    copy = await crashed_copy(journal, "s", last)
    async with Session.restore(journal, copy, definition(Reply(text="paid"))) as s:
        (started,) = (await s.snapshot()).unknown_effects
        await s.resolve(started.execution_id, "it went through", principal="ops-bot")
        await s.wait_idle()
    return copy


async def test_a_resolved_unknown_outcome_records_who_resolved_it(autojump_clock: object) -> None:
    async with open_journal("memory:") as journal:
        copy = await resolved_by_ops_bot(journal)
        (resolved,) = await events_of(journal, copy, ToolResolved)
        assert resolved.principal == "ops-bot"
        assert "← resolved by host [ops-bot]" in render_transcript(await records(journal, copy))


@pytest.mark.parametrize(
    ("principal", "error", "words"),
    [
        ("x" * (MAX_PRINCIPAL_LENGTH + 1), ValueError, "201 characters long; a principal holds"),
        (42, TypeError, "principal must be text"),
        ("", ValueError, "principal must not be empty"),
        ("\ud800", ValueError, "is not valid Unicode"),
    ],
    ids=["too-long", "not-text", "empty", "surrogate"],
)
async def test_a_bad_principal_is_refused_before_anything_is_committed(
    principal: object, error: type[Exception], words: str, autojump_clock: object
) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, counting_definition(), session_id="s") as s:
            head = len(await records(journal, "s"))
            with pytest.raises(error, match=words):
                await s.submit("hi", principal=principal)  # type: ignore[arg-type]
            with pytest.raises(error, match=words):
                await s.interrupt(principal=principal)  # type: ignore[arg-type]
            with pytest.raises(error, match=words):
                await Client(journal).submit("s", "hi", key="k", principal=principal)  # type: ignore[arg-type]
            assert len(await records(journal, "s")) == head
            assert await journal.inbox("s") == []
    # Exactly the longest is fine.
    async with open_journal("memory:") as journal:
        async with Session.create(journal, counting_definition()) as s:
            await s.submit("hi", principal="p" * MAX_PRINCIPAL_LENGTH)


async def test_principals_travel_through_the_inbox(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        sid = await client.create("asker", key="c1", principal="alice")
        await client.submit(sid, "confirm it", key="s1", principal="alice")
        await wait_for(lambda: _gate_open(journal, sid))
        (gate,) = [
            r.event for r in await records(journal, sid) if type(r.event).__name__ == "GateOpened"
        ]
        await client.answer(sid, gate.gate_id, "yes", key="a1", principal="bob")
        await client.wait(sid, "a1", timeout=30)
    (queued,) = await events_of(journal, sid, InputQueued)
    (answered,) = await events_of(journal, sid, GateResolved)
    assert (queued.principal, answered.principal) == ("alice", "bob")


async def test_who_created_a_session_is_on_its_first_record_and_in_replay(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        by_inbox = await client.create("asker", key="c1", principal="alice")
        await client.submit(by_inbox, "hello", key="s1", principal="bob")
        await client.wait(by_inbox, "s1", timeout=30)
    first = (await records(journal, by_inbox))[0]
    assert isinstance(first.event, LoopStarted) and first.event.principal == "alice"
    assert "started (asker, " in render_transcript([first])
    assert render_transcript([first]).rstrip().endswith(") [alice]")
    # In process too; a child or a session created without one names nobody.
    async with Session.create(journal, counting_definition(), principal="carol") as s:
        pass
    async with Session.create(journal, counting_definition()) as nobody:
        pass
    (started,) = await events_of(journal, s.id, LoopStarted)
    (unsaid,) = await events_of(journal, nobody.id, LoopStarted)
    assert (started.principal, unsaid.principal) == ("carol", None)
    with pytest.raises(ValueError, match="principal must not be empty"):
        async with Session.create(journal, counting_definition(), principal=""):
            pass


async def _gate_open(journal: Journal, sid: str) -> bool:
    return bool(await events_of(journal, sid, GateOpened))


async def test_a_host_refuses_principals_it_does_not_know(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5, principals={"alice"}) as host:
        sid = await client.create("counter", key="c1", principal="alice")
        await client.submit(sid, "from bob", key="s1", principal="bob")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait(sid, "s1", timeout=30)
        assert caught.value.outcome.error == "UnknownPrincipalError"
        assert "principal 'bob' is not one host h1 takes commands from" in str(caught.value)
        await client.submit(sid, "anonymous", key="s2")
        with pytest.raises(CommandRefusedError, match="a command naming no principal"):
            await client.wait(sid, "s2", timeout=30)
        await client.submit(sid, "from alice", key="s3", principal="alice")
        await client.wait(sid, "s3", timeout=30)
        # A session asked for by an unknown principal is never started.
        other = await client.create("counter", key="c2", principal="mallory")
        with pytest.raises(CommandRefusedError, match="'mallory'"):
            await client.wait(other, "c2", timeout=30)
        assert host.statistics().applied >= 5
    queued = await events_of(journal, sid, InputQueued)
    assert [q.principal for q in queued] == ["alice"]
    assert [r async for r in journal.read(other)] == []


async def test_a_host_takes_a_predicate_and_a_failing_one_refuses(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)

    def staff(principal: str | None) -> bool:
        if principal == "boom":
            raise RuntimeError("directory down")
        return principal is not None and principal.endswith("@staff")

    async with Host.open(journal, DEFS, host_id="h1", poll=0.5, principals=staff):
        sid = await client.create("counter", key="c1", principal="ann@staff")
        await client.submit(sid, "one", key="s1", principal="ann@staff")
        await client.wait(sid, "s1", timeout=30)
        await client.submit(sid, "two", key="s2", principal="boom")
        with pytest.raises(CommandRefusedError, match="UnknownPrincipalError"):
            await client.wait(sid, "s2", timeout=30)


def test_a_host_checks_its_principals() -> None:
    journal = trio_clock_journal()
    with pytest.raises(TypeError, match="collection of principals or a predicate"):
        Host(journal, DEFS, principals="alice")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="principal holds at most"):
        Host(journal, DEFS, principals={"x" * 300})


async def test_traces_carry_principals(autojump_clock: object) -> None:
    pytest.importorskip("opentelemetry")
    from session.traces.otel import SpanBuilder

    model = ScriptedModel([Reply(text="hi"), Reply(text="slow", stall_after_chunks=0)])
    d = LoopDefinition(name="t", model=model)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("hello", principal="alice")
            await s.wait_idle()
            await s.submit("again")
            await s.interrupt(principal="bob")
            await s.wait_idle()
        spans = SpanBuilder("s").feed_all(await records(journal, "s"))
    turns = [sp for sp in spans if sp.name.startswith("invoke_agent")]
    assert turns[0].attributes["enduser.id"] == "alice"
    assert "enduser.id" not in turns[1].attributes
    assert turns[1].attributes["loopruntime.interrupted_by"] == "bob"


async def test_traces_carry_the_principal_of_a_resolution(autojump_clock: object) -> None:
    pytest.importorskip("opentelemetry")
    from session.traces.otel import SpanBuilder

    async with open_journal("memory:") as journal:
        copy = await resolved_by_ops_bot(journal)
        spans = SpanBuilder(copy).feed_all(await records(journal, copy))
    (call,) = [sp for sp in spans if sp.name.startswith("execute_tool")]
    assert call.attributes["loopruntime.resolved_principal"] == "ops-bot"
    resolutions = [
        attributes
        for sp in spans
        for name, _, attributes in sp.events
        if name == "loopruntime.unknown_effect.resolved"
    ]
    assert [a["enduser.id"] for a in resolutions] == ["ops-bot"]


async def test_inference_and_tool_choices_record_their_principal(autojump_clock: object) -> None:
    from journal.events import LoopInferenceChanged, LoopToolsReplaced

    alt = ScriptedModel([], name="alt")
    d = LoopDefinition(
        name="t", model=ScriptedModel([]), models=[alt], tools=[deploy], tool_registry=[confirm]
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.change_inference(model="alt", principal="ops")
            await s.replace_tools(["confirm"], principal="ops")
        (inference,) = await events_of(journal, "s", LoopInferenceChanged)
        (tools,) = await events_of(journal, "s", LoopToolsReplaced)
        assert (inference.principal, tools.principal) == ("ops", "ops")
