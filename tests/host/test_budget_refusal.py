"""A submit to a session past its token budget, through the inbox: the host
consumes it once with its reason (``BudgetExhaustedError``), never retries
it, and the client is told; listings show the tokens spent."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import Journal, open_journal
from journal.content import Usage
from journal.events import TurnRejected
from loopruntime import Limits, LoopDefinition
from loopruntime.models import Reply, ScriptedModel
from session import Client, CommandRefusedError, Host, Session
from session.cli.main import main
from session.console.views import session_row, summary_of
from session.embedded.restore import read_states
from tests.host.support import trio_clock_journal, wait_for
from tests.support.loops import events_of


def costly() -> LoopDefinition:
    """Every reply spends 600 tokens of a session budget of 500."""
    reply = Reply(text="costly", usage=Usage(input_tokens=550, output_tokens=50))
    return LoopDefinition(
        name="costly",
        model=ScriptedModel(lambda _request: reply),
        limits=Limits(max_session_tokens=500),
    )


async def _consumed(journal: Journal, session: str, key: str) -> None:
    async def done() -> bool:
        entry = await journal.entry(session, key)
        return entry is not None and entry.consumed

    await wait_for(done)


async def test_a_host_refuses_input_past_the_budget_once_and_says_why(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, {"costly": costly()}, host_id="h1", poll=0.5):
        await client.create("costly", session_id="s1", key="create")
        await client.submit("s1", "first", key="k1")
        await client.wait("s1", "k1")
        await client.submit("s1", "second", key="k2")
        await _consumed(journal, "s1", "k2")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait("s1", "k2", timeout=0.5)
        [listed] = [s for s in await client.sessions() if s.session == "s1"]
    assert caught.value.outcome.error == "BudgetExhaustedError"
    assert "600 tokens of its budget of 500" in str(caught.value)
    assert await journal.inbox("s1") == []  # consumed, nothing left to retry
    rejected = await events_of(journal, "s1", TurnRejected)
    assert [r.reason for r in rejected] == ["budget_exhausted"]
    assert listed.tokens_used == 600
    info = next(i for i in await journal.sessions() if i.session == "s1")
    states = await read_states(journal, "s1")
    assert session_row(info, summary_of(states, info.head)).tokens == 600


def test_loopruntime_sessions_shows_each_sessions_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"

    async def spend() -> None:
        async with open_journal(url) as journal:
            async with Session.create(journal, costly(), session_id="s-costly") as s:
                await s.submit("first")
                await s.wait_idle()
                assert s.tokens_used() == 600

    trio.run(spend)
    assert main(["sessions", "--journal", url]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert header.split()[:4] == ["session", "loops", "records", "tokens"]
    assert row.split()[0] == "s-costly" and row.split()[3] == "600"
