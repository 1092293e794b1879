"""Clients: the latency of a command sent from outside the host, and of a record streamed back.

For each client kind -- ``Client`` under trio, ``Client`` under asyncio, ``SyncClient``
from threads -- against a ``loopruntime host`` process on one SQLite file, and beside
them the in-process ``Session`` on a file of its own, in one run:

* **submit -> input record**: from the moment ``submit`` is called to the ``at`` of the
  ``input.queued`` record the host commits for it (the host's inbox poll included);
* **commit -> consumer**: from a record's ``at`` to the moment a ``subscribe`` consumer
  holds it (the client's poll included; ``Session.subscribe`` is woken by the commit).

Turns run one at a time (each message waits for the previous turn's end), so no figure
includes queueing behind another turn.  Both ends read the same wall clock (one machine).
The host polls every ``HOST_POLL`` s and the clients every ``CLIENT_POLL`` s (their default).
"""

from __future__ import annotations

import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import trio

from journal import Record, open_journal
from journal.events import InputQueued, TurnEnded
from loopruntime import LoopDefinition
from loopruntime.models import Reply
from session import Session, SyncClient, open_client

from .harness import Progress, forgetful_model, stderr_progress

__all__ = ["DEFINITIONS", "run"]

ROOT = Path(__file__).resolve().parents[1]
HOST_POLL = 0.01
CLIENT_POLL = 0.05
QUICK_TURNS = 10
DEFAULT_TURNS = 100

DEFINITIONS = [
    LoopDefinition(name="bench-echo", model=forgetful_model(lambda request: Reply(text="ok")))
]
"""The host's loop: one model call that answers at once (the host process imports this)."""


class _Figures:
    """What one client kind measured, turn by turn."""

    def __init__(self) -> None:
        self.submits: list[float] = []
        self.streams: list[float] = []

    def received(self, record: Record) -> None:
        self.streams.append((time.time_ns() - record.at) / 1e9)

    def row(self, client: str, turns: int) -> dict[str, Any]:
        return {
            "client": client,
            "backend": "sqlite",
            "turns": turns,
            "records": len(self.streams),
            "submit_p50_seconds": _quantile(self.submits, 0.5),
            "submit_p99_seconds": _quantile(self.submits, 0.99),
            "stream_p50_seconds": _quantile(self.streams, 0.5),
            "stream_p99_seconds": _quantile(self.streams, 0.99),
        }


def _quantile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


# -- the client kinds -------------------------------------------------------------------


async def _async_client(url: str, turns: int, tag: str) -> _Figures:
    """``Client`` in whichever event loop runs this (trio or asyncio)."""
    figures = _Figures()
    async with open_client(url, poll=CLIENT_POLL) as client:
        sid = await client.create("bench-echo", key=f"{tag}-create")
        ended = anyio.Event()
        inputs: dict[str, float] = {}
        count = 0

        async def consume() -> None:
            nonlocal ended, count
            async for record in client.subscribe(sid):
                figures.received(record)
                if isinstance(record.event, InputQueued):
                    inputs[record.event.input_id] = record.at / 1e9
                if isinstance(record.event, TurnEnded):
                    count += 1
                    ended.set()
                    if count == turns:
                        return

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(consume)
            for i in range(turns):
                ended = anyio.Event()
                start = time.time_ns() / 1e9
                await client.submit(sid, f"message {i}", key=f"{tag}-{i}")
                outcome = await client.wait(sid, f"{tag}-{i}", timeout=60)
                await ended.wait()
                assert isinstance(outcome.value, str)
                figures.submits.append(inputs[outcome.value] - start)
    return figures


def _sync_client(url: str, turns: int) -> _Figures:
    """``SyncClient``: the consumer in a thread of its own, the sender in this one."""
    figures = _Figures()
    with SyncClient.open(url, poll=CLIENT_POLL) as client:
        sid = client.create("bench-echo", key="sync-create")
        ends: queue.Queue[None] = queue.Queue()
        inputs: dict[str, float] = {}

        def consume() -> None:
            count = 0
            for record in client.subscribe(sid, timeout=60):
                figures.received(record)
                if isinstance(record.event, InputQueued):
                    inputs[record.event.input_id] = record.at / 1e9
                if isinstance(record.event, TurnEnded):
                    count += 1
                    ends.put(None)
                    if count == turns:
                        return

        consumer = threading.Thread(target=consume)
        consumer.start()
        for i in range(turns):
            start = time.time_ns() / 1e9
            client.submit(sid, f"message {i}", key=f"sync-{i}")
            outcome = client.wait(sid, f"sync-{i}", timeout=60)
            ends.get(timeout=60)
            assert isinstance(outcome.value, str)
            figures.submits.append(inputs[outcome.value] - start)
        consumer.join()
    return figures


async def _session(url: str, turns: int) -> _Figures:
    """The in-process ``Session``: submit returns once the input is durable."""
    figures = _Figures()
    async with open_journal(url) as journal:
        async with Session.create(journal, DEFINITIONS[0]) as session:
            ended = trio.Event()
            count = 0

            async def consume() -> None:
                nonlocal ended, count
                async for record in session.subscribe():
                    assert isinstance(record, Record)
                    figures.received(record)
                    if isinstance(record.event, TurnEnded):
                        count += 1
                        ended.set()
                        if count == turns:
                            return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                for i in range(turns):
                    ended = trio.Event()
                    start = time.time_ns()
                    input_id = await session.submit(f"message {i}")
                    await ended.wait()
                    [at] = [
                        r.at
                        async for r in journal.read(session.id)
                        if isinstance(r.event, InputQueued) and r.event.input_id == input_id
                    ]
                    figures.submits.append((at - start) / 1e9)
    return figures


# -- the run ----------------------------------------------------------------------------


def _host(url: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        host = subprocess.Popen(
            [
                sys.executable, "-m", "session.cli.main", "host", "--journal", url,
                "--definitions", "benchmarks.clients:DEFINITIONS", "--host-id", "bench",
                "--poll", str(HOST_POLL),
            ],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
        )  # fmt: skip
    assert host.stdout is not None
    line = host.stdout.readline()
    if b"runs" not in line:
        host.kill()
        host.wait()
        raise RuntimeError(f"the benchmark host did not start: {line!r} {log.read_text()}")
    return host


def run(
    *, quick: bool = False, turns: int | None = None, progress: Progress = stderr_progress
) -> list[dict[str, Any]]:
    """One row per client kind (``Session`` first), each over ``turns`` turns."""
    turns = turns or (QUICK_TURNS if quick else DEFAULT_TURNS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="loopruntime-clients-") as where:
        url = f"sqlite:///{Path(where) / 'clients.db'}"
        progress(f"Session in process, {turns} turns")
        figures = trio.run(_session, f"sqlite:///{Path(where) / 'session.db'}", turns)
        rows.append(figures.row("Session (in process)", turns))
        host = _host(url, Path(where) / "host.log")
        try:
            kinds: list[tuple[str, Callable[[], _Figures]]] = [
                ("Client (trio)", lambda: anyio.run(_async_client, url, turns, "trio")),
                (
                    "Client (asyncio)",
                    lambda: anyio.run(_async_client, url, turns, "asyncio", backend="asyncio"),
                ),
                ("SyncClient (threads)", lambda: _sync_client(url, turns)),
            ]
            for name, measure in kinds:
                progress(f"{name}, {turns} turns")
                rows.append(measure().row(name, turns))
        finally:
            host.terminate()
            host.wait()
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'client':<22} {'submit p50':>11} {'p99':>9} {'stream p50':>11} {'p99':>9}"]
    for r in rows:
        lines.append(
            f"{r['client']:<22} {r['submit_p50_seconds'] * 1e3:>9.2f}ms "
            f"{r['submit_p99_seconds'] * 1e3:>7.2f}ms {r['stream_p50_seconds'] * 1e3:>9.2f}ms "
            f"{r['stream_p99_seconds'] * 1e3:>7.2f}ms"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    from .harness import quiet_logs

    quiet_logs()
    print(_table(run(quick="--quick" in sys.argv)))
