"""Deploys: what a loop runs under is recorded, a restore under a changed
definition records or refuses the change, and the model and tools change by
command, as events that restore re-applies by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from journal import Draft, Journal, open_journal
from journal.events import (
    GateCancelled,
    InputCancelled,
    LoopConfigured,
    LoopInferenceChanged,
    LoopReconfigured,
    LoopToolsReplaced,
    ModelCallStarted,
    Notice,
    ToolAbandoned,
    ToolCompleted,
    TurnEnded,
    TurnStarted,
)
from loopruntime import (
    IdempotencyKeyError,
    Limits,
    LoopDefinition,
    LoopStatus,
    NotRegisteredError,
    ToolContext,
    tool,
)
from loopruntime.host import SubagentResult, describe, digest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import DefinitionDriftError, InvalidContentError, Session
from session.replay import build_tree, check, render_transcript, render_tree
from tests.support.loops import crashed_copy, events_of, records, tags


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory:"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@tool(permission="allow")
async def lookup(ctx: ToolContext, *, key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(permission="allow")
async def note(ctx: ToolContext, *, text: str) -> str:
    """Write a note."""
    return "noted"


@tool(name="lookup", permission="allow")
async def lookup_v2(ctx: ToolContext, *, key: str, exact: bool = False) -> str:
    """Look a key up (its schema grew a field)."""
    return f"value of {key}"


def answer(request: Any) -> Reply:
    return Reply(text=f"answer {len(request.messages)}")


def definition(
    *,
    model: str = "model-a",
    system: str = "You are careful.",
    tools: tuple[Any, ...] = (lookup,),
    limits: Limits | None = None,
    models: tuple[str, ...] = (),
    registry: tuple[Any, ...] = (),
) -> LoopDefinition:
    return LoopDefinition(
        name="deploy",
        model=ScriptedModel(answer, name=model),
        system=system,
        tools=list(tools),
        limits=limits or Limits(),
        models=[ScriptedModel(answer, name=n) for n in models],
        tool_registry=list(registry),
    )


# Each deploy, and what it changes: (name, definition, (what, name) of each change).
DEPLOYS: list[tuple[str, Callable[[], LoopDefinition], list[tuple[str, str]]]] = [
    ("model", lambda: definition(model="model-b"), [("model", "")]),
    ("system", lambda: definition(system="You are quick."), [("system", "")]),
    ("tool added", lambda: definition(tools=(lookup, note)), [("tool_added", "note")]),
    ("tool removed", lambda: definition(tools=()), [("tool_removed", "lookup")]),
    ("tool schema", lambda: definition(tools=(lookup_v2,)), [("tool_schema", "lookup")]),
    (
        "limit",
        lambda: definition(limits=Limits(max_tool_iterations=3)),
        [("limit", "max_tool_iterations")],
    ),
]


async def one_turn(journal: Journal) -> str:
    """A session of ``definition()`` that ran one turn."""
    async with Session.create(journal, definition()) as s:
        await s.submit("hello")
        await s.wait_idle()
    return s.id


async def test_a_loop_records_what_it_runs_under_when_it_starts(journal_url: str) -> None:
    async with open_journal(journal_url) as journal:
        session_id = await one_turn(journal)
        [configured] = await events_of(journal, session_id, LoopConfigured)
        seq = await tags(journal, session_id)
    d = definition()
    assert seq[:2] == ["loop.started", "loop.configured"]
    assert configured.config == describe(d)
    assert configured.config.model == "model-a"
    assert configured.config.model_settings == {"context_window": 200_000}
    assert configured.config.system == digest("You are careful.")
    assert configured.prompts == {digest("You are careful."): "You are careful."}
    [t] = configured.config.tools
    assert (t.name, t.permission, t.replay_safe, t.resumable, t.atomic) == (
        "lookup",
        "allow",
        False,
        False,
        False,
    )
    assert configured.config.limits["max_tool_iterations"] == 25


async def test_restore_with_the_same_definition_commits_nothing(journal_url: str) -> None:
    async with open_journal(journal_url) as journal:
        session_id = await one_turn(journal)
        before = await tags(journal, session_id)
        for drift in ("record", "refuse"):
            async with Session.restore(journal, session_id, definition(), drift=drift) as s:  # type: ignore[arg-type]
                assert (await s.snapshot()).model == "model-a"
        assert await tags(journal, session_id) == before


@pytest.mark.parametrize(("name", "changed", "expected"), DEPLOYS, ids=[d[0] for d in DEPLOYS])
async def test_a_deploy_is_recorded_and_the_loop_goes_on(
    journal_url: str,
    name: str,
    changed: Callable[[], LoopDefinition],
    expected: list[tuple[str, str]],
) -> None:
    new = changed()
    async with open_journal(journal_url) as journal:
        session_id = await one_turn(journal)
        async with Session.restore(journal, session_id, new) as s:
            state = await s.snapshot()
            await s.submit("and now?")
            await s.wait_idle()
            await s.verify()
        [reconfigured] = await events_of(journal, session_id, LoopReconfigured)
        calls = await events_of(journal, session_id, ModelCallStarted)
        all_records = await records(journal, session_id)
        report = await check(journal, session_id)
    assert [(c.what, c.name) for c in reconfigured.changes] == expected
    assert reconfigured.config == describe(new)
    assert state.configured == describe(new)
    # The state names the model really in use, and the next call used it.
    assert state.model == new.model.name
    assert calls[-1].model == new.model.name
    assert report.ok, report.summary()
    transcript = render_transcript(all_records)
    assert "⟳ definition changed: " in transcript
    tree = render_tree(build_tree(session_id, all_records))
    assert "⟳ loop.reconfigured" in tree
    if name == "model":
        assert "model model-a → model-b" in transcript
        assert f"stream main (deploy, {new.model.name})" in tree
    if name == "system":
        # The new prompt's text is in the journal once, for replay to show.
        assert reconfigured.prompts == {digest("You are quick."): "You are quick."}
        assert "You are quick." in transcript
    if name == "tool removed":
        assert "tool removed: lookup" in transcript


@pytest.mark.parametrize(("name", "changed", "expected"), DEPLOYS, ids=[d[0] for d in DEPLOYS])
async def test_a_refused_deploy_lists_the_difference_and_writes_nothing(
    journal_url: str,
    name: str,
    changed: Callable[[], LoopDefinition],
    expected: list[tuple[str, str]],
) -> None:
    async with open_journal(journal_url) as journal:
        session_id = await one_turn(journal)
        before = await tags(journal, session_id)
        held = [i.incarnation for i in await journal.sessions()]
        with pytest.raises(DefinitionDriftError, match="drift='record'") as caught:
            async with Session.restore(journal, session_id, changed(), drift="refuse"):
                raise AssertionError("a refused restore must not open")
        assert await tags(journal, session_id) == before
        # Refused before the lease: a live host would not have been fenced.
        assert [i.incarnation for i in await journal.sessions()] == held
    assert [(loop, c.what, c.name) for loop, c in caught.value.differences] == [
        ("main", what, n) for what, n in expected
    ]
    assert "loop main: " in str(caught.value)


async def test_two_differences_are_both_listed(journal_url: str) -> None:
    async with open_journal(journal_url) as journal:
        session_id = await one_turn(journal)
        with pytest.raises(DefinitionDriftError) as caught:
            new = definition(model="model-b", system="Other.")
            async with Session.restore(journal, session_id, new, drift="refuse"):
                pass
    message = str(caught.value)
    assert "model model-a → model-b" in message
    assert "system prompt " in message


async def test_a_drift_choice_that_is_neither_is_refused_by_name() -> None:
    async with open_journal("memory:") as journal:
        session_id = await one_turn(journal)
        before = await tags(journal, session_id)
        with pytest.raises(ValueError, match="drift='sometimes'"):
            async with Session.restore(journal, session_id, definition(), drift="sometimes"):  # type: ignore[arg-type]
                pass
        assert await tags(journal, session_id) == before


# -- inference and tools, by command --------------------------------------------------


async def test_change_inference_takes_effect_at_the_next_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The memory journal: the choice must land while the reply streams, and a
    # backend's commit threads would let virtual time run on meanwhile.
    slow = definition(models=("model-alt",))
    slow_model = ScriptedModel(
        lambda r: Reply(text="a slow reply", chunk_size=2, chunk_delay=1.0), name="model-a"
    )
    d = dataclasses.replace(slow, model=slow_model)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("first")
            await trio.sleep(2.5)  # the turn streams
            await s.change_inference(model="model-alt", max_tokens=300)
            mid = await s.snapshot()
            await s.wait_idle()
            await s.submit("second")
            await s.wait_idle()
            after = await s.snapshot()
            await s.verify()
        calls = await events_of(journal, s.id, ModelCallStarted)
        [changed] = await events_of(journal, s.id, LoopInferenceChanged)
        report = await check(journal, s.id)
    alt = d.find_model("model-alt")
    assert isinstance(alt, ScriptedModel)
    # The running turn finishes with the model it began with.
    assert mid.model == "model-a" and mid.chosen_model == "model-alt"
    assert [c.model for c in calls] == ["model-a", "model-alt"]
    assert after.model == "model-alt"
    assert (changed.model, changed.max_tokens) == ("model-alt", 300)
    assert [r.max_tokens for r in alt.requests] == [300]
    assert report.ok, report.summary()


async def test_restore_reapplies_the_chosen_model_by_name(journal_url: str) -> None:
    d = definition(models=("model-alt",))
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, d) as s:
            await s.change_inference(model="model-alt")
            await s.submit("hello")
            await s.wait_idle()
        before = await tags(journal, s.id)
        fresh = definition(models=("model-alt",))
        async with Session.restore(journal, s.id, fresh) as restored:
            state = await restored.snapshot()
            await restored.submit("again")
            await restored.wait_idle()
            await restored.verify()
        assert (await tags(journal, s.id))[: len(before)] == before
        calls = await events_of(journal, s.id, ModelCallStarted)
        report = await check(journal, s.id)
        # reset: back to the definition's model from the next turn.
        async with Session.restore(journal, s.id, definition(models=("model-alt",))) as restored:
            await restored.change_inference(reset=True)
            assert (await restored.snapshot()).model == "model-a"
    assert state.model == "model-alt" and state.chosen_model == "model-alt"
    assert [c.model for c in calls] == ["model-alt", "model-alt"]
    alt = fresh.find_model("model-alt")
    assert isinstance(alt, ScriptedModel) and len(alt.requests) == 1
    assert report.ok, report.summary()


@pytest.mark.parametrize("drift", ["record", "refuse"])
async def test_restore_refuses_a_chosen_model_no_longer_registered(
    journal_url: str, drift: str
) -> None:
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition(models=("model-alt",))) as s:
            await s.change_inference(model="model-alt")
        before = await tags(journal, s.id)
        with pytest.raises(NotRegisteredError, match=r"'model-alt'.*LoopDefinition\(models="):
            async with Session.restore(journal, s.id, definition(), drift=drift):  # type: ignore[arg-type]
                pass
        assert await tags(journal, s.id) == before


async def test_a_model_or_tool_not_registered_is_refused_by_name(journal_url: str) -> None:
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition(registry=(note,))) as s:
            before = await tags(journal, s.id)
            with pytest.raises(NotRegisteredError, match="no model named 'model-z'"):
                await s.change_inference(model="model-z")
            with pytest.raises(NotRegisteredError, match=r"no tool named 'nope'.*tool_registry"):
                await s.replace_tools(["note", "nope"])
            stranger = tool(name="note", permission="allow")(_other_note)
            with pytest.raises(NotRegisteredError, match="another input schema"):
                await s.replace_tools([stranger])
            for bad in ("note", [3], ["note", "note"]):
                with pytest.raises(InvalidContentError):
                    await s.replace_tools(bad)  # type: ignore[arg-type]
            for kwargs in ({}, {"max_tokens": 0}, {"max_tokens": True}, {"model": ""}):
                with pytest.raises(InvalidContentError):
                    await s.change_inference(**kwargs)  # type: ignore[arg-type]
            assert await tags(journal, s.id) == before


async def _other_note(ctx: ToolContext, *, body: str) -> str:
    """Another note tool."""
    return "noted"


async def test_replace_tools_offers_registered_tools_from_the_next_turn(journal_url: str) -> None:
    def tool_brain(request: Any) -> Reply:
        said = [getattr(b, "text", "") for b in request.messages[-1].blocks]
        if "take a note" in said:
            return Reply(tool_calls=[ToolCall(name="note", input={"text": "x"})])
        return Reply(text="ok")

    def make() -> LoopDefinition:
        return dataclasses.replace(
            definition(registry=(note,)), model=ScriptedModel(tool_brain, name="model-a")
        )

    d = make()
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, d) as s:
            await s.replace_tools(["lookup", note])
            await s.submit("take a note")
            await s.wait_idle()
            await s.verify()
        [replaced] = await events_of(journal, s.id, LoopToolsReplaced)
        [completed] = await events_of(journal, s.id, ToolCompleted)
        again = make()
        async with Session.restore(journal, s.id, again) as restored:
            assert (await restored.snapshot()).chosen_tools == ["lookup", "note"]
            await restored.submit("hello")
            await restored.wait_idle()
            await restored.replace_tools(None)
            await restored.submit("hello again")
            await restored.wait_idle()
        report = await check(journal, s.id)
    assert replaced.tools == ("lookup", "note")
    assert completed.disposition == "succeeded"
    assert [t.name for t in d.model.requests[0].tools] == ["lookup", "note"]  # type: ignore[attr-defined]
    offered = [[t.name for t in r.tools] for r in again.model.requests]  # type: ignore[attr-defined]
    assert offered == [["lookup", "note"], ["lookup"]]
    assert report.ok, report.summary()


# -- open work meeting a deploy ------------------------------------------------------


async def test_a_gate_on_a_removed_tool_is_cancelled_with_a_notice(journal_url: str) -> None:
    @tool(permission="ask")
    async def deploy(ctx: ToolContext, *, target: str) -> str:
        """Deploy (needs approval)."""
        return "deployed"

    def make(tools: tuple[Any, ...], *script: Reply) -> LoopDefinition:
        return dataclasses.replace(definition(tools=tools), model=ScriptedModel(script, name="m"))

    asks = Reply(tool_calls=[ToolCall(name="deploy", input={"target": "prod"})])
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, make((lookup, deploy), asks)) as s:
            await s.submit("deploy it")
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
        # The shutdown left the approval open (it waits only on a person).
        without = make((lookup,), Reply(text="done"))
        async with Session.restore(journal, s.id, without) as restored:
            await restored.wait_idle()
            state = await restored.snapshot()
            await restored.verify()
        notices = [n for n in await events_of(journal, s.id, Notice) if n.code == "tool_removed"]
        [cancelled] = await events_of(journal, s.id, GateCancelled)
        [completed] = await events_of(journal, s.id, ToolCompleted)
        report = await check(journal, s.id)
    assert cancelled.gate_id == gate.gate_id and cancelled.reason == "restore_unavailable"
    [notice] = notices
    assert notice.refs == (gate.gate_id,) and "deploy" in notice.text
    assert completed.disposition == "rejected"
    assert state.status is LoopStatus.IDLE and state.last_outcome == "completed"
    assert report.ok, report.summary()


async def test_a_call_open_when_its_schema_changed_is_an_unknown_effect(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(name="fetch", permission="allow", replay_safe=True)
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Fetch."""
        await trio.sleep(10)
        return "page"

    @tool(name="fetch", permission="allow", replay_safe=True)
    async def fetch_v2(ctx: ToolContext, *, address: str) -> str:
        """Fetch (renamed its field)."""
        return "page"

    def make(t: Any) -> LoopDefinition:
        script = [Reply(tool_calls=[ToolCall(name="fetch", input={"url": "u"})]), Reply(text="ok")]
        return dataclasses.replace(definition(tools=(t,)), model=ScriptedModel(script, name="m"))

    async with open_journal("memory:") as journal:
        async with Session.create(journal, make(fetch)) as s:
            await s.submit("go")
            await trio.sleep(1)
            crash = (await s.snapshot()).last_seq
        copy = await crashed_copy(journal, s.id, crash)
        async with Session.restore(journal, copy, make(fetch_v2)) as restored:
            state = await restored.snapshot()
        [reconfigured] = await events_of(journal, copy, LoopReconfigured)
        [abandoned] = await events_of(journal, copy, ToolAbandoned)
    assert [(c.what, c.name) for c in reconfigured.changes] == [("tool_schema", "fetch")]
    assert abandoned.reason == "crashed"
    assert state.status is LoopStatus.AWAITING_RESOLUTION


async def test_a_journal_without_a_configuration_gets_one_at_restore() -> None:
    """Journals written before loop.configured open, are configured once at
    their first restore (never refused: there is nothing to compare), and
    pass the checker."""
    async with open_journal("memory:") as journal:
        session_id = await one_turn(journal)
        # Rewrite it as an older version of the runtime would have: no configuration.
        lease = await journal.open_session("ses_old", create=True)
        drafts = [
            Draft(id=r.id, loop=r.loop, event=r.event)
            for r in await records(journal, session_id)
            if not isinstance(r.event, LoopConfigured)
        ]
        await journal.append(lease, drafts, expected_seq=0)
        async with Session.restore(journal, "ses_old", definition(), drift="refuse") as s:
            state = await s.snapshot()
        async with Session.restore(journal, "ses_old", definition()) as s:
            pass
        configured = await events_of(journal, "ses_old", LoopConfigured)
        report = await check(journal, "ses_old")
    assert len(configured) == 1
    assert state.configured == describe(definition())
    assert report.ok, report.summary()


# -- queued input after an interrupt --------------------------------------------------


async def test_input_left_queued_by_an_interrupt_starts_the_next_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    d = dataclasses.replace(
        definition(),
        model=ScriptedModel(lambda r: Reply(text="slow " * 8, chunk_size=2, chunk_delay=1.0)),
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("first")
            await trio.sleep(2.5)
            typed = await s.submit("second, typed while the first ran")
            machine = "in_machine"
            await s.loops["main"].send(
                SubagentResult(input_id=machine, child_loop="c1", text="done", background=True)
            )
            assert await s.interrupt()
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        started = await events_of(journal, s.id, TurnStarted)
        ended = await events_of(journal, s.id, TurnEnded)
        cancelled = await events_of(journal, s.id, InputCancelled)
        transcript = render_transcript(await records(journal, s.id))
    # The person's input started the next turn on its own, once the
    # interrupt had settled; the machine's input was cancelled, and says so.
    assert [e.outcome for e in ended] == ["interrupted", "completed"]
    assert started[1].input_ids == (typed,)
    assert [(c.input_id, c.reason) for c in cancelled] == [(machine, "turn_interrupted")]
    assert f"(input {machine} cancelled: turn_interrupted)" in transcript
    assert state.queued == [] and state.last_outcome == "completed"


async def test_steering_alone_waits_after_an_interrupt(autojump_clock: trio.abc.Clock) -> None:
    d = dataclasses.replace(
        definition(),
        model=ScriptedModel(lambda r: Reply(text="slow " * 8, chunk_size=2, chunk_delay=1.0)),
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("first")
            await trio.sleep(2.5)
            steer_id = await s.steer("shorter please")
            await s.interrupt()
            await s.wait_idle()
            waiting = await s.snapshot()
            await s.submit("go on")
            await s.wait_idle()
        started = await events_of(journal, s.id, TurnStarted)
    # Guidance was for the turn the person stopped: it starts nothing alone,
    # and goes with the next turn a person's input starts.
    assert [q.steer_id for q in waiting.steering] == [steer_id]
    assert waiting.turn_index == 1
    assert len(started) == 2 and started[1].steer_ids == (steer_id,)


def test_an_adapter_reports_its_settings_to_the_configuration() -> None:
    from loopruntime.models import AnthropicModel

    model = AnthropicModel("claude-test", max_tokens=1000, api_key="k-test", thinking=500)
    config = describe(LoopDefinition(name="a", model=model))
    assert config.model == "anthropic:claude-test"
    assert config.model_settings["max_tokens"] == 1000
    assert config.model_settings["thinking"] == {"type": "enabled", "budget_tokens": 500}
    assert "k-test" not in repr(config)


async def test_model_and_tool_choices_take_idempotency_keys() -> None:
    d = definition(models=("model-alt",), registry=(note,))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.change_inference(model="model-alt", key="choose-alt")
            await s.change_inference(model="model-alt", key="choose-alt")  # a retry
            await s.replace_tools(["note"], key="tools-1")
            await s.replace_tools(["note"], key="tools-1")
            with pytest.raises(IdempotencyKeyError, match="first used at seq"):
                await s.change_inference(max_tokens=100, key="choose-alt")
            with pytest.raises(IdempotencyKeyError):
                await s.replace_tools(["lookup"], key="tools-1")
            await s.verify()
        assert len(await events_of(journal, s.id, LoopInferenceChanged)) == 1
        assert len(await events_of(journal, s.id, LoopToolsReplaced)) == 1
        report = await check(journal, s.id)
    assert report.ok, report.summary()
