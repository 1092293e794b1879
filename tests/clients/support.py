"""What the client tests share: a real host process on a real journal, and
``SyncClient`` seen through async calls run in worker threads.

Real time: a host in another process cannot follow trio's virtual clock, so
every wait here is for a state of the journal (bounded by a hang guard that
is never a statement about speed)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from journal import Record
from session import SyncClient
from tests.support.processes import ROOT

__all__ = ["DEFINITIONS", "ThreadedSync", "host_process", "start_host"]

DEFINITIONS = "examples.web_service.agents:DEFINITIONS"
"""The example service's loops: ``echo`` answers at once, ``confirm`` asks through a gate."""

HANG_GUARD = 120.0
"""Seconds after which a child that never said it started fails the test (not a timing bound)."""


def start_host(
    url: str, host_id: str, log: Path, *, lease_ttl: float = 30.0
) -> subprocess.Popen[bytes]:
    """``loopruntime host`` in a process of its own, returned once it runs."""
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "session.cli.main", "host", "--journal", url,
                "--definitions", DEFINITIONS, "--host-id", host_id,
                "--lease-ttl", str(lease_ttl), "--poll", "0.05",
            ],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
        )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "host ... runs ...": printed once the host runs
    if b"runs" not in line:
        proc.kill()
        proc.wait()
        raise AssertionError(f"host {host_id} did not start: {line!r}\n{log.read_text()}")
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a clean stop, sessions handed over), SIGKILL if it hangs."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def host_process(
    url: str, host_id: str, log: Path, **options: Any
) -> Iterator[subprocess.Popen[bytes]]:
    proc = start_host(url, host_id, log, **options)
    try:
        yield proc
    finally:
        stop(proc)


class ThreadedSync:
    """A ``SyncClient`` behind the async client's method names: each call runs
    in a worker thread, so the one contract drives all three kinds."""

    def __init__(self, sync: SyncClient) -> None:
        self.sync = sync

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.sync, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await anyio.to_thread.run_sync(partial(method, *args, **kwargs))

        return call

    async def subscribe(self, session_id: str, after: int = 0) -> AsyncIterator[Record]:
        records = self.sync.subscribe(session_id, after)
        while True:
            # Abandoned on cancel: the iterator's thread ends when the client closes.
            record = await anyio.to_thread.run_sync(next, records, None, abandon_on_cancel=True)
            if record is None:
                return
            yield record
