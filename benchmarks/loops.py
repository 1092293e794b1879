"""Agent loops on the embedded SQLite journal: step cost, many loops, idle footprint.

Run ``python -m benchmarks.loops`` (``--quick`` for a short run).  Rules: every figure
goes through the public API a user calls (``Session.create``, ``submit``,
``wait_idle``) with a zero-latency scripted model; the garbage collector stays on
(the idle scenario pauses it the way an application making many sessions at once
would, with ``session.collector_paused``) and the time it took is reported beside the
figures it affected; creation and shutdown are outside every timed window.  Nothing
here asserts a number.  What each scenario measures: ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import trio

from journal import Draft, Journal, Record, SessionLease, open_journal
from journal.content import ToolResult
from journal.events import Event
from journal.forwarding import ForwardingJournal
from journal.sqlite import SQLiteJournal
from loopruntime import Limits, LoopDefinition, ModelRequest
from loopruntime.models import Reply, ToolCall
from loopruntime.permits import Permits
from session import Session, collector_paused, thaw_held

from . import tables
from .harness import Progress, forgetful_model, lookup, quiet_logs, sqlite_bytes, stderr_progress

__all__ = [
    "DEFAULT_IDLE_COUNTS",
    "DEFAULT_LOOP_COUNTS",
    "DEFAULT_STEP_SIZES",
    "GcClock",
    "TimedJournal",
    "durable_waits",
    "idle_footprint",
    "main",
    "many_loops",
    "run",
    "run_in_child",
    "steps",
]

DEFAULT_STEP_SIZES: tuple[int, ...] = (10, 100, 1000, 3000)
DEFAULT_LOOP_COUNTS: tuple[int, ...] = (1, 100, 1000)
DEFAULT_IDLE_COUNTS: tuple[int, ...] = (10_000, 100_000)
QUICK_STEP_SIZES: tuple[int, ...] = (10, 100)
QUICK_LOOP_COUNTS: tuple[int, ...] = (1, 100)
QUICK_IDLE_COUNTS: tuple[int, ...] = (1_000,)

# Tail gaps pooled per step size: 10 steps give one tail gap per run, so they are run
# until this many gaps are in hand; a single gap would mostly measure the scheduler.
_MIN_TAIL_GAPS = 100
_STEP_ROUNDS = 3
_LOOP_PAIRS = 3
_QUICK_MIN_TAIL_GAPS = 30
# Turns run in the "loops" scenario, shared out among the loops (at least 3 each).
_LOOP_TURNS = 3000
_QUICK_LOOP_TURNS = 600
# Sessions created at once in the idle scenario.  Each worker holds its sessions in an
# AsyncExitStack, so the harness adds a few hundred tasks, not one task per session.
_IDLE_WORKERS = 200


class GcClock:
    """Counts the time CPython's cyclic garbage collector runs while installed.

    With tens of thousands of live loops a full collection walks every object in the
    process, and that time lands on whatever code allocated last; reporting it beside a
    figure tells runtime cost from collector cost.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections[info["generation"]] += 1

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


class TimedJournal(ForwardingJournal):
    """A ``Journal`` that forwards every call and times each ``append``.

    The session's writer calls ``append`` once per group of commits, so these are the
    commit latencies a loop waits on (plus the writer's own queueing, which is not here).
    """

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.latencies: list[float] = []
        self.records = 0

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Any] = (),
    ) -> list[Record]:
        start = time.perf_counter()
        records = await self.inner.append(
            lease, drafts, expected_seq=expected_seq, consumes=consumes
        )
        self.latencies.append(time.perf_counter() - start)
        self.records += len(records)
        return records

    def reset(self) -> None:
        self.latencies = []
        self.records = 0


# -- the agent --------------------------------------------------------------------------


class StepScript:
    """The zero-latency model of the steps scenario: ``n`` tool calls, then an answer.

    It counts calls itself instead of scanning the request, so the fake model costs O(1)
    per call and every second measured belongs to the runtime; and it stamps each call,
    which is how steps are timed (the gap between two calls is exactly one step).
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.done = 0
        self.stamps: list[float] = []

    def __call__(self, request: ModelRequest) -> Reply:
        self.stamps.append(time.perf_counter())
        if self.done >= self.n:
            return Reply(text="done")
        self.done += 1
        return Reply(tool_calls=[ToolCall(name="lookup", input={"query": f"step {self.done}"})])


def _turn_script(request: ModelRequest) -> Reply:
    """One tool step, then an answer: the shape of every turn in the loops scenarios.

    Looks at the last message only, so it is O(1) and one model serves every loop.
    """
    last = request.messages[-1]
    if any(isinstance(block, ToolResult) for block in last.blocks):
        return Reply(text="done")
    return Reply(tool_calls=[ToolCall(name="lookup", input={"query": "q"})])


def step_definition(script: Callable[[ModelRequest], Reply], n: int) -> LoopDefinition:
    """A loop whose limits allow one turn of ``n`` steps plus the final answer."""
    limits = Limits(
        max_model_calls_per_turn=n + 1,
        max_tool_iterations=n,
        max_tool_calls_per_turn=n,
        # Auto-compaction would add model calls that are not steps; the scripted usage
        # stays far below the window anyway, this only makes it explicit.
        compact_at=None,
    )
    return LoopDefinition(
        name="bench-steps", model=forgetful_model(script), tools=[lookup], limits=limits
    )


def turn_definition() -> LoopDefinition:
    return LoopDefinition(
        name="bench-turns",
        model=forgetful_model(_turn_script),
        tools=[lookup],
        limits=Limits(compact_at=None),
    )


def _remove_db(path: str) -> None:
    # Thousands of steps make megabytes; a run's file is gone once it is measured.
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


def _tail_gaps(stamps: Sequence[float]) -> list[float]:
    """Gaps between consecutive model calls, the last 10% of them (at least one)."""
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return gaps[-max(1, len(gaps) // 10) :] if gaps else []


def _tracked() -> int:
    """Objects the cyclic collector tracks, frozen ones included."""
    return len(gc.get_objects()) + gc.get_freeze_count()


def _rss() -> int:
    """Resident set size of this process in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        # Not Linux: the peak is the best stand-in, and memory only grows while loops
        # are being added.  ru_maxrss is KiB on Linux and BSD, bytes on macOS.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


# -- scenario: steps --------------------------------------------------------------------


async def _one_step_run(path: str, synchronous: str, n: int) -> tuple[list[float], float, int, int]:
    """One turn of ``n`` steps on a fresh file: (tail gaps, seconds, bytes at rest, bytes
    with the connection open)."""
    script = StepScript(n)
    async with open_journal(f"sqlite:///{path}?synchronous={synchronous}") as journal:
        async with Session.create(journal, step_definition(script, n)) as session:
            start = time.perf_counter()
            await session.submit("begin")
            await session.wait_idle()
            seconds = time.perf_counter() - start
            size_open = sqlite_bytes(path)
            state = await session.snapshot()
    # Proof the work was done: the question, a call and a result per step, the answer.
    if state.last_outcome != "completed" or len(state.messages) != 2 * n + 2:
        raise RuntimeError(
            f"a run of {n} steps ended {state.last_outcome} with {len(state.messages)} messages"
        )
    # Closed, the WAL is checkpointed into the database and removed: what is left is what
    # the history occupies.  While open, the WAL holds recently written pages and is reused
    # once SQLite checkpoints it (every 4000 pages), so it measures the write pattern (at
    # FULL with the room the writer keeps written ahead in it, journal/sqlite/wal.py).
    return _tail_gaps(script.stamps), seconds, sqlite_bytes(path), size_open


async def steps(
    directory: str,
    sizes: Sequence[int] = DEFAULT_STEP_SIZES,
    synchronous: Sequence[str] = ("FULL", "NORMAL"),
    *,
    min_tail_gaps: int = _MIN_TAIL_GAPS,
    rounds: int = _STEP_ROUNDS,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """Per-step cost and storage for one turn of N steps, per size and sync mode.

    The sizes are measured in ``rounds`` interleaved rounds (each round runs every size
    once), so that a drift of the machine's speed during the run (disk, CPU governor,
    neighbours) falls on every size alike instead of on whichever ran at the wrong
    moment; within a round, a size whose last 10% is fewer than ``min_tail_gaps /
    rounds`` steps runs again on fresh files.  Each figure pools the tail gaps of all
    its runs."""
    tails: dict[tuple[str, int], list[float]] = {}
    runs: dict[tuple[str, int], list[tuple[float, int, int]]] = {}
    counter = 0
    per_round = max(1, math.ceil(min_tail_gaps / rounds))
    for round_index in range(rounds):
        for sync in synchronous:
            for n in sizes:
                tail_per_run = max(1, (n - 1) // 10)
                repeats = max(1, math.ceil(per_round / tail_per_run))
                progress(
                    f"steps: round {round_index + 1}/{rounds}, {n} steps, "
                    f"synchronous={sync}, {repeats} run(s)"
                )
                for _ in range(repeats):
                    counter += 1
                    path = os.path.join(directory, f"steps-{counter}.db")
                    gaps, seconds, size, size_open = await _one_step_run(path, sync, n)
                    tails.setdefault((sync, n), []).extend(gaps)
                    runs.setdefault((sync, n), []).append((seconds, size, size_open))
                    _remove_db(path)
    rows: list[dict[str, Any]] = []
    for sync in synchronous:
        for n in sizes:
            tail, done = tails[(sync, n)], runs[(sync, n)]
            per_step = sum(tail) / len(tail)
            rows.append(
                {
                    "scenario": "steps",
                    "system": f"loopruntime sqlite {sync}",
                    "synchronous": sync,
                    "steps": n,
                    "runs": len(done),
                    "seconds": statistics.median(r[0] for r in done),
                    "per_step_seconds": per_step,
                    "bytes": max(r[1] for r in done),
                    "bytes_open": max(r[2] for r in done),
                }
            )
            progress(f"steps: {n} at {sync}: {per_step * 1e3:.3f} ms/step")
    return rows


# -- scenario: durable waits -------------------------------------------------------------


async def _counted_turn(path: str, n: int) -> dict[str, int]:
    """One turn of ``n`` tool steps: how its commits met the journal (counted by the
    session writer, ``Session.commit_statistics``), from submit to idle."""
    script = StepScript(n)
    async with open_journal(f"sqlite:///{path}") as journal:
        async with Session.create(journal, step_definition(script, n)) as session:
            before = session.commit_statistics()
            await session.submit("begin")
            await session.wait_idle()
            after = session.commit_statistics()
    return {
        "waits": after.waits - before.waits,
        "pipelined": after.pipelined - before.pipelined,
        "appends": after.appends - before.appends,
    }


async def durable_waits(
    directory: str, sizes: Sequence[int] = (1, 10), progress: Progress = stderr_progress
) -> list[dict[str, Any]]:
    """Commits a turn waited on for durability, per turn size: the count the
    pipelined appends cut (a count, so the same on every machine but for the
    appends, which depend on how commits happened to group)."""
    rows = []
    for n in sizes:
        path = os.path.join(directory, f"waits-{n}.db")
        counted = await _counted_turn(path, n)
        _remove_db(path)
        rows.append({"scenario": "waits", "system": "loopruntime sqlite NORMAL", "steps": n})
        rows[-1].update(counted)
        progress(
            f"waits: a turn of {n} tool step(s): {counted['waits']} durable waits, "
            f"{counted['pipelined']} pipelined commits, {counted['appends']} appends"
        )
    return rows


# -- scenario: many loops ---------------------------------------------------------------


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


async def _runtime_loops(
    path: str, synchronous: str, n_loops: int, turns: int
) -> tuple[dict[str, Any], list[Event]]:
    """N sessions each running ``turns`` turns; the figures and one session's events."""
    definition = turn_definition()
    async with open_journal(f"sqlite:///{path}?synchronous={synchronous}") as inner:
        assert isinstance(inner, SQLiteJournal)
        journal = TimedJournal(inner)
        ready = finished = 0
        all_ready, go, all_finished, release = (trio.Event() for _ in range(4))
        ids: list[str] = []

        async def one() -> None:
            nonlocal ready, finished
            async with Session.create(journal, definition) as session:
                ids.append(session.id)
                ready += 1
                if ready == n_loops:
                    all_ready.set()
                await go.wait()
                for _ in range(turns):
                    await session.submit("go")
                    await session.wait_idle()
                finished += 1
                if finished == n_loops:
                    all_finished.set()
                # Held open until the clock has stopped, so no shutdown is measured.
                await release.wait()

        async with trio.open_nursery() as nursery:
            for _ in range(n_loops):
                nursery.start_soon(one)
            # Creation (open_session, loop.started) and shutdown (loop.stopped) are not
            # part of the figure: every loop is up before the clock starts, and the clock
            # stops when the last turn has ended.
            await all_ready.wait()
            journal.reset()
            before = inner.statistics()
            with GcClock() as gc_clock:
                start = time.perf_counter()
                go.set()
                await all_finished.wait()
                seconds = time.perf_counter() - start
            after = inner.statistics()
            latencies, records = journal.latencies, journal.records
            release.set()
        events = [r.event async for r in inner.read(ids[0])]
    total_turns = n_loops * turns
    return (
        {
            "turns": total_turns,
            "records": records,
            "seconds": seconds,
            "turns_per_second": total_turns / seconds,
            "records_per_second": records / seconds,
            "appends": len(latencies),
            "commit_p50_seconds": _percentile(latencies, 0.50),
            "commit_p99_seconds": _percentile(latencies, 0.99),
            # The writer thread's transactions: with every loop's append in each,
            # the loops move in lockstep (benchmarks/README.md, "Many loops").
            "transactions": after.transactions - before.transactions,
            "largest_transaction": after.largest_group,
            "gc_seconds": gc_clock.seconds,
            # The run's limit on loops working at once (``limit_working_loops``).
            "working_loops_limit": Permits.of_this_run().limit,
        },
        events,
    )


async def _bare_appends(
    path: str, synchronous: str, n_tasks: int, per_task: int, events: Sequence[Event]
) -> float:
    """Seconds for N tasks, one session each, to append one record per call."""
    async with open_journal(f"sqlite:///{path}?synchronous={synchronous}") as journal:
        leases = [await journal.open_session(f"bare-{t}") for t in range(n_tasks)]
        drafts = [
            [
                Draft(id=f"b{t}-{i}", loop="main", event=events[i % len(events)])
                for i in range(per_task)
            ]
            for t in range(n_tasks)
        ]

        async def appender(t: int) -> None:
            lease = leases[t]
            for i, draft in enumerate(drafts[t]):
                await journal.append(lease, [draft], expected_seq=i)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for t in range(n_tasks):
                nursery.start_soon(appender, t)
        return time.perf_counter() - start


async def many_loops(
    directory: str,
    counts: Sequence[int] = DEFAULT_LOOP_COUNTS,
    *,
    total_turns: int = _LOOP_TURNS,
    synchronous: str = "NORMAL",
    pairs: int = _LOOP_PAIRS,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """Turns/s, records/s and commit latency for N concurrent loops, beside bare appends.

    Each count is measured as ``pairs`` back-to-back pairs (ours, then bare on the same
    records), on fresh files; the row is the pair with the median ratio, so one
    disturbed run on a shared machine moves neither side of the reported pair."""
    rows: list[dict[str, Any]] = []
    counter = 0
    for n in counts:
        turns = max(3, total_turns // n)
        measured: list[dict[str, Any]] = []
        for pair in range(pairs):
            counter += 1
            progress(
                f"loops: {n} concurrent loop(s) x {turns} turns, synchronous={synchronous} "
                f"(pair {pair + 1}/{pairs})"
            )
            figures, events = await _runtime_loops(
                os.path.join(directory, f"loops-{counter}.db"), synchronous, n, turns
            )
            per_task = max(1, figures["records"] // n)
            progress(f"loops: bare journal, {n} appender(s) x {per_task} records")
            bare = await _bare_appends(
                os.path.join(directory, f"bare-{counter}.db"), synchronous, n, per_task, events
            )
            bare_rate = n * per_task / bare
            measured.append(
                {
                    "scenario": "loops",
                    "system": f"loopruntime sqlite {synchronous}",
                    "synchronous": synchronous,
                    "loops": n,
                    "turns_per_loop": turns,
                    **figures,
                    "bare_records": n * per_task,
                    "bare_records_per_second": bare_rate,
                    "ratio": figures["records_per_second"] / bare_rate,
                }
            )
        measured.sort(key=lambda row: row["ratio"])
        row = measured[len(measured) // 2]
        row["pairs"] = pairs
        row["pair_ratios"] = [m["ratio"] for m in measured]
        rows.append(row)
        progress(
            f"loops: {n}: {row['turns_per_second']:,.0f} turns/s, "
            f"{row['records_per_second']:,.0f} records/s "
            f"(bare {row['bare_records_per_second']:,.0f}/s); ratios "
            + ", ".join(f"{r:.2f}" for r in row["pair_ratios"])
            + f"; {row['appends'] / max(1, row['transactions']):,.0f} appends per transaction"
        )
    return rows


# -- scenario: idle footprint -----------------------------------------------------------


async def _idle_run(path: str, n: int, progress: Progress) -> dict[str, Any]:
    definition = turn_definition()
    async with open_journal(f"sqlite:///{path}") as journal:
        # Warm up (imports, codec and SQLite caches, the first session's one-off costs) so
        # the baseline below holds everything that does not grow with the loop count.
        async with Session.create(journal, definition) as warm:
            await warm.submit("go")
            await warm.wait_idle()
        created = 0
        all_ready = trio.Event()
        release = trio.Event()
        workers = min(_IDLE_WORKERS, n)

        async def worker(count: int) -> None:
            nonlocal created
            # Sessions are entered in this task's exit stack and left in reverse order on
            # release, which is how one task may hold many trio nurseries open.
            async with AsyncExitStack() as stack:
                for _ in range(count):
                    session = await stack.enter_async_context(Session.create(journal, definition))
                    await session.submit("go")
                    await session.wait_idle()
                    created += 1
                    if created % max(1, n // 10) == 0:
                        progress(f"idle: {created}/{n} loops up")
                    if created == n:
                        all_ready.set()
                await release.wait()

        gc.collect()
        tracked_before = _tracked()
        before = _rss()
        with GcClock() as gc_clock:
            start, cpu_start = time.perf_counter(), time.process_time()
            # This thread's own CPU: the rest of the process's is the journal's
            # writer thread (SQLite), so the two parts of a session's cost show.
            trio_cpu_start = time.thread_time()
            async with trio.open_nursery() as nursery:
                # What an application making many sessions at once calls
                # (session/embedded/collector.py): no automatic collection while they are
                # made, then one collection and their objects frozen, inside the
                # timed window.
                with collector_paused():
                    for w in range(workers):
                        nursery.start_soon(worker, n // workers + (1 if w < n % workers else 0))
                    await all_ready.wait()
                seconds = time.perf_counter() - start
                cpu_seconds = time.process_time() - cpu_start
                trio_cpu_seconds = time.thread_time() - trio_cpu_start
                gc_seconds = gc_clock.seconds
                gc.collect()
                after = _rss()
                # Counted after the RSS reading: the list of every object is large.
                tracked = _tracked() - tracked_before
                progress(f"idle: {n} loops up in {seconds:.1f} s; shutting them down")
                release.set()
        # What it says to do after closing frozen sessions: the cycles among them go.
        thaw_held()
        gc.collect()
    return {
        "scenario": "idle",
        "system": "loopruntime sqlite NORMAL",
        "loops": n,
        "rss_before_bytes": before,
        "rss_after_bytes": after,
        "bytes_per_loop": (after - before) / n,
        "gc_objects_per_loop": tracked / n,
        "setup_seconds": seconds,
        "setup_cpu_seconds": cpu_seconds,
        "setup_trio_cpu_seconds": trio_cpu_seconds,
        "gc_seconds": gc_seconds,
        "collector": "collector_paused",
    }


async def idle_footprint(
    directory: str,
    counts: Sequence[int] = DEFAULT_IDLE_COUNTS,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """Resident memory per idle loop (a session after one turn), per loop count."""
    rows = []
    for n in counts:
        progress(f"idle: {n} sessions, one turn each, then idle")
        rows.append(await _idle_run(os.path.join(directory, f"idle-{n}.db"), n, progress))
        row = rows[-1]
        progress(
            f"idle: {n}: {row['bytes_per_loop']:,.0f} bytes and "
            f"{row['gc_objects_per_loop']:.1f} gc-tracked objects per idle loop"
        )
    return rows


# -- running and printing ---------------------------------------------------------------


async def _run(
    directory: str,
    step_sizes: Sequence[int],
    loop_counts: Sequence[int],
    idle_counts: Sequence[int],
    total_turns: int,
    min_tail_gaps: int,
    quick: bool,
    progress: Progress,
) -> list[dict[str, Any]]:
    # A quick run measures once: it shows the figures work, not what they are.
    rounds, pairs = (1, 1) if quick else (_STEP_ROUNDS, _LOOP_PAIRS)
    rows = await durable_waits(directory, progress=progress)
    rows += await steps(
        directory, step_sizes, min_tail_gaps=min_tail_gaps, rounds=rounds, progress=progress
    )
    rows += await many_loops(
        directory, loop_counts, total_turns=total_turns, pairs=pairs, progress=progress
    )
    # Last: a process that held 100k loops keeps some of that memory afterwards.
    rows += await idle_footprint(directory, idle_counts, progress=progress)
    return rows


def run(
    quick: bool = False,
    *,
    step_sizes: Sequence[int] | None = None,
    loop_counts: Sequence[int] | None = None,
    idle_counts: Sequence[int] | None = None,
    total_turns: int | None = None,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """Run the steps, loops and idle scenarios; return one dict per table row.

    Every row has ``scenario`` (``steps`` / ``loops`` / ``idle``) and ``system``; the
    other keys depend on the scenario (see the functions of the same names).  Sizes
    default to the full run, or to the quick ones with ``quick``; pass them to override.
    Uses a temporary directory, removed afterwards.
    """
    directory = tempfile.mkdtemp(prefix="loopruntime-bench-loops-")
    try:
        return trio.run(
            _run,
            directory,
            step_sizes or (QUICK_STEP_SIZES if quick else DEFAULT_STEP_SIZES),
            loop_counts or (QUICK_LOOP_COUNTS if quick else DEFAULT_LOOP_COUNTS),
            idle_counts or (QUICK_IDLE_COUNTS if quick else DEFAULT_IDLE_COUNTS),
            total_turns or (_QUICK_LOOP_TURNS if quick else _LOOP_TURNS),
            _QUICK_MIN_TAIL_GAPS if quick else _MIN_TAIL_GAPS,
            quick,
            progress,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_in_child(quick: bool) -> list[dict[str, Any]]:
    """``run`` for a freshly spawned process: its logging is not configured yet."""
    quiet_logs()
    return run(quick, progress=stderr_progress)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loops", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (smaller counts)")
    args = parser.parse_args(argv)
    quiet_logs()
    print(tables.loops_table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
