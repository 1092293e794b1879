"""A replay-safe call with a redacted input, SIGKILLed while it runs: the file
never held the secret; restored, the call runs again with the real input the
host gives back (proven by its digest), or is refused with a clear notice when
the host has none."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.events import Notice, ToolAbandoned, ToolCompleted, ToolStarted
from loopruntime.redaction import REDACTED
from session import Session
from session.replay import check
from tests.support.crash_redaction import PASSWORD, definition, runs
from tests.support.loops import records
from tests.support.processes import kill_when_ready


@pytest.mark.parametrize("vault", ["kept", "lost"])
async def test_a_killed_redacted_call_reruns_with_the_hosts_input_or_is_refused(
    tmp_path: Path, vault: str
) -> None:
    path = tmp_path / "journal.db"
    url = f"sqlite:///{path}"
    await kill_when_ready("redacted", url, "ses_r", str(tmp_path))
    data = _file_bytes(path)
    assert b"bob" in data and PASSWORD.encode() not in data
    if vault == "lost":
        (tmp_path / "vault.json").unlink()
    async with open_journal(url) as journal:
        async with Session.restore(journal, "ses_r", definition(tmp_path)) as s:
            await s.wait_idle()
            written = await records(journal, "ses_r")
            (started,) = [r.event for r in written if isinstance(r.event, ToolStarted)]
            assert started.input == {"user": "bob", "password": REDACTED}
            if vault == "lost":
                (abandoned,) = [r.event for r in written if isinstance(r.event, ToolAbandoned)]
                assert abandoned.reason == "restore_unavailable"
                (notice,) = [
                    r.event
                    for r in written
                    if isinstance(r.event, Notice) and r.event.code == "redacted_input_unavailable"
                ]
                assert "no original input" in notice.text
                await s.resolve(started.execution_id, "bob logged in (checked by hand)")
                await s.wait_idle()
        report = await check(journal, "ses_r")
        assert report.ok, report.summary()
        written = await records(journal, "ses_r")
    done = [r.event for r in written if isinstance(r.event, ToolCompleted)]
    if vault == "kept":
        # Run again, under the same execution id, with the real password.
        assert [r["password"] for r in runs(tmp_path)] == [PASSWORD, PASSWORD]
        assert {r["execution"] for r in runs(tmp_path)} == {started.execution_id}
        assert [d.execution_id for d in done] == [started.execution_id]
    else:
        assert len(runs(tmp_path)) == 1 and done == []
    assert PASSWORD.encode() not in _file_bytes(path)
    await trio.lowlevel.checkpoint()


def _file_bytes(path: Path) -> bytes:
    """The journal file and its WAL, as a disk would show them."""
    wal = Path(f"{path}-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
