"""The console's data endpoints, measured without a browser.

A ``loopruntime console`` process on one SQLite file (its tails look at the
file every ``POLL`` s), and an HTTP client (httpx) in this process:

* **initial data**: a session of about 10,000 records (``benchmarks.restore``'s
  history); from the request of its live stream (``/api/sessions/ID/events``,
  what a session page opens) to the ``ready`` event, after every record's
  item and the actions have arrived: what a page waits for before it shows a
  session;
* **commit -> SSE event**: turns run in this process on the same file while
  the client holds the stream; from each record's ``at`` to the moment the
  client has the stream message holding its item (the console's poll of the
  file included).

The browser-measured figures (``tests/console/test_load.py``: commit to page,
a 10,000-record page's load, fifty live sessions) are written to
``benchmarks/results-console.json`` when those tests run; the report puts
them beside these.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import trio

from journal import open_journal
from session import Session

from . import restore
from .harness import Progress, stderr_progress

__all__ = ["BROWSER_FIGURES", "browser_figures", "run"]

ROOT = Path(__file__).resolve().parents[1]
POLL = 0.02
BROWSER_FIGURES = Path(
    os.environ.get("LOOPRUNTIME_CONSOLE_FIGURES", ROOT / "benchmarks" / "results-console.json")
)
"""Where ``tests/console/test_load.py`` writes what it measured in Chromium."""


def browser_figures(path: Path = BROWSER_FIGURES) -> dict[str, Any] | None:
    """The browser tests' figures when they were written, else None."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


class _Console:
    """A ``loopruntime console`` process: its address and token."""

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "session.cli.main",
                "console",
                "--journal",
                url,
                "--bind",
                "127.0.0.1:0",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        said = ""
        while "open http" not in said:
            line = self.proc.stdout.readline().decode()
            if not line:
                self.stop()
                raise RuntimeError(f"the console stopped before it listened: {said!r}")
            said += line
        found = re.search(r"open (http://[^/]+)/\?token=(\S+)", said)
        if found is None:
            self.stop()
            raise RuntimeError(f"the console printed no address: {said!r}")
        self.address, self.token = found.group(1), found.group(2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def _messages(response: httpx.Response) -> Any:
    """``(event, data bytes)`` of each Server-Sent Event, as it arrives."""
    buffer = b""
    async for chunk in response.aiter_bytes():
        buffer += chunk
        while b"\n\n" in buffer:
            message, buffer = buffer.split(b"\n\n", 1)
            name, data = "message", b""
            for line in message.split(b"\n"):
                if line.startswith(b"event: "):
                    name = line[7:].decode()
                elif line.startswith(b"data: "):
                    data = line[6:]
            yield name, data


async def _initial_load(http: httpx.AsyncClient, sid: str) -> tuple[float, int, int]:
    """Seconds from the stream's request to ``ready``, the items and bytes received."""
    items = size = 0
    start = time.perf_counter()
    async with http.stream("GET", f"/api/sessions/{sid}/events") as response:
        response.raise_for_status()
        async for name, data in _messages(response):
            size += len(data)
            if name == "items":
                items += len(json.loads(data))
            if name == "ready":
                return time.perf_counter() - start, items, size
    raise RuntimeError("the stream ended before it was ready")


async def _commit_to_event(url: str, http: httpx.AsyncClient, sid: str, events: int) -> list[float]:
    """Lags (s) from each record's commit to the client holding its item."""
    seen: dict[int, float] = {}
    async with open_journal(url) as journal:
        head = await journal.head(sid)
        async with (
            http.stream("GET", f"/api/sessions/{sid}/events?after={head}") as response,
            trio.open_nursery() as nursery,
        ):
            response.raise_for_status()
            stream = _messages(response)
            async for name, _ in stream:
                if name == "ready":
                    break
            done = trio.Event()

            async def write() -> None:
                async with Session.restore(journal, sid, restore.definition()) as session:
                    while not done.is_set():
                        await session.submit("go on")
                        await session.wait_idle()

            nursery.start_soon(write)
            async for name, data in stream:
                if name != "items":
                    continue
                now = time.time_ns()
                for item in json.loads(data):
                    seen[item["seq"]] = now
                if len(seen) >= events:
                    done.set()
                    break
        stamps = {r.seq: r.at async for r in journal.read(sid, after=head)}
    return sorted((seen[seq] - at) / 1e9 for seq, at in stamps.items() if seq in seen)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def _run(records: int, loads: int, events: int, progress: Progress) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'journal.db'}?poll={POLL}"
        async with open_journal(url) as journal:
            sid, history = await restore.build_session(journal, records)
        progress(f"a session of {len(history):,} records written")
        console = _Console(url)
        try:
            headers = {"x-console-token": console.token}
            async with httpx.AsyncClient(
                base_url=console.address, headers=headers, timeout=120
            ) as http:
                runs = [await _initial_load(http, sid) for _ in range(loads)]
                progress(f"initial data served {loads} times")
                lags = await _commit_to_event(url, http, sid, events)
                progress(f"{len(lags)} records streamed")
        finally:
            console.stop()
    seconds = [r[0] for r in runs]
    return [
        {
            "measure": "initial data",
            "records": len(history),
            "runs": loads,
            "items": runs[-1][1],
            "bytes": runs[-1][2],
            "p50_seconds": statistics.median(seconds),
            "max_seconds": max(seconds),
            "poll_seconds": POLL,
        },
        {
            "measure": "commit -> SSE event",
            "records": len(lags),
            "runs": 1,
            "items": len(lags),
            "bytes": 0,
            "p50_seconds": statistics.median(lags),
            "p99_seconds": _quantile(lags, 0.99),
            "max_seconds": max(lags),
            "poll_seconds": POLL,
        },
    ]


def run(
    *,
    quick: bool = False,
    records: int = 10_000,
    loads: int | None = None,
    events: int | None = None,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """The two rows: the initial data of a ``records``-record session's page
    (``loads`` times), and ``events`` records' commit-to-SSE lags."""
    loads = loads if loads is not None else (3 if quick else 10)
    events = events if events is not None else (300 if quick else 2_000)
    return trio.run(_run, records, loads, events, progress)
