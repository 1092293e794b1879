"""Every public read of a fork answers at once, on every backend: the fork's
loops start with their source's seq, which the fork itself may never reach,
and no read may wait for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from journal import Journal, Record, open_journal
from journal.events import ToolStarted, TurnEnded
from journal.memory import MemoryJournal
from session import NoResultError, Session
from tests.fork.test_fork import run_scenario
from tests.support import crash_points as scenario

BACKENDS = ["memory", "sqlite", "postgres"]


@asynccontextmanager
async def backend(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Journal]:
    if name == "memory":
        yield MemoryJournal()
        return
    url = (
        scenario.journal_url(tmp_path)
        if name == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    async with open_journal(url) as journal:
        yield journal


async def reads_answer(fork: Session) -> None:
    """Each public read, straight after the fork opened."""
    state = await fork.snapshot()
    assert state.loop == "main"
    await fork.verify()
    await fork.wait_idle()
    assert fork.commit_statistics() is not None
    async for record in fork.subscribe():
        assert isinstance(record, Record) and record.seq == 1
        break


@pytest.mark.parametrize("name", BACKENDS)
async def test_a_fork_cut_after_a_turn_answers_every_read_at_once(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with backend(name, tmp_path, request) as journal:
        source = await run_scenario(journal, tmp_path)
        first_turn = next(r for r in source if isinstance(r.event, TurnEnded))
        ledger = scenario.Ledger(tmp_path, "fork")
        async with Session.fork(
            journal, scenario.SESSION, scenario.definition(ledger), at=first_turn.seq
        ) as fork:
            assert await journal.head(fork.id) < first_turn.seq
            await reads_answer(fork)
            # The turn the fork inherited has its source's answer.
            async with Session.restore(
                journal, scenario.SESSION, scenario.definition(ledger)
            ) as original:
                assert await fork.result(1) == await original.result(1)
            # The fork goes on, and reads still answer.
            await fork.submit("Send the invoice to ACME.")
            await scenario.settle(fork, ledger)
            await reads_answer(fork)
            assert (await fork.snapshot()).turn_index == 2
            assert await fork.result() == await fork.result(2)


@pytest.mark.parametrize("name", BACKENDS)
async def test_a_fork_cut_inside_a_tool_call_answers_every_read_at_once(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with backend(name, tmp_path, request) as journal:
        source = await run_scenario(journal, tmp_path)
        started = next(
            r for r in source if isinstance(r.event, ToolStarted) and r.event.name == "send_invoice"
        )
        ledger = scenario.Ledger(tmp_path, "fork")
        async with Session.fork(
            journal, scenario.SESSION, scenario.definition(ledger), at=started.seq
        ) as fork:
            await reads_answer(fork)
            state = await fork.snapshot()
            assert state.unknown and state.turn_open
            with pytest.raises(NoResultError, match="has no ended turn 9"):
                await fork.result(9)
