"""The collaboration grammar: decisions and their outcomes, on the memory and
SQLite journals, and the state a rule leaves across a restore."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from journal import Draft, Journal, Record, open_journal
from journal.events import (
    CollabStarted,
    CollabTaskFinished,
    CollabTaskStarted,
    CollabTurn,
    GateOpened,
    TurnEnded,
)
from loopruntime import Delegate, Limits, LoopDefinition
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.embedded.collaboration import (
    COUNTER_LIMIT,
    Collaboration,
    CollaborationError,
    CollabPhase,
    CollabState,
    Control,
    Decision,
    TaskSpec,
    Turn,
    Worker,
    next_step,
    person,
)
from session.embedded.collaboration.grammar import Fail
from session.replay import check
from tests.support.loops import crashed_copy, events_of, records

FAST = Worker(
    name="fast",
    definition=LoopDefinition(
        name="fast", model=ScriptedModel(lambda _r: Reply(text="fast result"))
    ),
)
SLOW = Worker(
    name="slow",
    definition=LoopDefinition(
        name="slow",
        model=ScriptedModel(lambda _r: Reply(text="slow " * 40, chunk_size=2, chunk_delay=1.0)),
    ),
)
SMALL = Worker(
    name="small",
    description="takes at most 64 bytes of input",
    definition=LoopDefinition(
        name="small",
        model=ScriptedModel(lambda _r: Reply(text="small result")),
        limits=Limits(max_input_bytes=64),
    ),
)
REVIEWER = person("reviewer", "a person who reviews")
HOST = LoopDefinition(name="host", model=ScriptedModel())


class Notes(msgspec.Struct):
    count: int
    seen: list[str] = []


@pytest.fixture(params=["memory", "sqlite"])
async def journal(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Journal]:
    url = "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as opened:
        yield opened


def task(key: str, worker: str = "fast", input: str = "do it") -> TaskSpec:
    return TaskSpec(key=key, worker=worker, input=input)


def scripted(plan: list[Any]) -> Any:
    """A coordinator answering ``plan[n - 1]`` on turn ``n``; past the plan,
    it completes with what every task said."""

    def coordinator(turn: Turn) -> Any:
        if turn.number <= len(plan):
            return plan[turn.number - 1]
        said = ",".join(f"{t.key}={t.status}" for t in turn.tasks)
        return Decision(mode="complete", output=said or "nothing")

    return coordinator


# (plan, Collaboration options, outcome: the output, or the failure code)
GRAMMAR = {
    "wait with new tasks is accepted": (
        [Decision(mode="wait", tasks=(task("a"),))],
        {},
        "a=completed",
    ),
    "continue with tasks, then wait": (
        [Decision(mode="continue", tasks=(task("a"),)), Decision(mode="wait")],
        {},
        "a=completed",
    ),
    "wait with nothing to wait for": (
        [Decision(mode="wait")],
        {},
        "collaboration.decision.invalid",
    ),
    "wait with output": (
        [Decision(mode="wait", tasks=(task("a"),), output="x")],
        {},
        "collaboration.decision.wait_with_output",
    ),
    "continue with output": (
        [Decision(mode="continue", output="done")],
        {},
        "collaboration.decision.continue_with_output",
    ),
    "complete requires an output": (
        [Decision(mode="complete")],
        {},
        "collaboration.decision.complete_without_output",
    ),
    "complete carries no tasks": (
        [Decision(mode="complete", output="x", tasks=(task("a"),))],
        {},
        "collaboration.decision.complete_with_tasks",
    ),
    "complete carries no controls": (
        [
            Decision(mode="continue", tasks=(task("s", "slow"),)),
            Decision(mode="complete", output="x", controls=(Control(key="s", kind="cancel"),)),
        ],
        {},
        "collaboration.decision.complete_with_controls",
    ),
    "complete cancels what still runs": (
        [
            Decision(mode="continue", tasks=(task("s", "slow"),)),
            Decision(mode="complete", output="early"),
        ],
        {},
        "early",
    ),
    "an unknown worker": (
        [Decision(mode="continue", tasks=(task("x", "nobody"),))],
        {},
        "collaboration.decision.invalid",
    ),
    "a task key used twice": (
        [Decision(mode="continue", tasks=(task("x"), task("x")))],
        {},
        "collaboration.decision.invalid",
    ),
    "a control naming no task": (
        [Decision(mode="continue", controls=(Control(key="a", kind="steer"),))],
        {},
        "collaboration.decision.invalid",
    ),
    "too many controls": (
        [
            Decision(mode="continue", tasks=(task("s", "slow"),)),
            Decision(mode="continue", controls=(Control(key="s", kind="steer", text="go"),) * 3),
        ],
        {"max_controls_per_turn": 2},
        "collaboration.limit.controls",
    ),
    "too many tasks": (
        [Decision(mode="continue", tasks=(task("a"), task("b")))],
        {"max_tasks": 1},
        "collaboration.limit.tasks",
    ),
    "too many at once": (
        [Decision(mode="continue", tasks=(task("a", "slow"), task("b", "slow")))],
        {"max_concurrent_tasks": 1},
        "collaboration.limit.concurrent_tasks",
    ),
    "too many turns": (
        [Decision(mode="continue"), Decision(mode="continue")],
        {"max_turns": 2},
        "collaboration.limit.turns",
    ),
    "a reply that is not a decision": (
        ["mode: complete"],
        {},
        "collaboration.protocol.invalid",
    ),
    "typed state that fits": (
        [Decision(mode="wait", state='{"count": 1}', tasks=(task("a"),))],
        {"state_type": Notes},
        "a=completed",
    ),
    "typed state that does not fit": (
        [Decision(mode="continue", state='{"count": 1, "seen": [3]}')],
        {"state_type": Notes},
        "collaboration.decision.invalid",
    ),
    "typed state is required": (
        [Decision(mode="wait", tasks=(task("a"),))],
        {"state_type": Notes},
        "collaboration.decision.invalid",
    ),
    "typed output that fits": (
        [Decision(mode="complete", output="42")],
        {"output_type": int},
        "42",
    ),
    "typed output that does not fit": (
        [Decision(mode="complete", output='"many"')],
        {"output_type": int},
        "collaboration.decision.invalid",
    ),
    "a start failure is a fact the next turn sees": (
        [Decision(mode="wait", tasks=(task("big", "small", "x" * 100),))],
        {},
        "big=start_failed",
    ),
}


@pytest.mark.parametrize(("plan", "options", "outcome"), GRAMMAR.values(), ids=GRAMMAR.keys())
async def test_the_grammar(
    journal: Journal,
    autojump_clock: trio.abc.Clock,
    plan: list[Any],
    options: dict[str, Any],
    outcome: str,
) -> None:
    collab = Collaboration(coordinator=scripted(plan), workers=[FAST, SLOW, SMALL], **options)
    failure: CollaborationError | None = None
    async with Session.create(journal, HOST) as s:
        try:
            output = await s.collaborate(collab, "go", collab_id="g")
        except CollaborationError as exc:
            failure, output = exc, ""
        await s.verify()
    report = await check(journal, s.id)
    assert report.ok, report.summary()
    turns = await events_of(journal, s.id, CollabTurn)
    if failure is None:
        assert output == outcome
        completes = turns[-1].decision.mode == "complete" and turns[-1].number == len(plan)
        assert len(turns) == len(plan) + (0 if completes else 1)
    else:
        assert failure.code == outcome, failure
        refused = 0 if failure.code == "collaboration.limit.turns" else 1
        # The refused decision is never recorded; the ones before it are.
        assert len(turns) == len(plan) - refused


async def test_a_typed_state_error_names_the_path(journal: Journal) -> None:
    plan = [Decision(mode="continue", state='{"count": 1, "seen": ["a", 3]}')]
    collab = Collaboration(coordinator=scripted(plan), workers=[FAST], state_type=Notes)
    async with Session.create(journal, HOST) as s:
        with pytest.raises(CollaborationError) as info:
            await s.collaborate(collab, "go")
    assert (info.value.code, info.value.path) == ("collaboration.decision.invalid", "state.seen[1]")
    assert "state.seen[1]" in str(info.value) and "Notes" in str(info.value)


async def test_a_model_reply_without_a_decision_breaks_the_protocol(journal: Journal) -> None:
    coordinator = LoopDefinition(
        name="coordinator", model=ScriptedModel([Reply(text="I would rather not decide.")])
    )
    collab = Collaboration(coordinator=coordinator, workers=[FAST])
    async with Session.create(journal, HOST) as s:
        with pytest.raises(CollaborationError) as info:
            await s.collaborate(collab, "go")
    assert info.value.code == "collaboration.protocol.invalid"


async def until_record(s: Session, found: Callable[[Record], bool]) -> Record:
    """The first record of ``s`` for which ``found`` holds (history, then live)."""
    async for r in s.subscribe():
        if isinstance(r, Record) and found(r):
            return r
    raise AssertionError("the session closed first")


def is_gate_of(loop_id: str) -> Callable[[Record], bool]:
    return lambda r: r.loop == loop_id and isinstance(r.event, GateOpened)


async def test_a_failed_start_waits_for_older_tasks_and_survives_restore(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    seen: list[Turn] = []

    def coordinator(turn: Turn) -> Decision:
        seen.append(turn)
        if turn.number == 1:
            return Decision(mode="continue", tasks=(task("p", "reviewer", "Ship it?"),))
        if turn.number == 2:
            return Decision(mode="wait", tasks=(task("big", "small", "x" * 100),))
        return Decision(mode="complete", output=str(sorted((t.key, t.status) for t in turn.tasks)))

    collab = Collaboration(coordinator=coordinator, workers=[REVIEWER, SMALL])
    async with Session.create(journal, HOST) as s:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(s.collaborate, collab, "go", collab_id="f"))
            failed = await until_record(s, lambda r: isinstance(r.event, CollabTaskFinished))
            await until_record(s, is_gate_of("collab:f/p"))
            nursery.cancel_scope.cancel()
    assert isinstance(failed.event, CollabTaskFinished)
    assert (failed.event.key, failed.event.status, failed.event.code) == (
        "big",
        "start_failed",
        "command.payload_too_large",
    )
    # The failed start did not end the wait: the older task still runs.
    assert [t.number for t in seen] == [1, 2]
    # A crash right after the failed start: restored, the person's gate is
    # open again, and the answer lets the coordinator see both facts.
    copy = await crashed_copy(journal, s.id, max(failed.seq, await gate_seq(journal, s.id)))
    async with Session.restore(journal, copy, HOST, also=collab) as s2:
        async with trio.open_nursery() as nursery:
            outcome: list[str] = []

            async def resume() -> None:
                outcome.append(await s2.resume_collaboration(collab, "f"))

            nursery.start_soon(resume)
            gate = await until_record(s2, is_gate_of("collab:f/p"))
            assert isinstance(gate.event, GateOpened)
            await s2.answer(gate.event.gate_id, "yes")
        await s2.verify()
    assert outcome == ["[('big', 'start_failed'), ('p', 'completed')]"]
    [big] = [t for t in seen[-1].tasks if t.key == "big"]
    assert big.code == "command.payload_too_large" and "64" in big.output
    assert (await check(journal, copy)).ok


async def gate_seq(journal: Journal, session_id: str) -> int:
    [gate] = [r for r in await records(journal, session_id) if isinstance(r.event, GateOpened)]
    return gate.seq


async def test_a_person_answers_a_task_through_its_gate_across_a_crash(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    def coordinator(turn: Turn) -> Decision:
        if turn.number == 1:
            return Decision(mode="wait", tasks=(task("ask", "reviewer", "Ship it?"),))
        [asked] = turn.tasks
        return Decision(mode="complete", output=f"the reviewer said {asked.output!r}")

    collab = Collaboration(coordinator=coordinator, workers=[REVIEWER])
    async with Session.create(journal, HOST) as s:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(s.collaborate, collab, "go", collab_id="p"))
            opened = await until_record(s, is_gate_of("collab:p/ask"))
            status = await s.collaboration_status("p")
            assert (status.phase, status.running) == (CollabPhase.WAITING_FOR_TASKS, ("ask",))
            nursery.cancel_scope.cancel()
    assert isinstance(opened.event, GateOpened)
    assert (opened.event.kind, opened.event.prompt) == ("user_input", "Ship it?")
    copy = await crashed_copy(journal, s.id, opened.seq)
    async with Session.restore(journal, copy, HOST, also=collab) as s2:
        assert [g.gate_id for g in s2.child("collab:p/ask").state.open_gates] == [  # type: ignore[union-attr]
            opened.event.gate_id
        ]
        async with trio.open_nursery() as nursery:
            outcome: list[str] = []

            async def resume() -> None:
                outcome.append(await s2.resume_collaboration(collab, "p"))

            nursery.start_soon(resume)
            await s2.answer(opened.event.gate_id, "ship it")
        await s2.verify()
    assert outcome == ["the reviewer said 'ship it'"]
    assert (await check(journal, copy)).ok


async def test_a_crash_between_a_task_record_and_its_worker_starts_it_on_resume(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    plan = [Decision(mode="wait", tasks=(task("a"),))]
    collab = Collaboration(coordinator=scripted(plan), workers=[FAST])
    async with Session.create(journal, HOST) as s:
        assert await s.collaborate(collab, "go", collab_id="c") == "a=completed"
    [started] = [r for r in await records(journal, s.id) if isinstance(r.event, CollabTaskStarted)]
    copy = await crashed_copy(journal, s.id, started.seq)
    async with Session.restore(journal, copy, HOST, also=collab) as s2:
        assert await s2.resume_collaboration(collab, "c") == "a=completed"
        await s2.verify()
    assert (await check(journal, copy)).ok


async def test_resume_refuses_a_stream_that_breaks_the_protocol(journal: Journal) -> None:
    collab = Collaboration(coordinator=scripted([]), workers=[FAST])
    async with Session.create(journal, HOST) as s:
        await s.collaborate(collab, "go", collab_id="p")
    drafts = [
        Draft(id=r.id, loop=r.loop, event=r.event, cause=r.cause)
        for r in await records(journal, s.id)
        if not r.loop.startswith("collab:") or isinstance(r.event, CollabStarted)
    ]
    bogus = CollabTaskFinished(collab_id="p", key="ghost", status="completed")
    drafts.append(Draft(id="bogus", loop="collab:p", event=bogus))
    lease = await journal.open_session("broken", create=True)
    await journal.append(lease, drafts, expected_seq=0)
    before = len(await records(journal, "broken"))
    async with Session.restore(journal, "broken", HOST, also=collab) as s2:
        with pytest.raises(CollaborationError) as info:
            await s2.resume_collaboration(collab, "p")
    assert info.value.code == "collaboration.protocol.invalid"
    assert "'ghost' was never started" in str(info.value)
    assert len(await records(journal, "broken")) == before


def test_an_exhausted_turn_counter_fails_the_collaboration() -> None:
    # A bound of None is the counter's end; reaching it is not a turn limit.
    unbounded = Collaboration(coordinator=scripted([]), workers=[FAST], max_turns=None)
    assert unbounded.turn_bound == COUNTER_LIMIT
    state = CollabState(collab_id="c", max_turns=COUNTER_LIMIT, turns=COUNTER_LIMIT)
    step = next_step(state)
    assert isinstance(step, Fail) and step.code == "engine.counter.exhausted"
    state.turns -= 1
    assert not isinstance(next_step(state), Fail)


@pytest.mark.parametrize(
    "options",
    [
        {"max_turns": COUNTER_LIMIT + 1},
        {"max_tasks": -1},
        {"max_concurrent_tasks": None},
        {"workers": [FAST, FAST]},
        {"state_type": object()},
    ],
)
def test_a_collaboration_with_bad_configuration_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(CollaborationError) as info:
        Collaboration(**{"coordinator": scripted([]), "workers": [FAST], **options})
    assert info.value.code == "collaboration.config.invalid"


async def test_a_coordinator_with_a_running_child_cannot_authorize_a_decision(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    def say(decision: Decision) -> Reply:
        return Reply(text=msgspec.json.encode(decision).decode())

    # The coordinator starts a background check (a person, so it runs until
    # answered), answers at once, and answers again once the check reports.
    coordinator = LoopDefinition(
        name="coordinator",
        model=ScriptedModel(
            [
                Reply(tool_calls=[ToolCall(name="check", input={"task": "Is it safe?"})]),
                say(Decision(mode="complete", output="premature")),
                say(Decision(mode="complete", output="after the check")),
            ]
        ),
        delegates=[
            Delegate(
                name="check",
                description="a person checks",
                definition=person("checker").definition,
                background=True,
            )
        ],
    )
    collab = Collaboration(coordinator=coordinator, workers=[FAST])
    async with Session.create(journal, HOST) as s:
        outcome: list[str] = []

        async def run() -> None:
            outcome.append(await s.collaborate(collab, "go", collab_id="u"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            ended = await until_record(
                s, lambda r: r.loop == "collab:u/coordinator" and isinstance(r.event, TurnEnded)
            )
            gate = await until_record(
                s, lambda r: r.loop.startswith("collab:u/coordinator/") and is_gate(r)
            )
            status = await s.collaboration_status("u")
            assert status.phase is CollabPhase.COORDINATOR_UNRESOLVED
            assert [u.split(" ")[0] for u in status.unresolved] == ["child"]
            assert gate.loop in status.unresolved[0]
            # Its answer was not taken: no decision is recorded.
            assert await events_of(journal, s.id, CollabTurn) == []
            assert isinstance(ended.event, TurnEnded) and isinstance(gate.event, GateOpened)
            await s.answer(gate.event.gate_id, "yes")
        await s.verify()
        done = await s.collaboration_status("u")
    assert outcome == ["after the check"]
    assert (done.phase, done.unresolved) == (CollabPhase.COMPLETED, ())
    [turn] = await events_of(journal, s.id, CollabTurn)
    assert turn.decision.output == "after the check"
    assert (await check(journal, s.id)).ok


def is_gate(r: Record) -> bool:
    return isinstance(r.event, GateOpened)


async def test_an_unknown_collaboration_is_a_named_error(journal: Journal) -> None:
    collab = Collaboration(coordinator=scripted([]), workers=[FAST])
    async with Session.create(journal, HOST) as s:
        before = len(await records(journal, s.id))
        for call in (s.collaboration_status("nope"), s.resume_collaboration(collab, "nope")):
            with pytest.raises(CollaborationError) as info:
                await call
            assert info.value.code == "collaboration.unknown"
            assert "no collaboration nope" in str(info.value)
        assert len(await records(journal, s.id)) == before


async def test_resume_refuses_a_changed_state_type(
    journal: Journal, autojump_clock: trio.abc.Clock
) -> None:
    plan = [Decision(mode="wait", state='{"count": 1}', tasks=(task("ask", "reviewer", "Ok?"),))]
    typed = Collaboration(coordinator=scripted(plan), workers=[REVIEWER], state_type=Notes)
    async with Session.create(journal, HOST) as s:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(s.collaborate, typed, "go", collab_id="t"))
            opened = await until_record(s, is_gate_of("collab:t/ask"))
            nursery.cancel_scope.cancel()
    copy = await crashed_copy(journal, s.id, opened.seq)
    untyped = Collaboration(coordinator=scripted(plan), workers=[REVIEWER])
    async with Session.restore(journal, copy, HOST, also=typed) as s2:
        before = len(await records(journal, copy))
        with pytest.raises(CollaborationError) as info:
            await s2.resume_collaboration(untyped, "t")
        assert info.value.code == "collaboration.schema.changed"
        assert "state_type" in str(info.value) and "Notes" in str(info.value)
        assert len(await records(journal, copy)) == before
        async with trio.open_nursery() as nursery:
            outcome: list[str] = []

            async def resume() -> None:
                outcome.append(await s2.resume_collaboration(typed, "t"))

            nursery.start_soon(resume)
            assert isinstance(opened.event, GateOpened)
            await s2.answer(opened.event.gate_id, "fine")
    assert outcome == ["ask=completed"]
