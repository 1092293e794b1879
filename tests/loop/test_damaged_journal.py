"""A journal damaged under a session: an edited column or a damaged page is
refused by restore (a named ``JournalCorruptError``, nothing appended) and
failed by ``replay --check``, never taken for a journal that holds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from journal import Journal, JournalCorruptError, JournalError, open_journal
from journal.events import TurnEnded
from journal.postgres import PostgresJournal
from session import Session
from session.cli.main import main
from session.replay import check
from tests.support.damage import damage_sqlite_page, edit_postgres_record, edit_record
from tests.support.loops import counting_definition as definition
from tests.support.loops import records, run_turns

SESSION = "ses_damaged"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory:"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


async def edit(journal: Journal, seq: int, column: str, value: object) -> None:
    """Change one column of a stored record under the journal, as a careless hand would."""
    if isinstance(journal, PostgresJournal):
        await trio.to_thread.run_sync(
            edit_postgres_record, journal.url, SESSION, seq, column, value
        )
    else:
        edit_record(journal, SESSION, seq, column, value)


@asynccontextmanager
async def restored(journal: Journal) -> AsyncIterator[Session]:
    async with Session.restore(journal, SESSION, definition()) as s:
        yield s


@pytest.mark.parametrize(
    ("column", "value"),
    [("loop", "main/elsewhere"), ("id", "ev_forged"), ("cause", "cmd_forged"), ("at", 1)],
)
async def test_an_edited_column_is_refused_by_restore_and_failed_by_check(
    journal_url: str, column: str, value: object
) -> None:
    async with open_journal(journal_url) as journal:
        await run_turns(journal, SESSION, 2)
        written = await records(journal, SESSION)
        # The first turn's end: moving it to another loop once made restore
        # find the turn open and end it a second time.
        ended = next(r for r in written if isinstance(r.event, TurnEnded))
        incarnation = next(i for i in await journal.sessions() if i.session == SESSION).incarnation
        await edit(journal, ended.seq, column, value)

        report = await check(journal, SESSION)
        assert not report.ok
        assert report.first_bad_seq == ended.seq
        assert report.problems[0].rule == "journal readable"
        with pytest.raises(JournalCorruptError) as caught:
            async with restored(journal):
                pass
        assert (caught.value.session, caught.value.seq) == (SESSION, ended.seq)
        # Nothing was appended (no second turn.ended) and no writer was fenced.
        assert await journal.head(SESSION) == written[-1].seq
        info = next(i for i in await journal.sessions() if i.session == SESSION)
        assert info.incarnation == incarnation


def _journal_file(tmp_path: Path, turns: int) -> Path:
    path = tmp_path / "journal.db"

    async def write() -> None:
        async with open_journal(f"sqlite:///{path}") as journal:
            await run_turns(journal, SESSION, turns)

    trio.run(write)
    return path


def _replay_check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["replay", "--journal", str(path), SESSION, "--check"])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_damaged_records_page_fails_check_and_restore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _journal_file(tmp_path, 3)
    code, out, _ = _replay_check(path, capsys)
    assert code == 0 and "storage checked: SQLite quick_check" in out
    damage_sqlite_page(path, "records")

    code, out, err = _replay_check(path, capsys)
    assert code == 1
    assert "storage intact: table records:" in err
    assert "journal readable" in err  # the session's records cannot be read either
    assert out.startswith("FAILED at seq 1:") and "the storage is damaged too" in out

    async def restore() -> None:
        async with open_journal(f"sqlite:///{path}") as journal:
            with pytest.raises(JournalCorruptError) as caught:
                async with restored(journal):
                    pass
            assert (caught.value.session, caught.value.seq) == (SESSION, 1)
            assert "damaged database page" in str(caught.value)

    trio.run(restore)


def test_a_damaged_index_page_that_reads_never_touch_fails_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Reading a session goes by seq: the id index is touched only by appends.
    # The record chain cannot see this damage; SQLite's integrity check does.
    path = _journal_file(tmp_path, 3)
    damage_sqlite_page(path, "records_by_id")

    async def read_back() -> int:
        async with open_journal(f"sqlite:///{path}") as journal:
            return len(await records(journal, SESSION))

    assert trio.run(read_back) > 0
    code, out, err = _replay_check(path, capsys)
    assert code == 1
    assert "storage intact: table records:" in err
    assert out.startswith("FAILED: storage intact: table records:")

    async def append_after_restore() -> None:
        # Restore reads by seq and succeeds; the first append meets the damage
        # and fails with the damage named, writing nothing.
        async with open_journal(f"sqlite:///{path}") as journal:
            head = await journal.head(SESSION)
            with pytest.raises(JournalError, match="the file is damaged"):
                async with restored(journal) as s:
                    await s.submit("count again")
                    await s.wait_idle()
            assert await journal.head(SESSION) == head

    trio.run(append_after_restore)
