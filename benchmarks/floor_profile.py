"""Where a durable tool step's time goes: the floor section's turn, taken apart.

Run ``python -m benchmarks.floor_profile`` (``--steps``, ``--synchronous``).  The same
turn as ``benchmarks/floor.py`` (one turn of tool steps, the zero-latency scripted model,
SQLite), measured three ways, each in a turn of its own on a fresh file:

* **threads**: CPU of the trio thread (``time.thread_time``) and of the journal's writer
  thread (its own clock, ``/proc/self/task/<id>/schedstat``; Linux), beside the wall time,
  per step; the trio task steps a step takes (a ``trio.abc.Instrument``: how often trio
  wakes a task, and the CPU of each kind of task); the thread hops (each writer
  transaction is one hand-off to the writer thread and one hand-back to trio).
* **statements**: the writer thread's SQL, each statement's median time, the WAL frames
  a commit writes, and the latency of each crossing (the group handed to the writer
  thread until its transaction begins; the transaction ended until trio delivers it).
* **calls**: a ``cProfile`` of the trio thread: Python function calls per step (a count
  noise cannot move), and the share of the profiled time by module.  The profiler
  inflates each call's cost about evenly, so shares are rough; the counts are exact.

Only figures: nothing here asserts one.  Reaching into the journal's writer (its thread's
name, its connection) is for measuring only.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import statistics
import struct
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

import trio

from journal import open_journal
from session import Session

from .harness import quiet_logs
from .loops import StepScript, step_definition

__all__ = ["main", "profile"]

_WAL_HEADER, _FRAME_HEADER, _PAGE = 32, 24, 4096


class _TaskSteps(trio.abc.Instrument):
    """Counts trio's task steps and their CPU, by the kind of task."""

    def __init__(self) -> None:
        self.steps: collections.Counter[str] = collections.Counter()
        self.cpu: collections.Counter[str] = collections.Counter()
        self._began = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.thread_time_ns()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if not self._began:
            return  # the step that added this instrument began before it
        kind = "entry queue (run_sync_soon)" if "run_sync_soon" in task.name else task.name
        kind = kind.rsplit(".", 1)[-1]
        self.cpu[kind] += time.thread_time_ns() - self._began
        self.steps[kind] += 1
        self._began = 0


def _thread_cpu_ns(native_id: int) -> int:
    with open(f"/proc/self/task/{native_id}/schedstat") as f:
        return int(f.read().split()[0])


def _writer_thread(path: str) -> threading.Thread:
    return next(t for t in threading.enumerate() if t.name.endswith(path))


async def _turn(url: str, path: str, n: int, probe: Any = None) -> dict[str, float]:
    """One turn of ``n`` steps; per step: wall, trio CPU, writer CPU, task steps, hops."""
    script = StepScript(n)
    async with open_journal(url) as journal:
        async with Session.create(journal, step_definition(script, n)) as session:
            writer = _writer_thread(path)
            steps = _TaskSteps()
            if probe is None:  # the profile would count the instrument's calls
                trio.lowlevel.add_instrument(steps)
            transactions = journal.statistics().transactions  # type: ignore[attr-defined]
            wall, cpu = time.perf_counter(), time.thread_time_ns()
            writer_cpu = _thread_cpu_ns(writer.native_id)  # type: ignore[arg-type]
            if probe is not None:
                probe.enable()
            await session.submit("begin")
            await session.wait_idle()
            if probe is not None:
                probe.disable()
            row = {
                "wall_us": (time.perf_counter() - wall) / n * 1e6,
                "trio_cpu_us": (time.thread_time_ns() - cpu) / n / 1e3,
                "writer_cpu_us": (_thread_cpu_ns(writer.native_id) - writer_cpu) / n / 1e3,  # type: ignore[arg-type]
                "hops": (journal.statistics().transactions - transactions) / n,  # type: ignore[attr-defined]
            }
            if probe is None:
                trio.lowlevel.remove_instrument(steps)
    row.update({f"task steps: {k}": v / n for k, v in steps.steps.items()})
    row.update({f"task CPU us: {k}": v / n / 1e3 for k, v in steps.cpu.items()})
    return row


class _TimedConnection:
    """A writer connection that times each statement (for measuring only)."""

    def __init__(self, conn: Any, times: dict[str, list[int]]) -> None:
        self._conn, self._times = conn, times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _timed(self, label: str, run: Any, *args: Any) -> Any:
        began = time.perf_counter_ns()
        try:
            return run(*args)
        finally:
            self._times.setdefault(label, []).append(time.perf_counter_ns() - began)

    def execute(self, sql: str, *args: Any) -> Any:
        return self._timed(" ".join(sql.split()[:3]), self._conn.execute, sql, *args)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self._timed(" ".join(sql.split()[:3]) + " (many)", self._conn.executemany, sql, rows)


def _wal_frames_per_commit(path: str) -> float:
    """Frames per commit in the WAL as it stands (from its frame headers; a frame
    whose salt is not the header's is left from before the WAL last restarted)."""
    with open(path + "-wal", "rb") as f:
        wal = f.read()
    salt = wal[16:24]
    frames = commits = 0
    for at in range(_WAL_HEADER, len(wal) - _FRAME_HEADER, _FRAME_HEADER + _PAGE):
        if wal[at + 8 : at + 16] != salt:
            continue
        frames += 1
        commits += struct.unpack(">I", wal[at + 4 : at + 8])[0] != 0
    return frames / max(commits, 1)


def _stamped(run: Any, stamps: list[int]) -> Any:
    def stamped(*args: Any) -> Any:
        stamps.append(time.perf_counter_ns())
        return run(*args)

    return stamped


async def _statements(url: str, path: str, n: int) -> dict[str, Any]:
    """The writer's statements, and the moments of each crossing: the group handed to
    the writer thread, its transaction begun, ended, and its outcome back on trio."""
    from journal.sqlite.writer import Writer  # measuring only: the writer's own parts

    times: dict[str, list[int]] = {}
    handed, begun, ended, delivered = [], [], [], []  # type: ignore[var-annotated]
    script = StepScript(n)
    async with open_journal(url) as journal:
        writer: Writer = journal._writer  # type: ignore[attr-defined]
        writer.conn = _TimedConnection(writer.conn, times)  # type: ignore[assignment]
        async with Session.create(journal, step_definition(script, n)) as session:
            hand, commit = journal._flush_outbox, writer._commit_group  # type: ignore[attr-defined]
            journal._flush_outbox = _stamped(hand, handed)  # type: ignore[attr-defined]
            writer._commit_group = _stamped(commit, begun)  # type: ignore[method-assign]
            writer._hand_back = _stamped(writer._hand_back, ended)  # type: ignore[method-assign]
            writer._deliver = _stamped(writer._deliver, delivered)
            await session.submit("begin")
            await session.wait_idle()
            frames = _wal_frames_per_commit(path)
    crossings = list(zip(handed, begun, ended, delivered, strict=False))

    def median_us(a: int, b: int) -> float:
        return statistics.median(c[b] - c[a] for c in crossings) / 1e3

    return {
        "statements": {
            label: (len(ns) / n, statistics.median(ns) / 1e3, sum(ns) / n / 1e3)
            for label, ns in times.items()
            if len(ns) >= n // 2
        },
        "wal_frames_per_commit": frames,
        "crossing_us": {
            "hand-off: handed to the writer thread -> its transaction begins": median_us(0, 1),
            "the transaction (the writer's statements and Python)": median_us(1, 2),
            "hand-back: transaction ended -> the outcome delivered on trio": median_us(2, 3),
        },
    }


_WAITS = (
    "<method 'poll' of 'select.epoll' objects>",
    "<method 'put' of '_queue.SimpleQueue' objects>",
)
"""Where the profiled trio thread waits: in epoll for the writer's answer, and in the
hand-off's ``put``, which under the profiler waits as the woken writer thread takes the
GIL (the thread clock, in the threads measure, puts a ``put`` at a few microseconds)."""


def _module(filename: str) -> str:
    for marker, name in (("/trio/", "trio"), ("/outcome/", "outcome"), ("/msgspec/", "msgspec")):
        if marker in filename:
            return name
    for package in ("journal/", "loopruntime/", "session/", "benchmarks/"):
        if package in filename:
            return package + filename.rsplit(package, 1)[1]
    return "built-ins" if filename == "~" else "standard library"


def _calls(profile: cProfile.Profile, n: int) -> dict[str, Any]:
    stats = pstats.Stats(profile)
    by_module: collections.Counter[str] = collections.Counter()
    calls = 0
    total = 0.0
    idle = 0.0
    for (filename, _, name), (_, count, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if name in _WAITS:
            idle += own
            continue
        by_module[_module(filename)] += own
        calls += count
        total += own
    return {
        "calls_per_step": calls / n,
        "idle_share": idle / (idle + total),
        "modules": [(m, t / total) for m, t in by_module.most_common(16)],
    }


def profile(synchronous: str = "NORMAL", steps: int = 1000) -> dict[str, Any]:
    """The three measures of one step at ``synchronous``, each over ``steps`` steps."""
    with tempfile.TemporaryDirectory(prefix="loopruntime-bench-floor-profile-") as directory:

        def fresh() -> tuple[str, str]:
            path = os.path.join(directory, f"{time.perf_counter_ns()}.db")
            return f"sqlite:///{path}?synchronous={synchronous}", path

        threads = trio.run(_turn, *fresh(), steps)
        statements = trio.run(_statements, *fresh(), steps)
        probe = cProfile.Profile()
        trio.run(_turn, *fresh(), steps, probe)
    return {"threads": threads, **statements, **_calls(probe, steps)}


def _print(result: dict[str, Any]) -> None:
    print("per step:")
    for key, value in result["threads"].items():
        print(f"  {value:9.2f}  {key}")
    print("writer statements (per step, median us, us per step):")
    for label, (count, median, per_step) in result["statements"].items():
        print(f"  {count:5.2f} x {median:8.1f} = {per_step:8.1f}  {label}")
    print(f"  WAL frames per commit: {result['wal_frames_per_commit']:.2f}")
    print("one append's way (median us):")
    for label, value in result["crossing_us"].items():
        print(f"  {value:8.1f}  {label}")
    print(f"Python calls per step (trio thread): {result['calls_per_step']:.0f}")
    print(f"profiled time waiting (epoll, put): {result['idle_share']:.0%}; the rest by module:")
    for module, share in result["modules"]:
        print(f"  {share:6.1%}  {module}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor_profile", description=__doc__)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--synchronous", default="NORMAL", choices=["FULL", "NORMAL"])
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be a positive number of tool steps, not {args.steps}")
    quiet_logs()
    _print(profile(args.synchronous, args.steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
