"""The fault run (``scenario.py``) on SQLite (2 hosts) and PostgreSQL (3
hosts, and server restarts), each run once per module, then checked
property by property."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.support.pgserver import RestartableServer, isolated_schema

from .harness import (
    Outcome,
    check_applied_once,
    check_no_effect_after_settlement,
    check_no_exit,
    check_nothing_lost,
    check_replay,
)
from .scenario import fault_run

pytestmark = pytest.mark.slow


def _run(
    url: str,
    workdir: Path,
    backend: str,
    *,
    hosts: int,
    sessions: int,
    server: RestartableServer | None = None,
) -> Outcome:
    async def run() -> Outcome:
        return await fault_run(url, workdir, backend, hosts=hosts, sessions=sessions, server=server)

    # Autojump: the harness waits on the journal, never on time.
    return trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.fixture(scope="module")
def sqlite_run(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    workdir = tmp_path_factory.mktemp("faults-sqlite")
    return _run(f"sqlite:///{workdir / 'journal.db'}", workdir, "sqlite", hosts=2, sessions=6)


@pytest.fixture(scope="module")
def postgres_run(
    tmp_path_factory: pytest.TempPathFactory, restartable_postgres: RestartableServer
) -> Iterator[Outcome]:
    workdir = tmp_path_factory.mktemp("faults-postgres")
    with isolated_schema(restartable_postgres.dsn) as url:
        yield _run(url, workdir, "postgres", hosts=3, sessions=9, server=restartable_postgres)


@pytest.fixture(params=["sqlite", "postgres"])
def run(request: pytest.FixtureRequest) -> Outcome:
    found: Outcome = request.getfixturevalue(f"{request.param}_run")
    return found


def test_each_keyed_input_is_applied_once(run: Outcome) -> None:
    assert run.sent.resent > 0
    assert check_applied_once(run) == []


def test_no_record_is_lost(run: Outcome) -> None:
    assert check_nothing_lost(run) == []


def test_every_session_passes_replay_check(run: Outcome) -> None:
    assert run.reports and check_replay(run) == []


def test_the_faults_were_met_and_taken_over(run: Outcome) -> None:
    """The run did what it says: each fault hit a host holding work, and
    another host took that work over (the failover figures have samples)."""
    assert [f.kind for f in run.faults] == ["SIGKILL", "SIGSTOP past the lease"]
    assert all(f.sessions for f in run.faults)
    assert set(run.figures) == {"SIGKILL", "SIGSTOP past the lease"}
    assert run.paused_call is not None
    assert run.relaunched_while_registered


def test_puts_refused_during_a_restart_were_sent_again(postgres_run: Outcome) -> None:
    assert postgres_run.sent.refused_puts > 0
    assert check_applied_once(postgres_run) == []


# -- What the hosts' own fault handling guarantees ----------------------------------------


def test_no_effect_after_its_call_was_settled_elsewhere(run: Outcome) -> None:
    """A host paused past its lease must not perform the effect of a
    call another host has settled since."""
    assert check_no_effect_after_settlement(run) == []


def test_no_host_exits(run: Outcome) -> None:
    """Items 2 and 3: no host ends on a PostgreSQL restart, and a host
    launched again at once under its own id waits out its old registration
    instead of ending."""
    assert check_no_exit(run) == []
