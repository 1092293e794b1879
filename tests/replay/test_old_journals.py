"""A session written under schema 2 (the body-only chain) still opens,
passes ``replay --check``, restores and goes on, its new records chained
whole from the seq the upgrade recorded (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import Record, open_journal
from journal.codec import GENESIS, chain, chain_body, encode_event
from session import Session
from session.cli.main import main
from session.replay import check
from tests.support.loops import counting_definition as definition
from tests.support.loops import records, run_turns
from tests.support.old_journal import to_version_2_postgres, to_version_2_sqlite

SESSION = "ses_old"


def _rules(written: list[Record]) -> list[str]:
    """Which chain rule each record's digest follows, in seq order."""
    found, previous = [], GENESIS
    for r in written:
        body = encode_event(r.event)
        if r.digest == chain_body(previous, body):
            found.append("body")
        elif r.digest == chain(previous, r.seq, r.id, r.session, r.loop, r.at, r.cause, body):
            found.append("whole")
        else:
            found.append("neither")
        previous = r.digest
    return found


def _replay_check(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["replay", "--journal", url, SESSION, "--check"])
    out, _ = capsys.readouterr()
    return code, out


def _after_downgrade(url: str, old: int, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _replay_check(url, capsys)  # opening upgrades the journal
    assert code == 0 and out.startswith(f"ok: {old} records"), out

    async def restore_and_go_on() -> list[Record]:
        async with open_journal(url) as journal:
            async with Session.restore(journal, SESSION, definition()) as s:
                await s.submit("count on")
                await s.wait_idle()
            report = await check(journal, SESSION)
            assert report.ok, report.summary()
            return await records(journal, SESSION)

    written = trio.run(restore_and_go_on)
    assert len(written) > old
    assert _rules(written) == ["body"] * old + ["whole"] * (len(written) - old)
    code, out = _replay_check(url, capsys)
    assert code == 0 and out.startswith(f"ok: {len(written)} records"), out


def _write(url: str) -> int:
    async def first() -> int:
        async with open_journal(url) as journal:
            await run_turns(journal, SESSION, 2)
            return len(await records(journal, SESSION))

    return trio.run(first)


def test_a_version_2_sqlite_journal_restores_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.db"
    old = _write(f"sqlite:///{path}")
    to_version_2_sqlite(path)
    _after_downgrade(str(path), old, capsys)


def test_a_version_2_postgres_journal_restores_and_goes_on(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _write(postgres_url)
    to_version_2_postgres(postgres_url)
    _after_downgrade(postgres_url, old, capsys)
