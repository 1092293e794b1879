"""Causes: every record names the record that made it happen."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import Record, open_journal
from journal.events import (
    ChildStarted,
    CommandKeyed,
    GateOpened,
    GateResolved,
    InputQueued,
    LoopStarted,
    ModelCallStarted,
    ModelMessageCommitted,
    ToolCompleted,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from loopruntime import Delegate, LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.replay import check, replay_command
from tests.support.loops import records


@tool(permission="ask")
async def deploy(ctx: ToolContext, *, target: str) -> str:
    """Deploy (needs approval)."""
    return f"deployed {target}"


def lead_brain(request: ModelRequest) -> Reply:
    n = len(request.messages)
    if n == 1:
        return Reply(tool_calls=[ToolCall(name="deploy", input={"target": "prod"})])
    if n == 3:
        return Reply(tool_calls=[ToolCall(name="research", input={"task": "look"})])
    return Reply(text="all done")


def definition() -> LoopDefinition:
    helper = LoopDefinition(name="helper", model=ScriptedModel(lambda _r: Reply(text="found")))
    return LoopDefinition(
        name="lead",
        model=ScriptedModel(lead_brain),
        tools=[deploy],
        delegates=[Delegate(name="research", description="Research", definition=helper)],
    )


def by_id(rs: list[Record]) -> dict[str, Record]:
    return {r.id: r for r in rs}


@pytest.fixture(params=["memory", "sqlite"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'j.db'}"


async def test_every_record_names_what_made_it_happen(
    journal_url: str, autojump_clock: trio.abc.Clock
) -> None:
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, definition()) as s:
            await s.submit("deploy, then research", key="req-1")
            async for r in s.subscribe():
                if isinstance(getattr(r, "event", None), GateOpened):
                    break
            gate = (await s.snapshot()).open_gates[0]
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()
        rs = await records(journal, s.id)
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    ids = by_id(rs)

    def cause(r: Record) -> Record:
        assert r.cause is not None, r
        return ids[r.cause]

    def kind(r: Record) -> type:
        return type(r.event)

    main = [r for r in rs if r.loop == "main"]
    keyed = next(r for r in main if isinstance(r.event, CommandKeyed))
    first_input = next(r for r in main if isinstance(r.event, InputQueued))
    assert keyed.cause is None and cause(first_input) is keyed
    for r in main:
        e = r.event
        if isinstance(e, TurnStarted):
            assert kind(cause(r)) is InputQueued
        elif isinstance(e, ModelCallStarted | TurnEnded):
            assert kind(cause(r)) in (TurnStarted, ModelCallStarted)
        elif isinstance(e, ModelMessageCommitted):
            assert kind(cause(r)) is ModelCallStarted
        elif isinstance(e, ToolStarted):
            assert kind(cause(r)) is ModelMessageCommitted
            assert r.id == e.execution_id
        elif isinstance(e, ToolCompleted):
            assert cause(r).id == e.execution_id
        elif isinstance(e, GateOpened):
            assert kind(cause(r)) is ModelMessageCommitted  # permission: before the call
        elif isinstance(e, GateResolved):
            assert r.cause is None  # decided without a key: from outside
        elif isinstance(e, ChildStarted):
            assert cause(r).id == e.provenance.execution_id
    child = [r for r in rs if r.loop != "main"]
    started = next(r for r in child if isinstance(r.event, LoopStarted))
    assert kind(cause(started)) is ToolStarted
    assert kind(cause(next(r for r in child if isinstance(r.event, InputQueued)))) is ToolStarted
    # Every cause names an earlier record.
    seqs = {r.id: r.seq for r in rs}
    assert all(seqs[r.cause] < r.seq for r in rs if r.cause is not None)
    assert sum(r.cause is not None for r in rs) > len(rs) // 2


async def test_replay_shows_the_causes(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as journal:
        async with Session.create(journal, definition(), session_id="ses_c") as s:
            await s.submit("deploy, then research")
            async for r in s.subscribe():
                if isinstance(getattr(r, "event", None), GateOpened):
                    break
            await s.decide((await s.snapshot()).open_gates[0].gate_id, allow=False)
            await s.wait_idle()
        rs = await records(journal, "ses_c")
    out: list[str] = []
    assert await replay_command(url, "ses_c", causes=True, out=out.append, err=out.append) == 0
    lines = out[0].splitlines()
    assert len(lines) == len(rs)
    started = next(r for r in rs if isinstance(r.event, TurnStarted))
    line = next(ln for ln in lines if f" {started.id}" in ln)
    queued = next(r for r in rs if isinstance(r.event, InputQueued))
    assert f"⟵ {queued.seq} input.queued" in line
    js: list[str] = []
    assert await replay_command(url, "ses_c", fmt="json", out=js.append, err=js.append) == 0
    assert f'"cause":"{started.cause}"' in js[0] and '"cause_seq":2' in js[0]
    bad: list[str] = []
    code = await replay_command(
        url, "ses_c", causes=True, check_only=True, out=bad.append, err=bad.append
    )
    assert code == 2 and "--causes" in bad[0]
