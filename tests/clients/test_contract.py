"""The client contract run three ways -- ``Client`` under trio, ``Client``
under asyncio, ``SyncClient`` from worker threads -- on SQLite and on
PostgreSQL, against one real host process per backend (``loopruntime host``).

The tests are plain functions that start their own event loop
(``anyio.run``), so pytest-trio's trio mode leaves them alone and the
asyncio runs hold no trio anywhere."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from session import open_client, open_sync_client
from tests.clients.contract import SCENARIOS
from tests.clients.support import ThreadedSync, host_process
from tests.support.pgserver import isolated_schema

pytestmark = pytest.mark.slow

HOST = "host-contract"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hosted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A journal URL with a host process running the example's loops on it."""
    where = tmp_path_factory.mktemp(f"clients-{request.param}")
    with contextlib_for(request, where) as url, host_process(url, HOST, where / "host.log"):
        yield url


def contextlib_for(request: pytest.FixtureRequest, where: Path) -> Any:
    import contextlib

    if request.param == "postgres":
        dsn: str = request.getfixturevalue("postgres_dsn")
        return isolated_schema(dsn)
    return contextlib.nullcontext(f"sqlite:///{where / 'journal.db'}")


async def through_client(url: str, scenario: Callable[[Any, str], Awaitable[None]]) -> None:
    async with open_client(url) as client:
        await scenario(client, HOST)


async def through_sync_client(url: str, scenario: Callable[[Any, str], Awaitable[None]]) -> None:
    with open_sync_client(url) as client:
        await scenario(ThreadedSync(client), HOST)


RUNS = {
    "trio": lambda url, s: anyio.run(through_client, url, s, backend="trio"),
    "asyncio": lambda url, s: anyio.run(through_client, url, s, backend="asyncio"),
    "sync": lambda url, s: anyio.run(through_sync_client, url, s, backend="asyncio"),
}


@pytest.mark.parametrize("kind", sorted(RUNS))
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_client_contract(
    hosted: str, kind: str, scenario: Callable[[Any, str], Awaitable[None]]
) -> None:
    RUNS[kind](hosted, scenario)
