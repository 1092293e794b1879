"""Coordinator/worker collaboration."""

from __future__ import annotations

import msgspec
import pytest
import trio

import session.embedded.collaboration
from journal import open_journal
from journal.events import CollabEnded, CollabTaskFinished, CollabTurn
from loopruntime import LoopDefinition, ModelError
from loopruntime.models import Reply, ScriptedModel
from session import Session
from session.embedded.collaboration import (
    Collaboration,
    CollaborationError,
    Control,
    Decision,
    TaskSpec,
    Turn,
    Worker,
)
from session.replay import check
from tests.support.loops import events_of, records, tags

FAST = Worker(
    name="fast",
    description="answers at once",
    definition=LoopDefinition(
        name="fast", model=ScriptedModel(lambda _r: Reply(text="fast result"))
    ),
)
SLOW = Worker(
    name="slow",
    description="takes its time",
    definition=LoopDefinition(
        name="slow",
        model=ScriptedModel(lambda _r: Reply(text="slow " * 40, chunk_size=2, chunk_delay=1.0)),
    ),
)


async def test_start_wait_cancel_complete(autojump_clock: trio.abc.Clock) -> None:
    seen: list[Turn] = []

    def coordinator(turn: Turn) -> Decision:
        seen.append(turn)
        status = {t.key: t.status for t in turn.tasks}
        if not status:
            return Decision(
                mode="continue",
                state="started two",
                tasks=(
                    TaskSpec(key="a", worker="fast", input="do a"),
                    TaskSpec(key="b", worker="slow", input="do b"),
                ),
            )
        if status == {"a": "completed", "b": "running"}:
            return Decision(
                mode="continue",
                state="a is done; b is too slow",
                controls=(Control(key="b", kind="cancel"),),
            )
        if status.get("b") == "cancelled":
            done = {t.key: t.output for t in turn.tasks if t.status == "completed"}
            return Decision(mode="complete", output=f"a said: {done['a']}")
        return Decision(mode="wait", state=turn.state)

    collab = Collaboration(coordinator=coordinator, workers=[FAST, SLOW])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="host", model=ScriptedModel())) as s:
            output = await s.collaborate(collab, "do a and b", collab_id="c1")
            await s.verify()
        recs = await records(journal, s.id)
        report = await check(journal, s.id)
        stream = await tags(journal, s.id, loop="collab:c1")
    assert report.ok, report.summary()
    assert output == "a said: fast result"
    # Whether a finishes before the coordinator's second view is up to the
    # scheduler (trio varies the order of tasks made runnable together): if it
    # does, the coordinator cancels b at once; if not, it says wait, and a's
    # finish (even one landing while it decides) runs its next turn.
    waited = stream.count("collab.turn") == 4
    start = ["collab.started", "collab.turn", "collab.task_started", "collab.task_started"]
    end = [
        "collab.turn",
        "collab.controlled",
        "collab.task_finished",
        "collab.turn",
        "collab.ended",
    ]
    assert stream[:4] == start and stream[-5:] == end
    assert sorted(stream[4:-5]) == ["collab.task_finished", *(["collab.turn"] if waited else [])]
    assert [t.number for t in seen] == list(range(1, 5 if waited else 4))
    assert seen[1].state == "started two"
    cancelling = seen[-2]
    assert {t.key: t.status for t in cancelling.tasks} == {"a": "completed", "b": "running"}
    assert [(c.key, c.kind, c.receipt) for c in seen[-1].controls] == [("b", "cancel", "applied")]
    finished = {
        r.event.key: r.event.status for r in recs if isinstance(r.event, CollabTaskFinished)
    }
    assert finished == {"a": "completed", "b": "cancelled"}
    # the cancelled worker committed its own interrupted notice
    b_ends = [
        r.event
        for r in recs
        if r.loop == "collab:c1/b" and r.event.__struct_config__.tag == "turn.ended"
    ]
    assert [e.outcome for e in b_ends] == ["interrupted"]  # type: ignore[attr-defined]


async def test_wait_counts_a_task_that_finished_while_the_coordinator_decided(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def coordinator(turn: Turn) -> Decision:
        if turn.number == 1:
            return Decision(mode="continue", tasks=(TaskSpec(key="a", worker="fast", input="a"),))
        if turn.number == 2:
            assert [t.status for t in turn.tasks] == ["running"]
            await trio.sleep(60)  # a slow decision: the worker finishes meanwhile
            return Decision(mode="wait")
        return Decision(mode="complete", output=turn.tasks[0].output)

    collab = Collaboration(coordinator=coordinator, workers=[FAST])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="host", model=ScriptedModel())) as s:
            assert await s.collaborate(collab, "go", collab_id="w") == "fast result"
            await s.verify()
        assert (await check(journal, s.id)).ok


async def test_too_many_controls_and_turn_limit() -> None:
    turns = 0

    def chatty(turn: Turn) -> Decision:
        nonlocal turns
        turns += 1
        if turn.number == 1:
            return Decision(mode="continue", tasks=(TaskSpec(key="a", worker="fast", input="a"),))
        return Decision(
            mode="continue", controls=(Control(key="a", kind="steer", text="more"),) * 3
        )

    collab = Collaboration(coordinator=chatty, workers=[FAST], max_controls_per_turn=2)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="host", model=ScriptedModel())) as s:
            with pytest.raises(CollaborationError) as info:
                await s.collaborate(collab, "go")
    assert info.value.code == "collaboration.limit.controls"

    loops = Collaboration(
        coordinator=lambda turn: Decision(mode="continue"), workers=[FAST], max_turns=3
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="host", model=ScriptedModel())) as s:
            with pytest.raises(CollaborationError) as info:
                await s.collaborate(loops, "go")
    assert info.value.code == "collaboration.limit.turns"


async def test_a_model_driven_coordinator() -> None:
    """The coordinator is a loop answering in JSON (here the scripted model)."""
    plan = [
        Decision(mode="continue", tasks=(TaskSpec(key="q", worker="fast", input="question"),)),
        Decision(mode="wait"),
        Decision(mode="complete", output="the team says: fast result"),
    ]
    coordinator = LoopDefinition(
        name="coordinator",
        model=ScriptedModel([Reply(text="Plan: " + msgspec.json.encode(d).decode()) for d in plan]),
    )
    collab = Collaboration(coordinator=coordinator, workers=[FAST])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="host", model=ScriptedModel())) as s:
            output = await s.collaborate(collab, "ask the team", collab_id="m")
            await s.verify()
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    assert output == "the team says: fast result"
    asked = coordinator.model.requests[2].messages[-1].blocks[0].text  # type: ignore[attr-defined]
    assert '"status":"completed"' in asked and '"output":"fast result"' in asked


async def test_resume_after_restore_finishes_the_collaboration(
    autojump_clock: trio.abc.Clock,
) -> None:
    def coordinator(turn: Turn) -> Decision:
        if turn.number == 1:
            return Decision(mode="continue", tasks=(TaskSpec(key="s", worker="slow", input="s"),))
        if turn.tasks[0].status == "running":
            return Decision(mode="wait")
        return Decision(mode="complete", output=f"got {len(turn.tasks[0].output)} chars")

    collab = Collaboration(coordinator=coordinator, workers=[SLOW])
    host = LoopDefinition(name="host", model=ScriptedModel())
    async with open_journal("memory:") as journal:
        async with Session.create(journal, host) as s:
            with trio.move_on_after(5):  # stop mid-way: the session shuts down under it
                await s.collaborate(collab, "go", collab_id="r")
        async with Session.restore(journal, s.id, host, also=collab) as s2:
            # The worker was interrupted by the shutdown; after restore the
            # driver sees the task ended, and the coordinator completes.
            output = await s2.resume_collaboration(collab, "r")
            await s2.verify()
        report = await check(journal, s.id)
        finished = [
            r.event for r in await records(journal, s.id) if isinstance(r.event, CollabTaskFinished)
        ]
    assert report.ok, report.summary()
    assert [(f.key, f.status) for f in finished] == [("s", "interrupted")]
    assert output.startswith("got ") and output != "got 0 chars"


async def test_a_collaboration_id_is_never_used_twice_in_a_session() -> None:
    def coordinator(turn: Turn) -> Decision:
        if turn.number == 1:
            return Decision(
                mode="continue", tasks=(TaskSpec(key="a", worker="fast", input="do a"),)
            )
        if turn.tasks[0].status == "running":
            return Decision(mode="wait")
        return Decision(mode="complete", output="done")

    collab = Collaboration(coordinator=coordinator, workers=[FAST])
    host = LoopDefinition(name="host", model=ScriptedModel())
    async with open_journal("memory:") as journal:
        async with Session.create(journal, host) as s:
            assert await s.collaborate(collab, "first", collab_id="c1") == "done"
            before = await tags(journal, s.id)
            with pytest.raises(CollaborationError) as info:
                await s.collaborate(collab, "second", collab_id="c1")
            assert info.value.code == "collaboration.exists"
            assert await tags(journal, s.id) == before
            assert await s.collaborate(collab, "third", collab_id="c2") == "done"
            await s.verify()
        assert (await check(journal, s.id)).ok
        # A restored session knows the ids its journal already holds.
        async with Session.restore(journal, s.id, host, also=collab) as s:
            with pytest.raises(CollaborationError, match="already has a collaboration c2"):
                await s.collaborate(collab, "fourth", collab_id="c2")
        assert (await check(journal, s.id)).ok


async def test_a_failing_coordinator_ends_with_its_own_code() -> None:
    overloaded = ModelError("the service is overloaded", kind="overloaded", code="model.overloaded")
    coordinator = LoopDefinition(name="coordinator", model=ScriptedModel([Reply(error=overloaded)]))
    collab = Collaboration(coordinator=coordinator, workers=[FAST])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="host", model=ScriptedModel())) as s:
            with pytest.raises(CollaborationError) as info:
                await s.collaborate(collab, "go", collab_id="f")
        [ended] = [
            r.event for r in await records(journal, s.id) if isinstance(r.event, CollabEnded)
        ]
    assert info.value.code == "model.overloaded"
    assert (ended.code, "the service is overloaded" in ended.detail) == ("model.overloaded", True)


async def test_resume_keeps_the_limits_it_started_with(autojump_clock: trio.abc.Clock) -> None:
    def steering(turn: Turn) -> Decision:
        # One slow task after another, waiting for each: two turns per task.
        if any(t.status == "running" for t in turn.tasks):
            return Decision(mode="wait")
        key = f"s{len(turn.tasks)}"
        return Decision(mode="continue", tasks=(TaskSpec(key=key, worker="slow", input=key),))

    host = LoopDefinition(name="host", model=ScriptedModel())
    started = Collaboration(coordinator=steering, workers=[SLOW], max_turns=6)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, host) as s:
            with trio.move_on_after(100):  # stopped mid-way: some turns ran, not all
                await s.collaborate(started, "go", collab_id="l")
        turns_before = len(await events_of(journal, s.id, CollabTurn))
        assert 0 < turns_before < 6
        # The restoring code passes looser limits: the recorded ones still hold,
        # and the turns before the restart count.
        looser = Collaboration(coordinator=steering, workers=[SLOW], max_turns=100)
        async with Session.restore(journal, s.id, host, also=looser) as s2:
            with pytest.raises(CollaborationError) as info:
                await s2.resume_collaboration(looser, "l")
        assert len(await events_of(journal, s.id, CollabTurn)) == 6
        assert (await check(journal, s.id)).ok
    assert info.value.code == "collaboration.limit.turns"


async def test_resume_refuses_a_running_task_whose_worker_is_not_given(
    autojump_clock: trio.abc.Clock,
) -> None:
    def coordinator(turn: Turn) -> Decision:
        if turn.number == 1:
            return Decision(mode="continue", tasks=(TaskSpec(key="s", worker="slow", input="s"),))
        return Decision(mode="wait")

    host = LoopDefinition(name="host", model=ScriptedModel())
    collab = Collaboration(coordinator=coordinator, workers=[SLOW])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, host) as s:
            with trio.move_on_after(5):
                await s.collaborate(collab, "go", collab_id="m")
        before = await tags(journal, s.id)
        elsewhere = Collaboration(coordinator=coordinator, workers=[FAST])
        async with Session.restore(journal, s.id, host, also=collab) as s2:
            restored = await tags(journal, s.id)
            with pytest.raises(CollaborationError) as info:
                await s2.resume_collaboration(elsewhere, "m")
            assert await tags(journal, s.id) == restored  # refused before anything ran
    assert info.value.code == "collaboration.worker.missing"
    assert "slow" in str(info.value)
    assert len(restored) >= len(before)


def test_collaboration_exports_its_names() -> None:
    names = {
        "COUNTER_LIMIT", "CollabPhase", "CollabState", "CollabStatus", "Collaboration",
        "CollaborationError", "Control", "Decision", "TaskSpec", "TaskView", "Turn", "Worker",
        "WorkerInfo", "fold_collaboration", "next_step", "parse_decision", "person",
    }  # fmt: skip
    assert set(session.embedded.collaboration.__all__) == names
    for name in names:
        assert getattr(session.embedded.collaboration, name) is not None
