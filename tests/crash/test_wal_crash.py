"""SIGKILL of a session whose ``synchronous=FULL`` journal keeps zeros written
ahead in its WAL (``journal/sqlite/wal.py``): the next process's WAL recovery
reads every committed frame and stops at the zeros.

The child (``tests/support/crash_wal.py``) kills itself right after its k-th
append returned (for k > 1, the first from k on that left room written ahead),
for kill points before the first room is written, inside an early room and
after the WAL ran past several.  This process then proves that every
record the killed process saw committed is there with the same digest and
nothing else is, that the session passes ``replay --check`` (SQLite's quick
check included), and that it restores, runs a turn and verifies.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from journal import open_journal
from session import Session
from session.replay import check
from tests.support import crash_wal as scenario
from tests.support.loops import counting_definition
from tests.support.processes import run_child

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kill_after", [1, 20, 150])
async def test_a_kill_at_full_loses_nothing_committed(tmp_path: Path, kill_after: int) -> None:
    done = await run_child("crash-wal", str(tmp_path), str(kill_after))
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    seen = dict(line.split() for line in (tmp_path / "seen").read_text().splitlines())
    if kill_after > 1:
        # The room was there when the process died: the WAL is not only frames.
        assert scenario.has_room(tmp_path / "journal.db-wal")
    async with open_journal(scenario.journal_url(tmp_path)) as journal:
        records = [r async for r in journal.read(scenario.SESSION)]
        assert {str(r.seq): r.digest.hex() for r in records} == seen
        report = await check(journal, scenario.SESSION)
        assert report.ok, report.summary()
        async with Session.restore(journal, scenario.SESSION, counting_definition()) as s:
            await s.submit("after the crash")
            await s.wait_idle()
            await s.verify()
