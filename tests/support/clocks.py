"""pytest plugin: no ``Host`` runs under ``autojump_clock`` on SQLite or PostgreSQL.

Why: the autojump clock moves virtual time to the next timer whenever every
task waits, and a task waiting for a SQLite commit in its thread or for a
PostgreSQL reply on its socket is waiting.  A lease renewal taking 3 ms of real
time then takes most of a lease in virtual time (measured: 0.6 to 0.9 s of a
1 s lease).  The host counts its sessions' deadlines on trio's clock, the
journal counts the leases on its own wall clock: the host stops each session at
a deadline its renewals keep missing, takes it again once the wall-clock lease
expired, and stops it again, a test that looks hung.  Such a test runs in real
time (every wait for a state of the journal), or on the memory journal whose
leases run on trio's clock (``tests.host.support.trio_clock_journal``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from journal.postgres import PostgresJournal
from journal.sqlite import SQLiteJournal
from session import Host

__all__ = ["no_host_on_a_wall_clock_journal_under_autojump", "refuse_wall_clock_journal"]


def refuse_wall_clock_journal(journal: object) -> None:
    """Fail the test when ``journal`` (or the journal it forwards to) keeps its
    leases on the wall clock while its calls wait on real I/O."""
    inner: Any = journal
    while (forwarded := getattr(inner, "inner", None)) is not None:
        inner = forwarded
    if isinstance(inner, SQLiteJournal | PostgresJournal):
        pytest.fail(
            f"a Host on {type(inner).__name__} under autojump_clock: virtual time jumps "
            "while the journal's I/O runs, past the host's lease deadlines, so the host "
            "stops its sessions again and again; run this test in real time, or on "
            "tests.host.support.trio_clock_journal()",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def no_host_on_a_wall_clock_journal_under_autojump(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    if "autojump_clock" in request.fixturenames:
        making = Host.__init__

        def checked(self: Host, journal: Any, *args: Any, **kwargs: Any) -> None:
            refuse_wall_clock_journal(journal)
            making(self, journal, *args, **kwargs)

        monkeypatch.setattr(Host, "__init__", checked)
    yield
