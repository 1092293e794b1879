"""A put through ``SyncClient`` beside the same put through ``Client`` under
trio, and the thread hops between them, each alone.

Rules: one SQLite file, no host (the entries stay in the inbox: only the put
is timed); every figure is the median of its per-call times, and the rounds
alternate the five measures so the machine's drift hits each alike:

* **Client (trio)**: ``await client.submit`` in a trio run of this thread;
* **SyncClient**: ``client.submit`` from this thread, which hands the call
  to the client's own trio loop through an anyio portal and waits;
* **SyncClient hop**: the same hand-over with a coroutine that does nothing
  (``SyncClient``'s loop reached as its methods reach it);
* **anyio portal**: a bare ``BlockingPortal`` on trio, the same nothing;
* **trio.from_thread**: ``trio.from_thread.run`` into a trio run in another
  thread, the same nothing (trio's own hand-over, without anyio's);
* **thread round trip**: a value handed to another thread and back through
  two ``queue.SimpleQueue``, the floor of any hand-over between threads.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.from_thread
import trio

from session import open_client, open_sync_client

__all__ = ["run_hops"]

Progress = Callable[[str], None]


async def _nothing() -> None:
    return None


def _client_puts(url: str, sid: str, n: int, round_: int) -> list[float]:
    async def main() -> list[float]:
        times = []
        async with open_client(url) as client:
            for i in range(n):
                start = time.perf_counter()
                await client.submit(sid, "hello", key=f"c{round_}-{i}")
                times.append(time.perf_counter() - start)
        return times

    return trio.run(main)


def _sync_puts(url: str, sid: str, n: int, round_: int) -> tuple[list[float], list[float]]:
    """Per put, then per hand-over of nothing, on one ``SyncClient``."""
    puts, hops = [], []
    with open_sync_client(url) as client:
        loop = client._running()  # the loop its methods hand their calls to
        for i in range(n):
            start = time.perf_counter()
            client.submit(sid, "hello", key=f"s{round_}-{i}")
            puts.append(time.perf_counter() - start)
        for _ in range(n):
            start = time.perf_counter()
            loop.call(_nothing)
            hops.append(time.perf_counter() - start)
    return puts, hops


def _portal_calls(n: int) -> list[float]:
    times = []
    with anyio.from_thread.start_blocking_portal(backend="trio") as portal:
        for _ in range(n):
            start = time.perf_counter()
            portal.call(_nothing)
            times.append(time.perf_counter() - start)
    return times


def _trio_calls(n: int) -> list[float]:
    tokens: queue.SimpleQueue[trio.lowlevel.TrioToken] = queue.SimpleQueue()
    stop = threading.Event()

    async def serve() -> None:
        tokens.put(trio.lowlevel.current_trio_token())
        await trio.to_thread.run_sync(stop.wait)

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    token = tokens.get()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        trio.from_thread.run(_nothing, trio_token=token)
        times.append(time.perf_counter() - start)
    stop.set()
    thread.join()
    return times


def _thread_round_trips(n: int) -> list[float]:
    there: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    back: queue.SimpleQueue[int] = queue.SimpleQueue()

    def echo() -> None:
        while (value := there.get()) is not None:
            back.put(value)

    worker = threading.Thread(target=echo, daemon=True)
    worker.start()
    times = []
    for i in range(n):
        start = time.perf_counter()
        there.put(i)
        back.get()
        times.append(time.perf_counter() - start)
    there.put(None)
    worker.join()
    return times


def run_hops(directory: Path, n: int, rounds: int, progress: Progress) -> list[dict[str, Any]]:
    """The rows: each measure's median per call over ``rounds`` x ``n`` calls."""
    url = f"sqlite:///{directory / 'hops.db'}"
    with open_sync_client(url) as client:
        sid = client.create("bench-echo", key="c")
    found: dict[str, list[float]] = {
        "Client (trio)": [],
        "SyncClient": [],
        "SyncClient hop": [],
        "anyio portal": [],
        "trio.from_thread": [],
        "thread round trip": [],
    }
    for r in range(rounds):
        progress(f"hops: {n} puts and hand-overs of each kind, round {r + 1}")
        found["Client (trio)"] += _client_puts(url, sid, n, r)
        puts, hops = _sync_puts(url, sid, n, r)
        found["SyncClient"] += puts
        found["SyncClient hop"] += hops
        found["anyio portal"] += _portal_calls(n)
        found["trio.from_thread"] += _trio_calls(n)
        found["thread round trip"] += _thread_round_trips(n)
    median = {name: statistics.median(times) for name, times in found.items()}
    extra = median["SyncClient"] - median["Client (trio)"]
    note = f"{rounds} x {n} calls each, SQLite, no host; medians per call"
    rows = [
        _row(f"put: {name}, p50", median[name] * 1e6, "us", note)
        for name in ("Client (trio)", "SyncClient")
    ]
    rows.append(
        _row(
            "put: SyncClient / Client (trio)",
            median["SyncClient"] / median["Client (trio)"],
            "x",
            f"{extra * 1e6:+.0f} us a put",
        )
    )
    for name in ("SyncClient hop", "anyio portal", "trio.from_thread", "thread round trip"):
        rows.append(
            _row(
                f"hand-over: {name}, p50",
                median[name] * 1e6,
                "us",
                f"{median[name] / extra:.0%} of SyncClient's extra" if extra > 0 else note,
            )
        )
    return rows


def _row(benchmark: str, value: float, unit: str, note: str) -> dict[str, Any]:
    return {
        "benchmark": benchmark,
        "value": value,
        "unit": unit,
        "target": "",
        "met": None,
        "note": note,
    }
