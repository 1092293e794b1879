"""pytest plugin: a real PostgreSQL server for the Postgres journal tests.

``postgres_dsn`` (session scope) is ``LOOPRUNTIME_TEST_PG_DSN`` when that is
set, otherwise the URL of a throwaway cluster started from the installed
binaries (see ``tests/support/pgserver.py``) and stopped after the run.

When the binaries are missing the Postgres tests are skipped on a developer
machine, with instructions, but FAIL when the ``CI`` environment variable is
set: CI installs the server (``scripts/ensure-postgres``), so a skip there
would mean the backend went untested.

``postgres_url`` (function scope) is a URL for one test's own schema, so
tests never see each other's sessions.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from .pgserver import (
    RestartableServer,
    ServerUnavailable,
    isolated_schema,
    restartable_server,
    temporary_server,
)

__all__ = ["postgres_dsn", "postgres_url", "restartable_postgres"]

DSN_ENV = "LOOPRUNTIME_TEST_PG_DSN"


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """URL of a PostgreSQL server the tests may create schemas on."""
    given = os.environ.get(DSN_ENV)
    if given:
        yield given
        return
    with contextlib.ExitStack() as stack:
        try:
            dsn = stack.enter_context(temporary_server())
        except ServerUnavailable as exc:
            _no_server(exc)
        yield dsn


def _no_server(exc: ServerUnavailable) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(
            f"CI is set but no PostgreSQL server could be started: {exc}\n"
            "CI must run the Postgres suite: scripts/ensure-postgres installs the "
            f"server package, or set {DSN_ENV}.",
            pytrace=False,
        )
    pytest.skip(f"PostgreSQL tests skipped: {exc}")


@pytest.fixture(scope="module")
def restartable_postgres() -> Iterator[RestartableServer]:
    """A server of the test module's own, which its tests stop and start
    (always started from the installed binaries, even when ``DSN_ENV`` names
    a shared server: that one is never restarted).  Each test leaves it running."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(restartable_server())
        except ServerUnavailable as exc:
            _no_server(exc)
        yield server


@pytest.fixture
def postgres_url(postgres_dsn: str) -> Iterator[str]:
    """URL whose ``search_path`` is a fresh schema, dropped after the test."""
    with isolated_schema(postgres_dsn) as url:
        yield url
