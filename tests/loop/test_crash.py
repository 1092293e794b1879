"""Restore after a real crash: a child process is killed with SIGKILL.

Each test runs a scenario in a child process on a SQLite journal file, waits
for the child to say it reached its kill point, kills it, and restores the
session in this process.  Where only the journal a crash leaves matters, not
the dying process, a test copies the session's records up to the crash point
instead (``cut_at``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from journal import Journal, Record, open_journal
from journal.content import Text, ToolResult
from journal.events import (
    GateCancelled,
    GateOpened,
    ModelMessageCommitted,
    Notice,
    ToolAbandoned,
    TurnEnded,
)
from loopruntime import TRUNCATED_NOTICE, LoopDefinition, LoopStatus, Tool, ToolContext, tool
from loopruntime.context import unanswered_tool_uses
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.replay import check
from tests.support.crash_scenarios import SCRIPTS, definition, effects
from tests.support.loops import crashed_copy
from tests.support.processes import ROOT, kill_when_ready

pytestmark = pytest.mark.slow


async def crash_child(scenario: str, url: str, session_id: str, side: Path) -> None:
    """Run the scenario in a child process and SIGKILL it at its kill point."""
    await kill_when_ready(scenario, url, session_id, str(side))


async def read_all(journal: Journal, session_id: str) -> list[Record]:
    return [r async for r in journal.read(session_id)]


def assert_prefix(before: list[Record], after: list[Record]) -> None:
    """No committed record was lost or rewritten."""
    assert len(after) >= len(before)
    for old, new in zip(before, after, strict=False):
        assert (old.seq, old.id, old.digest) == (new.seq, new.id, new.digest)


async def test_restore_after_sigkill_mid_stream(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await crash_child("stream", url, "ses_stream", side)
    async with open_journal(url) as journal:
        before = await read_all(journal, "ses_stream")
        assert any(r.event.__struct_config__.tag == "model.output" for r in before)
        d = definition("stream", side, [Reply(text="fresh reply")])
        async with Session.restore(journal, "ses_stream", d) as s:
            await s.submit("again")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        after = await read_all(journal, "ses_stream")
    assert_prefix(before, after)
    committed = [r.event for r in after if isinstance(r.event, ModelMessageCommitted)]
    assert committed[0].notice == "truncated"
    blocks = committed[0].message.blocks
    assert blocks[-1] == Text(text=TRUNCATED_NOTICE)
    assert isinstance(blocks[0], Text) and blocks[0].text.startswith("a long")
    ended = [r.event for r in after if isinstance(r.event, TurnEnded)]
    assert [e.outcome for e in ended] == ["crashed", "completed"]
    assert state.messages[-1].blocks == (Text(text="fresh reply"),)
    assert state.status is LoopStatus.IDLE


async def test_permission_gate_survives_sigkill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await crash_child("permission", url, "ses_perm", side)
    async with open_journal(url) as journal:
        before = await read_all(journal, "ses_perm")
        d = definition("permission", side, [Reply(text="deployed, done")])
        async with Session.restore(journal, "ses_perm", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
            assert state.status is LoopStatus.AWAITING_GATE
            [gate] = state.open_gates
            assert gate.kind == "permission" and gate.tool_name == "deploy"
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        after = await read_all(journal, "ses_perm")
        model = d.model
    assert_prefix(before, after)
    assert [e["tool"] for e in effects(side)] == ["deploy"]  # ran exactly once
    assert state.last_outcome == "completed"
    request = model.requests[0]  # type: ignore[attr-defined]
    assert unanswered_tool_uses(request.messages) == []
    result = request.messages[-1].blocks[0]
    assert isinstance(result, ToolResult) and result.content == (Text(text="deployed prod"),)
    assert len([r for r in after if isinstance(r.event, GateOpened)]) == 1


async def test_resumable_question_survives_sigkill(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await crash_child("question", url, "ses_q", side)
    async with open_journal(url) as journal:
        d = definition("question", side, [Reply(text="ok")])
        async with Session.restore(journal, "ses_q", d) as s:
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
            assert gate.kind == "user_input" and gate.prompt == "go?"
            await s.answer(gate.gate_id, "yes")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
    acted = [e for e in effects(side) if e["phase"] == "acted"]
    assert len(acted) == 1  # re-entered with the answer; acted once
    request = d.model.requests[0]  # type: ignore[attr-defined]
    assert unanswered_tool_uses(request.messages) == []
    result = request.messages[-1].blocks[0]
    assert isinstance(result, ToolResult) and result.content == (Text(text="user said yes"),)
    assert state.last_outcome == "completed"


async def test_unknown_effect_after_sigkill_is_never_rerun(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await crash_child("effect", url, "ses_fx", side)
    [charged] = effects(side)
    async with open_journal(url) as journal:
        before = await read_all(journal, "ses_fx")
        d = definition("effect", side, [Reply(text="charged, thanks")])
        async with Session.restore(journal, "ses_fx", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
            assert state.status is LoopStatus.AWAITING_RESOLUTION
            [unknown] = state.unknown_effects
            assert unknown.execution_id == charged["execution"]
            await s.resolve(unknown.execution_id, "the payment provider shows the charge")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        after = await read_all(journal, "ses_fx")
    assert_prefix(before, after)
    assert effects(side) == [charged]  # never executed again
    notices = [r.event for r in after if isinstance(r.event, Notice)]
    assert any(n.code == "unknown_effects" and charged["execution"] in n.refs for n in notices)
    request = d.model.requests[0]  # type: ignore[attr-defined]
    assert unanswered_tool_uses(request.messages) == []
    assert state.last_outcome == "completed"


async def test_restored_journal_passes_the_checker(tmp_path: Path) -> None:
    from session.replay import check

    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await crash_child("effect", url, "ses_chk", side)
    async with open_journal(url) as journal:
        d = definition("effect", side, [Reply(text="done")])
        async with Session.restore(journal, "ses_chk", d) as s:
            await s.wait_idle()
            [unknown] = (await s.snapshot()).unknown_effects
            await s.resolve(unknown.execution_id, "refunded", is_error=True)
            await s.wait_idle()
        report = await check(journal, "ses_chk")
    assert report.ok, report.summary()


async def test_replay_safe_call_is_rerun_once_with_the_same_execution_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await crash_child("replay", url, "ses_rs", side)
    async with open_journal(url) as journal:
        d = definition("replay", side, [Reply(text="read it")])
        async with Session.restore(journal, "ses_rs", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        after = await read_all(journal, "ses_rs")
    first, again = effects(side)
    assert first["execution"] == again["execution"]  # the idempotency key held
    notices = [r.event for r in after if isinstance(r.event, Notice)]
    assert any(n.code == "replaying" and first["execution"] in n.refs for n in notices)
    assert not any(n.code == "unknown_effects" for n in notices)
    assert state.last_outcome == "completed" and state.unknown == {}


async def test_question_of_a_non_resumable_tool_becomes_an_unknown_effect(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await crash_child("survey", url, "ses_sv", side)
    async with open_journal(url) as journal:
        d = definition("survey", side, [Reply(text="noted")])
        async with Session.restore(journal, "ses_sv", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
            assert state.open_gates == []
            [unknown] = state.unknown_effects
            assert unknown.name == "survey"
            await s.resolve(unknown.execution_id, "the user never answered", is_error=True)
            await s.wait_idle()
            state = await s.snapshot()
        after = await read_all(journal, "ses_sv")
    cancelled = [r.event for r in after if r.event.__struct_config__.tag == "gate.cancelled"]
    assert [c.reason for c in cancelled] == ["restore_unavailable"]  # type: ignore[attr-defined]
    assert len(effects(side)) == 1
    assert state.last_outcome == "completed"


async def test_queued_steering_survives_a_crash_and_is_applied_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await crash_child("steer", url, "ses_st", side)
    async with open_journal(url) as journal:
        d = definition("steer", side, [Reply(text="deployed carefully")])
        async with Session.restore(journal, "ses_st", d) as s:
            await s.wait_idle()
            assert [q.text for q in (await s.snapshot()).steering] == ["deploy carefully"]
            [gate] = (await s.snapshot()).open_gates
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        after = await read_all(journal, "ses_st")
    applied = [r.event for r in after if r.event.__struct_config__.tag == "steer.applied"]
    assert len(applied) == 1
    request = d.model.requests[0]  # type: ignore[attr-defined]
    last = request.messages[-1]
    assert isinstance(last.blocks[0], ToolResult)
    assert last.blocks[-1] == Text(text="deploy carefully")
    assert state.steering == [] and state.last_outcome == "completed"


async def test_cli_resolve_settles_an_unknown_effect(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    url = f"sqlite:///{db}"
    side = tmp_path / "side.jsonl"
    await crash_child("effect", url, "ses_cli", side)
    [charged] = effects(side)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "session.cli.main", *args, "--journal", str(db)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )

    listed = await trio.to_thread.run_sync(cli, "sessions")
    assert "ses_cli" in listed.stdout
    wrong = await trio.to_thread.run_sync(
        lambda: cli("resolve", "ses_cli", "exe_nope", "--result", "x")
    )
    assert wrong.returncode == 2 and "no unknown outcome" in wrong.stderr
    done = await trio.to_thread.run_sync(
        lambda: cli("resolve", "ses_cli", charged["execution"], "--result", "charged 7")
    )
    assert done.returncode == 0, done.stderr
    async with open_journal(url) as journal:
        d = definition("effect", side, [Reply(text="all settled")])
        async with Session.restore(journal, "ses_cli", d) as s:
            await s.wait_idle()
            state = await s.snapshot()
    assert state.last_outcome == "completed"
    assert effects(side) == [charged]
    result = d.model.requests[0].messages[-1].blocks[0]  # type: ignore[attr-defined]
    assert isinstance(result, ToolResult) and result.content == (Text(text="charged 7"),)


def first_deploy(kind: str, runs: list[str]) -> Tool:
    if kind == "replay_safe":

        @tool(name="lookup", permission="allow", replay_safe=True)
        async def fetch(ctx: ToolContext, *, url: str) -> str:
            """Fetch a page (safe to run again)."""
            runs.append(ctx.execution_id)
            await trio.sleep(10)  # cut by the crash while it runs
            return "the page"

        return fetch

    @tool(name="lookup", permission="allow", resumable=True)
    async def confirm(ctx: ToolContext, *, url: str) -> str:
        """Ask before fetching (resumable)."""
        runs.append(ctx.execution_id)
        return await ctx.ask_user(f"fetch {url}?")

    return confirm


def next_deploy(kind: str, runs: list[str]) -> Tool:
    # The same tool, flags and all, but its input is now ``address``, not ``url``.
    @tool(
        name="lookup",
        permission="allow",
        replay_safe=kind == "replay_safe",
        resumable=kind == "resumable",
    )
    async def lookup(ctx: ToolContext, *, address: str) -> str:
        """Fetch a page."""
        runs.append(ctx.execution_id)
        return await ctx.ask_user(address) if kind == "resumable" else "the page"

    return lookup


@pytest.mark.parametrize("kind", ["replay_safe", "resumable"])
async def test_a_restored_call_whose_input_no_longer_fits_its_tool_is_an_unknown_effect(
    kind: str, autojump_clock: trio.abc.Clock
) -> None:
    """A deploy changed the tool's input schema while a call of it was open: the
    call cannot be re-entered, so restore leaves it to the host instead of
    re-entering a turn that would end the session (on every restore)."""
    runs: list[str] = []
    call = ToolCall(name="lookup", input={"url": "https://example.org"})
    before = LoopDefinition(
        name="t",
        model=ScriptedModel([Reply(tool_calls=[call])]),
        tools=[first_deploy(kind, runs)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, before) as s:
            await s.submit("look it up")
            await trio.sleep(1)
            crash = (await s.snapshot()).last_seq
        assert len(runs) == 1
        copy = await crashed_copy(journal, s.id, crash)
        after = LoopDefinition(
            name="t",
            model=ScriptedModel([Reply(text="resolved, thanks")]),
            tools=[next_deploy(kind, runs)],
        )
        async with Session.restore(journal, copy, after) as restored:
            await restored.wait_idle()
            state = await restored.snapshot()
            assert state.status is LoopStatus.AWAITING_RESOLUTION and state.open_gates == []
            [unknown] = state.unknown_effects
            assert unknown.execution_id == runs[0]
            await restored.resolve(unknown.execution_id, "the page was fetched")
            await restored.wait_idle()
            state = await restored.snapshot()
            await restored.verify()
        written = [r.event for r in await read_all(journal, copy)]
        assert (await check(journal, copy)).ok
    assert runs == [runs[0]]  # never re-entered under the new schema
    notices = [e for e in written if isinstance(e, Notice)]
    assert any(n.code == "unknown_effects" and runs[0] in n.refs for n in notices)
    assert not any(n.code == "replaying" for n in notices)
    [abandoned] = [e for e in written if isinstance(e, ToolAbandoned)]
    cancelled = [e.reason for e in written if isinstance(e, GateCancelled)]
    if kind == "replay_safe":
        assert abandoned.reason == "crashed" and cancelled == []
    else:
        # As for the question of a tool that is not resumable.
        assert abandoned.reason == "restore_unavailable"
        assert cancelled == ["restore_unavailable"]
    result = after.model.requests[0].messages[-1].blocks[0]  # type: ignore[attr-defined]
    assert isinstance(result, ToolResult) and result.content == (Text(text="the page was fetched"),)
    assert state.last_outcome == "completed" and state.unknown == {}


def test_scripts_cover_the_scenarios() -> None:
    assert set(SCRIPTS) == {
        "stream",
        "permission",
        "question",
        "effect",
        "replay",
        "survey",
        "steer",
        "form",
    }
