"""A session whose tools return large results: restored, checked by replay,
its checkpoints referring to the blobs the results stored; and a journal
written before blobs (schema 3) upgraded, restored and going on with them."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.blobs import is_split
from journal.events import SessionCheckpoint, ToolCompleted
from loopruntime import Limits, LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.cli.main import main
from session.replay import check
from tests.support.loops import records
from tests.support.old_journal import to_version_3_sqlite

from .backends import Backend, sqlite_url

SIZE = 300_000
"""Over the default threshold (256 KiB)."""


@tool(permission="allow")
async def dump(ctx: ToolContext, *, n: int, size: int) -> str:
    """Returns a text of ``size`` bytes after its number."""
    return f"{n}:" + "y" * size


def _dumping(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
        return Reply(text="dumped")
    asked = getattr(last.blocks[-1], "text", "")
    size = 10 if "small" in asked else SIZE
    return Reply(
        tool_calls=[ToolCall(name="dump", input={"n": len(request.messages), "size": size})]
    )


def definition() -> LoopDefinition:
    return LoopDefinition(
        name="dumper",
        model=ScriptedModel(_dumping),
        tools=[dump],
        limits=Limits(max_tool_result_bytes=2 * SIZE),
    )


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return Backend("memory", "memory:")
    if request.param == "sqlite":
        return Backend("sqlite", sqlite_url(tmp_path))
    return Backend("postgres", request.getfixturevalue("postgres_url"))


async def test_a_session_with_large_results_restores_and_checks(backend: Backend) -> None:
    threshold = 256 * 1024
    async with backend.open(threshold) as journal:
        async with Session.create(journal, definition(), session_id="big", checkpoint_every=7) as s:
            for i in range(3):
                await s.submit(f"dump {i}")
                await s.wait_idle()
        written = await records(journal, "big")
        results = [r for r in written if isinstance(r.event, ToolCompleted)]
        assert len(results) == 3
        checkpoints = [r for r in written if isinstance(r.event, SessionCheckpoint)]
        assert checkpoints, "the test wants a checkpoint after a large result"
        blobs = await backend.blobs()
        # One blob per distinct result; the checkpoints added none.
        assert len(blobs) == 3
        for r in [*results, *checkpoints]:
            body = await backend.stored_body("big", r.seq)
            assert b"y" * 1000 not in body
        assert any([is_split(await backend.stored_body("big", r.seq)) for r in checkpoints])
        report = await check(journal, "big")
        assert report.ok, report.summary()
    async with backend.open(threshold) as journal:
        async with Session.restore(journal, "big", definition()) as s:
            await s.submit("dump again")
            await s.wait_idle()
            await s.verify()
        report = await check(journal, "big")
        assert report.ok, report.summary()
        assert len(await backend.blobs()) == 4


def test_a_schema_3_journal_upgrades_restores_and_goes_on_with_blobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.db"

    async def small() -> None:
        async with open_journal(f"sqlite:///{path}") as journal:
            async with Session.create(journal, definition(), session_id="old") as s:
                await s.submit("something small")
                await s.wait_idle()

    # Written today with nothing large, then made what schema 3 stored.
    trio.run(small)
    to_version_3_sqlite(path)
    # A reader that must not write reads it as it is (a stand-in blob table).
    assert main(["replay", "--journal", str(path), "old", "--check"]) == 0
    assert capsys.readouterr().out.startswith("ok:")

    async def go_on() -> None:
        async with open_journal(f"sqlite:///{path}") as journal:
            async with Session.restore(journal, "old", definition()) as s:
                await s.submit("now large")
                await s.wait_idle()
            report = await check(journal, "old")
            assert report.ok, report.summary()
            written = await records(journal, "old")
            assert any(isinstance(r.event, ToolCompleted) for r in written)

    trio.run(go_on)
    assert main(["replay", "--journal", str(path), "old", "--check"]) == 0
    assert capsys.readouterr().out.startswith("ok:")
