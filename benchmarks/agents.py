"""Agents per core: how many agent sessions one host process held to one core sustains.

Run ``python -m benchmarks.agents`` (``--quick`` for a short run).  Every session runs
turns the shape of a real agent's, with a scripted model that streams at a real pace and
no network: a reply streamed in 40 pieces 50 ms apart that asks for a tool, the tool
taking 0.5 s, a final reply streamed in 20 pieces, then the next message 3 s later.  N
such sessions run in a child process pinned to one core (``taskset -c 0``), and N passes
when, over the measured window, all four hold at the 99th percentile: a streamed piece
reaches its subscriber within 100 ms, a journal commit takes at most 50 ms, the trio
scheduler's lag stays under 20 ms, and no turn takes over 1.2 x its scripted time.  The
same search drives LangGraph (an async graph, the async SQLite checkpointer, the same
replies at the same pace), the two sides taking turns, and in a full run each N is
decided by the majority of up to three runs.  One more run of ours, at the N it reached,
is sampled by py-spy for where a turn's CPU goes by phase, and ``count_wakeups`` counts a
turn's scheduler steps by task in virtual time.  Rules: a child process per
run, so no run inherits another's heap; each run records the load average beside its
figures (the machine is shared); nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import gc
import json
import operator
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypedDict

import trio
import trio.testing

from journal import open_journal
from journal.content import (
    BlockStarted,
    BlockStopped,
    InputJsonDelta,
    TextDelta,
    ToolResult,
    Usage,
)
from loopruntime import Limits, LoopDefinition, ModelRequest, ToolContext, tool
from loopruntime.model import Delta, StopDelta, UsageDelta

from .harness import Progress, quiet_logs, stderr_progress
from .loops import TimedJournal

__all__ = [
    "BUDGETS",
    "WRITER_PHASE",
    "WARMUP",
    "SCRIPTED_TURN_SECONDS",
    "PacedModel",
    "count_wakeups",
    "Shape",
    "main",
    "profile_phases",
    "run",
    "run_once",
    "search",
]


class Shape:
    """The agent every session plays (both sides play the same one)."""

    first_pieces = 40
    final_pieces = 20
    piece_delay = 0.05
    piece_chars = 16
    tool_seconds = 0.5
    pause_seconds = 3.0


# The model streams the tool call's arguments as one more paced piece.
SCRIPTED_TURN_SECONDS = (
    Shape.first_pieces + 1 + Shape.final_pieces
) * Shape.piece_delay + Shape.tool_seconds
"""What a turn takes with no load at all: every piece on time, the tool exactly 0.5 s."""

BUDGETS = {"piece_p99": 0.100, "commit_p99": 0.050, "lag_p99": 0.020, "turn_ratio_p99": 1.2}
"""What N must hold to pass, every figure a 99th percentile over the measured window."""

_LAG_PERIOD = 0.010
_CYCLE = SCRIPTED_TURN_SECONDS + Shape.pause_seconds
WARMUP = _CYCLE + 1.0
"""Seconds before the window opens: sessions start spread over one cycle, so by then
every one has started."""
_FULL_SECONDS, _QUICK_SECONDS = 20.0, 5.0
_FULL_PROBES, _QUICK_PROBES = 5, 2
_FULL_VOTES, _QUICK_VOTES = 3, 1
_FULL_START, _QUICK_START = 100, 100


def _p99(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _stamp(due: float) -> str:
    # A piece carries the moment it was due (perf_counter), in exactly the piece's
    # width, so the subscriber can tell its delay without any table shared between them.
    return f"{due:{Shape.piece_chars}.5f}"[: Shape.piece_chars]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Window:
    """What one run records while its window is open (and nothing outside it)."""

    def __init__(self) -> None:
        self.open = False
        self.gc_pauses: list[float] = []
        self._gc_started = 0.0
        self.pieces: list[float] = []
        self.lags: list[float] = []
        self.turns: list[float] = []
        """Turns that ended in the window, whenever they began."""

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        """For ``gc.callbacks``: a collection stops every thread that wants the GIL,
        so its pauses are a cause of scheduler lag to tell apart from the runtime's."""
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self.open:
            self.gc_pauses.append(time.perf_counter() - self._gc_started)

    def figures(self, commits: Sequence[float], cpu: float, seconds: float) -> dict[str, Any]:
        turn_p99 = _p99(self.turns)
        return {
            "turns": len(self.turns),
            "pieces": len(self.pieces),
            "commits": len(commits),
            "cpu_seconds": cpu,
            "core_share": cpu / seconds,
            "cpu_per_turn": cpu / len(self.turns) if self.turns else None,
            "piece_p99": _p99(self.pieces),
            "commit_p99": _p99(commits),
            "lag_p99": _p99(self.lags),
            "turn_p99": turn_p99,
            "turn_ratio_p99": turn_p99 / SCRIPTED_TURN_SECONDS if turn_p99 else None,
            "gc_seconds": sum(self.gc_pauses),
            "gc_longest": max(self.gc_pauses, default=0.0),
        }


# -- loopruntime ---------------------------------------------------------------------------


@tool(permission="allow")
async def outside_work(ctx: ToolContext, *, job: int) -> str:
    """Half a second of work done elsewhere (a request to some service)."""
    await trio.sleep(Shape.tool_seconds)
    return f"job {job} done"


class PacedModel:
    """A model paced like a server, with no network: each piece (text, or the tool
    call's arguments) is due ``piece_delay`` after the one before, counted from the
    call's start, so a piece the loaded process takes late does not push the later ones
    back.  Each text piece is the moment it was due (``_stamp``).  Its stream wakes its
    reader once a piece, as a network read would: the scripted model (which also takes a
    checkpoint per chunk) would add a scheduler step per piece that no real model costs.
    The reply looks at the last message only (O(1)): after a tool's result the final
    reply, else the first one, which asks for the tool."""

    name = "paced"
    context_window = 200_000

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Delta]]:
        answering = any(isinstance(block, ToolResult) for block in request.messages[-1].blocks)
        yield self._reply(answering, input_tokens=20 * len(request.messages))

    @staticmethod
    async def _reply(answering: bool, *, input_tokens: int) -> AsyncIterator[Delta]:
        start, stamp = trio.current_time(), time.perf_counter()
        pieces = Shape.final_pieces if answering else Shape.first_pieces
        yield UsageDelta(usage=Usage(input_tokens=input_tokens))
        yield BlockStarted(index=0, kind="text")
        for sent in range(1, pieces + 1):
            await trio.sleep_until(start + sent * Shape.piece_delay)
            yield TextDelta(index=0, text=_stamp(stamp + sent * Shape.piece_delay))
        yield BlockStopped(index=0)
        if not answering:
            call_id = "toolu_" + os.urandom(8).hex()
            yield BlockStarted(index=1, kind="tool_use", id=call_id, name="outside_work")
            await trio.sleep_until(start + (pieces + 1) * Shape.piece_delay)
            yield InputJsonDelta(index=1, partial_json='{"job": 1}')
            yield BlockStopped(index=1)
        yield UsageDelta(usage=Usage(output_tokens=Shape.piece_chars * pieces // 4))
        yield StopDelta(stop_reason="end_turn" if answering else "tool_use")


def agent_definition() -> LoopDefinition:
    return LoopDefinition(
        name="bench-agent",
        system="Work.",
        model=PacedModel(),
        tools=[outside_work],
        limits=Limits(compact_at=None),
    )


async def _lag_probe(window: _Window) -> None:
    while True:
        start = time.perf_counter()
        await trio.sleep(_LAG_PERIOD)
        if window.open:
            window.lags.append(time.perf_counter() - start - _LAG_PERIOD)


async def _ours(n: int, seconds: float, warmup: float, directory: str) -> dict[str, Any]:
    from session import Session
    from session.embedded.subscriptions import StreamDelta

    window = _Window()
    gc.callbacks.append(window.gc_callback)
    definition = agent_definition()

    async def reader(session: Any) -> None:
        async for item in session.subscribe(None, deltas=True):
            if isinstance(item, StreamDelta) and isinstance(item.delta, TextDelta):
                if window.open:
                    window.pieces.append(time.perf_counter() - float(item.delta.text))

    async def agent(journal: Any, index: int) -> None:
        await trio.sleep(index * _CYCLE / n)
        async with Session.create(journal, definition) as session, trio.open_nursery() as inner:
            inner.start_soon(reader, session)
            while True:
                start = time.perf_counter()
                await session.submit(f"message {index}")
                await session.wait_idle()
                if window.open:
                    window.turns.append(time.perf_counter() - start)
                await trio.sleep(Shape.pause_seconds)

    url = f"sqlite:///{os.path.join(directory, 'agents.db')}?synchronous=FULL"
    async with open_journal(url) as inner_journal:
        journal = TimedJournal(inner_journal)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_lag_probe, window)
            for index in range(n):
                nursery.start_soon(agent, journal, index)
            await trio.sleep(warmup)
            journal.reset()
            window.open, cpu, start = True, _cpu_seconds(), time.perf_counter()
            main = time.thread_time()
            await trio.sleep(seconds)
            window.open = False
            cpu, seconds = _cpu_seconds() - cpu, time.perf_counter() - start
            main = time.thread_time() - main
            commits = list(journal.latencies)
            nursery.cancel_scope.cancel()
    figures = window.figures(commits, cpu, seconds)
    # The rest is the journal's writer thread (and the interpreter's own, a rounding error).
    figures.update(main_thread_cpu=main, other_threads_cpu=cpu - main)
    return figures


# -- LangGraph -------------------------------------------------------------------------


def _langgraph(n: int, seconds: float, warmup: float, directory: str) -> dict[str, Any]:
    import asyncio

    return asyncio.run(_langgraph_main(n, seconds, warmup, directory))


class _GraphState(TypedDict):
    """LangGraph's state: the messages, merged by appending (at module level, where
    LangGraph can resolve the annotations)."""

    messages: Annotated[list[dict[str, Any]], operator.add]


def _langgraph_graph(saver: Any) -> Any:
    import asyncio

    from langgraph.config import get_stream_writer
    from langgraph.graph import END, START, StateGraph

    async def model(state: _GraphState) -> dict[str, Any]:
        write = get_stream_writer()
        answering = state["messages"][-1]["role"] == "tool"
        pieces = Shape.final_pieces if answering else Shape.first_pieces
        loop = asyncio.get_running_loop()
        start, stamp = loop.time(), time.perf_counter()
        for sent in range(1, pieces + 1):
            # Paced like a server, each piece due at a fixed time from the start.
            await asyncio.sleep(start + sent * Shape.piece_delay - loop.time())
            write(_stamp(stamp + sent * Shape.piece_delay))
        chars = Shape.piece_chars * pieces
        if answering:
            return {"messages": [{"role": "assistant", "content": "a" * chars}]}
        # The tool call's arguments, one more paced piece as on our side.
        await asyncio.sleep(start + (pieces + 1) * Shape.piece_delay - loop.time())
        call = {"id": "call-1", "name": "outside_work", "args": {"job": 1}}
        return {"messages": [{"role": "assistant", "content": "q" * chars, "tool_calls": [call]}]}

    async def tools(state: _GraphState) -> dict[str, Any]:
        await asyncio.sleep(Shape.tool_seconds)
        return {"messages": [{"role": "tool", "content": "job 1 done", "tool_call_id": "call-1"}]}

    def route(state: _GraphState) -> str:
        return "tools" if state["messages"][-1].get("tool_calls") else END

    graph = StateGraph(_GraphState)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


def _timed(method: Callable[..., Any], latencies: list[float], window: _Window) -> Any:
    async def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = await method(*args, **kwargs)
        if window.open:
            latencies.append(time.perf_counter() - start)
        return result

    return timed


async def _langgraph_main(n: int, seconds: float, warmup: float, directory: str) -> dict[str, Any]:
    import asyncio

    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    window, commits = _Window(), []
    gc.callbacks.append(window.gc_callback)
    connection = await aiosqlite.connect(os.path.join(directory, "langgraph.db"))
    await connection.execute("pragma journal_mode=wal")
    await connection.execute("pragma synchronous=FULL")
    saver = AsyncSqliteSaver(connection)
    await saver.setup()
    # Every checkpoint write a superstep waits on, timed like our journal's appends.
    saver.aput = _timed(saver.aput, commits, window)  # type: ignore[method-assign]
    saver.aput_writes = _timed(saver.aput_writes, commits, window)  # type: ignore[method-assign]
    graph = _langgraph_graph(saver)

    async def lag_probe() -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(_LAG_PERIOD)
            if window.open:
                window.lags.append(time.perf_counter() - start - _LAG_PERIOD)

    async def agent(index: int) -> None:
        await asyncio.sleep(index * _CYCLE / n)
        config = {"configurable": {"thread_id": f"agent-{index}"}, "recursion_limit": 10_000}
        while True:
            start = time.perf_counter()
            message = {"messages": [{"role": "user", "content": f"message {index}"}]}
            # durability="sync": each checkpoint is written before the next step starts,
            # the guarantee our journal gives (commit, then go on).
            async for piece in graph.astream(
                message, config, stream_mode="custom", durability="sync"
            ):
                if window.open:
                    window.pieces.append(time.perf_counter() - float(piece))
            if window.open:
                window.turns.append(time.perf_counter() - start)
            await asyncio.sleep(Shape.pause_seconds)

    tasks = [asyncio.create_task(lag_probe())]
    tasks += [asyncio.create_task(agent(index)) for index in range(n)]
    await asyncio.sleep(warmup)
    window.open, cpu, start = True, _cpu_seconds(), time.perf_counter()
    await asyncio.sleep(seconds)
    window.open = False
    cpu, elapsed = _cpu_seconds() - cpu, time.perf_counter() - start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await connection.close()
    return window.figures(commits, cpu, elapsed)


# -- where a turn's CPU goes -------------------------------------------------------------

# A stack goes to the first of these found walking out from its innermost frame, so each
# phase is counted without the phases it calls (msgspec and sqlite3 are C and count in
# their caller).  In the project's own packages the phase is the module.
_PHASES = (
    ("trio/", "trio scheduler and I/O"),
    ("structlog/", "logging"),
    ("benchmarks/", "harness (readers, agents, probe)"),
)
_PACKAGES = ("journal", "loopruntime", "session")
# The trio thread's innermost frame while it waits for I/O or a deadline: idle.
_IDLE = "EpollIOManager.get_events (trio/_core/_io_epoll.py"
WRITER_PHASE = "journal writer thread (rows, SQLite; its own CPU clock)"


def _phase(paths: Sequence[str]) -> str:
    """The phase of a stack given as its frames' file paths, innermost last."""
    for path in reversed(paths):
        for marker, phase in _PHASES:
            if marker in path:
                return phase
        parts = path.split("/")
        for package in _PACKAGES:
            if package in parts[:-1]:
                return "/".join(parts[len(parts) - 1 - parts[::-1].index(package) :])
    return "other Python"


def _stack_paths(line: str) -> tuple[str, list[str], int]:
    """A line of py-spy's raw output with ``--threads`` (``thread (tid): name;frame;...
    count``, each frame ``function (path:line)``): the thread's name, its frames' paths
    (outermost first) and the count."""
    stack, _, count = line.rpartition(" ")
    thread, _, stack = stack.partition(";")
    paths = []
    for frame in stack.split(";"):
        _, _, where = frame.rpartition(" (")
        paths.append(where.rsplit(":", 1)[0])
    return thread.rpartition(": ")[2], paths, int(count)


def phases_of(raw: str) -> dict[str, int]:
    """py-spy's raw samples of the main (trio) thread counted by phase.

    py-spy samples from outside the process, with ``--gil`` only the thread holding the
    GIL, so the trio thread's counts share out its Python CPU (its waits in epoll and
    for the GIL left out).  A sampler inside the process would itself need the GIL and
    see that thread mostly where it releases it (``os.urandom``, the wake-up socket).
    Other threads are left out: the writer's CPU is mostly SQLite's, without the GIL,
    and comes from its own clock."""
    counts: dict[str, int] = {}
    for line in raw.splitlines():
        if line.strip():
            thread, paths, count = _stack_paths(line)
            if thread != "MainThread" or line.rpartition(";")[2].startswith(_IDLE):
                continue
            phase = _phase(paths)
            counts[phase] = counts.get(phase, 0) + count
    return counts


def _py_spy() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.exists(here) else shutil.which("py-spy")


# -- wake-ups a turn, counted ----------------------------------------------------------------

_TASK_ROLES = {
    "loopruntime.actor.Loop._act": "the turn (the loop's actor runs it)",
    "benchmarks.agents._count_run.<locals>.reader": "the subscriber (harness)",
    "loopruntime.actor.Loop._guarded": "stream flushes (a task each)",
    "<TrioToken.run_sync_soon task>": "hand-backs from other threads",
    "run timer": "the run's timer (stream flushes, writers' linger)",
    "session.embedded.writer.Writer.run": "the session's writer task",
    "loops' permits kept by waits": "the permits' watcher",
    "benchmarks.agents._count_run.<locals>.agent": "the agent (harness: submit, wait)",
}


class _Steps(trio.abc.Instrument):
    """Scheduler steps by task name, and the run loop's waits for I/O (its rounds)."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}
        self.rounds = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] = self.steps.get(task.name, 0) + 1

    def before_io_wait(self, timeout: float) -> None:
        self.rounds += 1


async def _count_run(n: int, turns: int) -> dict[str, Any]:
    from session import Session
    from session.embedded.subscriptions import StreamDelta

    definition = agent_definition()
    steps = _Steps()
    pieces = appends = 0

    async def reader(session: Any) -> None:
        nonlocal pieces
        async for item in session.subscribe(None, deltas=True):
            if isinstance(item, StreamDelta) and isinstance(item.delta, TextDelta):
                pieces += 1

    async def agent(journal: Any, index: int) -> None:
        nonlocal appends
        await trio.sleep(index * _CYCLE / n)
        async with Session.create(journal, definition) as session, trio.open_nursery() as inner:
            inner.start_soon(reader, session)
            for _ in range(turns):
                await session.submit(f"message {index}")
                await session.wait_idle()
                await trio.sleep(Shape.pause_seconds)
            appends += session.commit_statistics().appends
            inner.cancel_scope.cancel()

    trio.lowlevel.add_instrument(steps)
    async with open_journal("memory:") as journal, trio.open_nursery() as nursery:
        for index in range(n):
            nursery.start_soon(agent, journal, index)
    trio.lowlevel.remove_instrument(steps)
    return {"steps": steps.steps, "rounds": steps.rounds, "pieces": pieces, "appends": appends}


def count_wakeups(n: int = 20, turns: tuple[int, int] = (2, 4)) -> dict[str, Any]:
    """Scheduler steps a streamed turn costs, by task, with ``n`` sessions: the difference
    of two runs of ``turns`` turns a session (so making the sessions cancels out), on the
    memory journal under trio's ``MockClock`` jumping ahead whenever every task waits: no
    thread and no real time, so the counts do not depend on the machine or its load (trio
    orders each batch at random, which moves them by about 1 %).  ``floor`` is what each
    streamed piece needs: one wake of the model's stream (its paced sleep, the stand-in for
    a network read) and one of its subscriber."""
    few, many = (
        trio.run(_count_run, n, t, clock=trio.testing.MockClock(autojump_threshold=0))
        for t in turns
    )
    per = n * (turns[1] - turns[0])
    by_task = {
        _TASK_ROLES.get(name, name): (count - few["steps"].get(name, 0)) / per
        for name, count in many["steps"].items()
    }
    pieces = (many["pieces"] - few["pieces"]) / per
    return {
        "sessions": n,
        "by_task": dict(sorted(by_task.items(), key=lambda kv: -kv[1])),
        "steps": sum(by_task.values()),
        "rounds": (many["rounds"] - few["rounds"]) / per,
        "pieces": pieces,
        "appends": (many["appends"] - few["appends"]) / per,
        # The tool call's arguments are one more paced piece, not shown as text.
        "floor": 2 * (pieces + 1),
    }


# -- one run in a child process -----------------------------------------------------------


def _child(side: str, n: int, seconds: float, warmup: float) -> dict[str, Any]:
    quiet_logs()
    directory = tempfile.mkdtemp(prefix="loopruntime-bench-agents-")
    try:
        if side == "ours":
            return trio.run(_ours, n, seconds, warmup, directory)
        if side == "langgraph":
            return _langgraph(n, seconds, warmup, directory)
        raise ValueError(f"unknown side {side!r}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _pinned() -> list[str]:
    """``taskset -c 0`` when it can pin a process here, else nothing (said in the row)."""
    taskset = shutil.which("taskset")
    return [taskset, "-c", "0"] if taskset else []


def _judged(figures: dict[str, Any]) -> dict[str, Any]:
    failed = [
        name for name, budget in BUDGETS.items() if figures[name] is None or figures[name] > budget
    ]
    if not figures["turns"]:
        failed.append("turns")
    figures.update(failed=failed, passed=not failed)
    return figures


def run_once(
    side: str, n: int, seconds: float, *, warmup: float = WARMUP, profile: bool = False
) -> dict[str, Any]:
    """One run of ``n`` sessions on ``side`` (``ours`` or ``langgraph``) in a child
    process held to one core: its figures over ``seconds`` after ``warmup``, the load
    average before it, and ``passed`` against ``BUDGETS``.  With ``profile``, py-spy
    samples the child over the same window and ``samples`` counts them by phase."""
    pin = _pinned()
    load = os.getloadavg()[0]
    command = [*pin, sys.executable, "-m", "benchmarks.agents", "--child", side]
    command += ["--sessions", str(n), "--seconds", str(seconds), "--warmup", str(warmup)]
    samples = None
    with tempfile.TemporaryDirectory(prefix="loopruntime-bench-spy-") as directory:
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as child:
            if profile:
                samples = _sample(child.pid, warmup, seconds, directory)
            out, err = child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the {side} run of {n} sessions failed:\n{err[-2000:]}")
    figures = json.loads(out)
    figures.update(side=side, sessions=n, seconds=seconds, load=load, pinned=bool(pin))
    if profile:
        figures["samples"] = samples
    return _judged(figures)


def _sample(pid: int, warmup: float, seconds: float, directory: str) -> dict[str, int]:
    spy = _py_spy()
    if spy is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy (the bench extra)")
    time.sleep(warmup)
    output = os.path.join(directory, "samples.txt")
    command = [spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    command += ["--rate", "200", "--format", "raw", "--threads", "--gil", "--nonblocking"]
    command += ["--output", output]
    subprocess.run(command, capture_output=True, check=True)
    with open(output) as f:
        return phases_of(f.read())


class _Search:
    """One side's search for its largest passing N: doubling from ``start`` until an N
    fails, then halving the gap until it is within an eighth of the passing N.  With
    ``votes=3`` an N is run twice, and a third time when the two disagree: the majority
    decides, so one run spoiled by a neighbour's burst on the shared core does not."""

    def __init__(self, side: str, start: int, max_probes: int, votes: int = 1) -> None:
        self.side = side
        self.max_probes = max_probes
        self.votes = votes
        self.runs: list[dict[str, Any]] = []
        self.verdicts: list[tuple[int, bool]] = []
        self._trials: list[bool] = []
        self.passed = 0
        self.failed: int | None = None
        self.next: int | None = start

    def _decided(self) -> bool | None:
        trials = self._trials
        if self.votes == 1 or len(trials) == 3 or (len(trials) == 2 and trials[0] == trials[1]):
            return sum(trials) * 2 > len(trials)
        return None

    def record(self, row: dict[str, Any]) -> None:
        n = row["sessions"]
        self.runs.append(row)
        self._trials.append(row["passed"])
        passed = self._decided()
        if passed is None:
            return  # the same N again
        self._trials = []
        self.verdicts.append((n, passed))
        if passed:
            self.passed = max(self.passed, n)
        else:
            self.failed = n if self.failed is None else min(self.failed, n)
        if len(self.verdicts) >= self.max_probes:
            self.next = None
        elif self.failed is None:
            self.next = n * 2
        elif self.failed - self.passed <= max(1, self.passed // 8):
            self.next = None
        else:
            self.next = (self.passed + self.failed) // 2

    def result(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "n": self.passed,
            "first_failing": self.failed,
            "verdicts": self.verdicts,
            "runs": self.runs,
        }


def search(
    sides: Sequence[str],
    *,
    start: int,
    seconds: float,
    max_probes: int,
    votes: int = 1,
    warmup: float = WARMUP,
    progress: Progress = stderr_progress,
) -> dict[str, dict[str, Any]]:
    """Each side's largest passing N (``n``, 0 if none passed), trying at most
    ``max_probes`` values of N a side, each decided by ``votes`` runs (1, or the
    majority of up to 3).  The sides take turns, one run each, so a change in the
    machine's load during the search falls on every side alike."""
    searches = [_Search(side, start, max_probes, votes) for side in sides]
    while any(found.next is not None for found in searches):
        for found in searches:
            if found.next is None:
                continue
            row = run_once(found.side, found.next, seconds, warmup=warmup)
            verdict = "passes" if row["passed"] else f"fails ({', '.join(row['failed'])})"
            progress(f"agents: {found.side} N={found.next} {verdict}; load {row['load']:.1f}")
            found.record(row)
    return {found.side: found.result() for found in searches}


def profile_phases(n: int, seconds: float, *, warmup: float = WARMUP) -> dict[str, Any]:
    """One run of ours at ``n`` sessions sampled by py-spy: the run's figures plus
    ``phases``, the window's CPU seconds shared out by the samples of each phase; or
    ``{"skipped": reason}`` when py-spy is not installed."""
    if _py_spy() is None:
        return {"skipped": "py-spy is not installed (pip install py-spy, in the bench extra)"}
    row = run_once("ours", n, seconds, warmup=warmup, profile=True)
    total = sum(row["samples"].values()) or 1
    main = row["main_thread_cpu"]
    row["phases"] = {phase: main * count / total for phase, count in row["samples"].items()}
    row["phases"][WRITER_PHASE] = row["other_threads_cpu"]
    return row


def run(quick: bool = False, *, progress: Progress = stderr_progress) -> dict[str, Any]:
    """Both searches and the profile (at the N ours reached); what the report renders."""
    seconds = _QUICK_SECONDS if quick else _FULL_SECONDS
    probes = _QUICK_PROBES if quick else _FULL_PROBES
    votes = _QUICK_VOTES if quick else _FULL_VOTES
    start = _QUICK_START if quick else _FULL_START
    sides = ["ours"]
    peer: dict[str, Any] = {}
    try:
        import aiosqlite  # noqa: F401
        import langgraph.checkpoint.sqlite.aio  # noqa: F401
    except ImportError as exc:
        peer = {"side": "langgraph", "skipped": f"not installed ({exc.name})"}
    else:
        sides.append("langgraph")
    found = search(
        sides, start=start, seconds=seconds, max_probes=probes, votes=votes, progress=progress
    )
    wakeups = count_wakeups()
    profile = profile_phases(found["ours"]["n"] or start, seconds)
    progress(f"agents: profile at N={found['ours']['n'] or start}")
    return {
        "scripted_turn_seconds": SCRIPTED_TURN_SECONDS,
        "budgets": BUDGETS,
        "ours": found["ours"],
        "langgraph": found.get("langgraph", peer),
        "wakeups": wakeups,
        "profile": profile,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agents", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs, a coarse search")
    parser.add_argument("--child", choices=("ours", "langgraph"))
    parser.add_argument("--sessions", type=int, default=_FULL_START)
    parser.add_argument("--seconds", type=float, default=_FULL_SECONDS)
    parser.add_argument("--warmup", type=float, default=WARMUP)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.sessions, args.seconds, args.warmup)))
        return 0
    quiet_logs()
    print(json.dumps(run(quick=args.quick), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
