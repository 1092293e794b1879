"""The loop's lifecycle tables (``loopruntime/lifecycle.py``), row by row,
and the loop's phase as a session drives it through them."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from journal import open_journal
from journal.events import TurnEnded
from loopruntime import LifecycleError, LoopDefinition, Phase, ToolContext, tool
from loopruntime.lifecycle import (
    ACTOR,
    TRANSITIONS,
    Actor,
    ActorStep,
    Step,
    advance,
    held,
    move,
)
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session

ID, T, C, TC, S, X = (
    Phase.IDLE,
    Phase.TURN,
    Phase.COMPACTING,
    Phase.TURN_COMPACTING,
    Phase.STOPPING,
    Phase.STOPPED,
)

# (phase, step, next phase or None when refused): every pair, written out.
EXPECTED: list[tuple[Phase, Step, Phase | None]] = [
    (ID, Step.START_TURN, T),
    (ID, Step.END_TURN, None),
    (ID, Step.START_COMPACTION, C),
    (ID, Step.END_COMPACTION, None),
    (ID, Step.SHUT_DOWN, S),
    (ID, Step.CLOSE, X),
    (T, Step.START_TURN, None),
    (T, Step.END_TURN, ID),
    (T, Step.START_COMPACTION, TC),
    (T, Step.END_COMPACTION, None),
    (T, Step.SHUT_DOWN, S),
    (T, Step.CLOSE, X),
    (C, Step.START_TURN, None),
    (C, Step.END_TURN, None),
    (C, Step.START_COMPACTION, None),
    (C, Step.END_COMPACTION, ID),
    (C, Step.SHUT_DOWN, S),
    (C, Step.CLOSE, X),
    (TC, Step.START_TURN, None),
    (TC, Step.END_TURN, C),
    (TC, Step.START_COMPACTION, None),
    (TC, Step.END_COMPACTION, T),
    (TC, Step.SHUT_DOWN, S),
    (TC, Step.CLOSE, X),
    (S, Step.START_TURN, None),
    (S, Step.END_TURN, S),
    (S, Step.START_COMPACTION, None),
    (S, Step.END_COMPACTION, S),
    (S, Step.SHUT_DOWN, None),
    (S, Step.CLOSE, X),
    (X, Step.START_TURN, None),
    (X, Step.END_TURN, X),
    (X, Step.START_COMPACTION, None),
    (X, Step.END_COMPACTION, X),
    (X, Step.SHUT_DOWN, None),
    (X, Step.CLOSE, X),
]


def test_the_expected_rows_cover_every_phase_and_step() -> None:
    assert {(p, s) for p, s, _ in EXPECTED} == {(p, s) for p in Phase for s in Step}
    assert set(TRANSITIONS) == set(Phase)


@pytest.mark.parametrize(("phase", "step", "after"), EXPECTED)
def test_transition(phase: Phase, step: Step, after: Phase | None) -> None:
    if after is None:
        with pytest.raises(LifecycleError) as caught:
            advance(phase, step, "main")
        assert (caught.value.phase, caught.value.step) == (phase.value, step.value)
        assert caught.value.loop_id == "main"
        assert f"phase {phase.value!r}" in str(caught.value)
    else:
        assert advance(phase, step) is after


# (step, whether a pause holds it): every step, written out.
HOLDS = [
    (Step.START_TURN, True),
    (Step.START_COMPACTION, True),
    (Step.END_TURN, False),
    (Step.END_COMPACTION, False),
    (Step.SHUT_DOWN, False),
    (Step.CLOSE, False),
]


def test_the_pause_rows_cover_every_step() -> None:
    assert sorted(step.value for step, _ in HOLDS) == sorted(step.value for step in Step)


@pytest.mark.parametrize(("step", "waits"), HOLDS)
def test_a_pause_holds_only_the_steps_that_begin_work(step: Step, waits: bool) -> None:
    assert held(step, paused=True) is waits
    assert held(step, paused=False) is False


def test_stopped_is_the_only_phase_nothing_leaves() -> None:
    for phase, row in TRANSITIONS.items():
        leaves = {after for after in row.values() if after is not phase}
        assert (not leaves) == (phase is Phase.STOPPED), phase


@pytest.mark.parametrize(
    ("actor", "step", "after"),
    [
        (Actor.SERVING, ActorStep.PARK, Actor.PARKED),
        (Actor.SERVING, ActorStep.WAKE, None),
        (Actor.PARKED, ActorStep.WAKE, Actor.SERVING),
        (Actor.PARKED, ActorStep.PARK, None),
    ],
)
def test_actor_transition(actor: Actor, step: ActorStep, after: Actor | None) -> None:
    assert set(ACTOR) == set(Actor)
    if after is None:
        with pytest.raises(LifecycleError):
            move(actor, step)
    else:
        assert move(actor, step) is after


async def test_a_session_walks_the_phases(autojump_clock: Any) -> None:
    """Idle and parked (no task) before and after a turn; a turn's phase
    while it runs; stopped at the end."""
    release = trio.Event()
    entered = trio.Event()

    @tool(permission="allow")
    async def slow(ctx: ToolContext) -> str:
        """Waits."""
        entered.set()
        await release.wait()
        return "done"

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="slow", input={})]), Reply(text="ok")])
    definition = LoopDefinition(name="a", model=model, tools=[slow])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            loop = s.loops["main"]
            assert loop.phase is Phase.IDLE and loop.parked
            await s.submit("go")
            await entered.wait()
            assert loop.phase is Phase.TURN
            release.set()
            await s.wait_idle()
            assert loop.phase is Phase.IDLE and loop.parked
        assert loop.phase is Phase.STOPPED


async def test_an_interrupt_hands_the_turn_its_stop(autojump_clock: Any) -> None:
    """The interrupt's principal reaches the turn's end as a value (no
    attribute of the loop carries it)."""
    entered = trio.Event()

    @tool(permission="allow")
    async def forever(ctx: ToolContext) -> str:
        """Never returns."""
        entered.set()
        await trio.sleep_forever()
        return ""

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="forever", input={})])])
    definition = LoopDefinition(name="a", model=model, tools=[forever])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("go")
            await entered.wait()
            assert await s.interrupt(principal="ops@example") is True
            await s.wait_idle()
            state = await s.snapshot()
            assert s.loops["main"].phase is Phase.IDLE
        assert state.last_outcome == "interrupted"
        ended = [r.event async for r in journal.read(s.id) if isinstance(r.event, TurnEnded)]
        assert ended[-1].principal == "ops@example"
