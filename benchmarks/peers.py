"""The peers: what a user would pick instead of loopruntime, doing the same work.

LangGraph with its SQLite checkpointer and eventsourcing with its SQLite persistence, each
optional (``pip install -e '.[bench]'``).  Rules: no network and no model (a scripted
node with no latency, a tool that returns its input); each peer is written the way its
own documentation teaches; a peer that is missing, or a run over its time budget, is
reported as skipped with the reason, and no figure is ever made up for it.  How a step is
defined on both sides: ``benchmarks/README.md``.  ``python -m benchmarks.peers``
(``--quick``) prints every figure alone.
"""

# One piece although past 600 lines: both peers share the result records, the version
# probe, the time budget and the SQLite file helpers, and are installed, skipped and
# reported together as one section; split per peer, each half would be a few helpers short
# of standing alone.

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import msgspec

from . import tables
from .report import format_bytes, format_number

__all__ = [
    "DEFAULT_MAX_SECONDS",
    "DEFAULT_REPLAY_SIZES",
    "DEFAULT_RESTORE_SIZES",
    "DEFAULT_STEP_SIZES",
    "EVENTSOURCING",
    "LANGGRAPH",
    "PeerFigures",
    "RestoreResult",
    "StepResult",
    "eventsourcing_replay",
    "langgraph_restore",
    "langgraph_steps",
    "main",
    "peer_versions",
    "run_all",
]

LANGGRAPH = "langgraph+sqlite"
EVENTSOURCING = "eventsourcing"

DEFAULT_STEP_SIZES: tuple[int, ...] = (10, 100, 1000, 3000)
DEFAULT_RESTORE_SIZES: tuple[int, ...] = (1_000, 10_000, 100_000)
DEFAULT_REPLAY_SIZES: tuple[int, ...] = (1_000, 10_000, 100_000)
# Per step-run size. On a 2-core machine LangGraph finishes 3000 steps in about two minutes
# (and about 4 GiB of checkpoints); 150 s lets it finish there while keeping the whole run
# near three minutes, and a slower machine reports the size as skipped instead of hanging.
DEFAULT_MAX_SECONDS = 150.0

Durability = Literal["sync", "async", "exit"]
Progress = Callable[[str], None]

# The distributions whose versions the report names, in print order.
_PEER_DISTRIBUTIONS = (
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "eventsourcing",
)
_LANGGRAPH_MODULES = (
    "langchain_core.messages",
    "langchain_core.tools",
    "langgraph.graph",
    "langgraph.prebuilt",
    "langgraph.checkpoint.sqlite",
)
_FINAL_ANSWER = "done"


class StepResult(msgspec.Struct, frozen=True, kw_only=True):
    """One agent-loop run of ``size`` steps on a peer.

    When ``skipped`` is true every figure is ``None`` and ``reason`` says why (peer not
    installed, or the run went over its time budget, in which case ``steps_done`` says how far
    it got). Partial figures are deliberately not put in the numeric fields, so a table can
    never show them as a finished run; ``reason`` carries them as text.
    """

    system: str
    size: int
    seconds: float | None = None
    """Wall time of the whole run: every step, the final answer, every checkpoint."""
    per_step_seconds: float | None = None
    """Mean seconds per step over the last 10% of steps (at least one), where history is
    longest, so growth with history shows."""
    bytes: int | None = None
    """The SQLite database plus its WAL on disk right after the run, connection still open."""
    steps_done: int = 0
    skipped: bool = False
    reason: str = ""


class RestoreResult(msgspec.Struct, frozen=True, kw_only=True):
    """Reading back a history of ``size`` records (messages or events) from a peer's store.

    ``seconds`` is the best of a few cold reads, each on a fresh connection/application so
    no in-process cache helps; the OS page cache is warm, as it is for any recent session.
    """

    system: str
    size: int
    seconds: float | None = None
    records_per_second: float | None = None
    resume_seconds: float | None = None
    """LangGraph only: one more turn (load + one tool step + final answer) on the thread."""
    build_seconds: float | None = None
    """How long it took to put the history in the store; not part of the comparison."""
    bytes: int | None = None
    skipped: bool = False
    reason: str = ""
    note: str = ""


class PeerFigures(msgspec.Struct, frozen=True, kw_only=True):
    """Everything :func:`run_all` measured, plus the versions it measured."""

    versions: dict[str, str | None]
    steps: list[StepResult]
    restores: list[RestoreResult]
    replays: list[RestoreResult]


class _OverBudget(Exception):
    """Raised from inside the graph to stop a run that passed its time budget."""

    def __init__(self, steps_done: int) -> None:
        super().__init__(f"over budget after {steps_done} steps")
        self.steps_done = steps_done


# -- shared helpers --------------------------------------------------------------------------


def peer_versions() -> dict[str, str | None]:
    """Installed version of each peer distribution, ``None`` where it is not installed."""
    versions: dict[str, str | None] = {}
    for name in _PEER_DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _missing(modules: Sequence[str]) -> str | None:
    """The reason a peer cannot run, or ``None`` when every module it needs imports."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"{name} is not installed ({exc}); install with pip install -e '.[bench]'"
    return None


@contextmanager
def _work_dir(db_dir: str | os.PathLike[str] | None) -> Iterator[Path]:
    """The caller's directory (created if needed), or a temporary one removed afterwards."""
    if db_dir is not None:
        path = Path(db_dir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="loopruntime-peers-") as tmp:
        yield Path(tmp)


def _sqlite_files(path: Path) -> list[Path]:
    return [path, *(path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal"))]


def _remove_sqlite(path: Path) -> None:
    # A leftover database from an earlier run would add its history to this one's figures.
    for file in _sqlite_files(path):
        file.unlink(missing_ok=True)


def _sqlite_bytes(path: Path) -> int:
    """Database plus WAL: together they are what the history occupies on disk right now
    (the shared-memory index is a cache and is left out)."""
    total = 0
    for file in (path, path.with_name(path.name + "-wal")):
        if file.exists():
            total += file.stat().st_size
    return total


def _no_tracing() -> AbstractContextManager[Any]:
    """Keep LangSmith tracing off even if the environment turns it on: a benchmark must not
    send anything anywhere, and tracing would be measured as LangGraph's own cost."""
    try:
        from langsmith import tracing_context
    except ImportError:
        return nullcontext()
    return tracing_context(enabled=False)


# -- LangGraph ------------------------------------------------------------------------------


class _Script:
    """The zero-latency model: per turn, ``steps`` tool calls and then a final answer.

    It keeps its own per-turn counter instead of scanning the history, so the fake model costs
    O(1) per call and every second measured belongs to LangGraph. A turn starts when the last
    message is a human one. It also stamps each call, which is how steps are timed: the gap
    between two model calls is exactly one step (checkpoint, tool node, checkpoint).
    """

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.done = 0
        self.stamps: list[float] = []
        self.deadline = float("inf")

    def __call__(self, state: Any) -> dict[str, Any]:
        # ``state`` is LangGraph's MessagesState, a TypedDict only importable with langgraph.
        from langchain_core.messages import AIMessage, HumanMessage

        now = time.perf_counter()
        self.stamps.append(now)
        messages = state["messages"]
        if isinstance(messages[-1], HumanMessage):
            self.done = 0
        if self.done >= self.steps:
            return {"messages": [AIMessage(content=_FINAL_ANSWER)]}
        if now > self.deadline:
            raise _OverBudget(self.done)
        self.done += 1
        # The history length makes the id unique on the thread without a scan.
        call_id = f"call_{len(messages)}"
        call = {"name": "lookup", "args": {"query": f"step {self.done}"}, "id": call_id}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}


def _lookup(query: str) -> str:
    """Return the query unchanged: the trivial tool every benchmark step calls."""
    return query


def _compile_graph(checkpointer: Any, script: _Script) -> Any:
    """The agent -> tools -> agent graph a LangGraph user writes for a tool-calling loop."""
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    builder = StateGraph(MessagesState)
    builder.add_node("agent", script)
    builder.add_node("tools", ToolNode([tool("lookup")(_lookup)]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


@contextmanager
def _open_saver(path: Path) -> Iterator[Any]:
    """A SqliteSaver on a real file, opened the way its documentation shows."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    # check_same_thread=False as documented: LangGraph may run nodes on worker threads and the
    # saver serialises access with its own lock.
    with closing(sqlite3.connect(path, check_same_thread=False)) as conn:
        yield SqliteSaver(conn)


def _recursion_limit(steps: int) -> int:
    # Each step is two supersteps (agent, tools) and the final answer one more; LangGraph's
    # default limit of 25 would stop any run longer than 12 steps.
    return 2 * steps + 2


def langgraph_steps(
    sizes: Sequence[int] = DEFAULT_STEP_SIZES,
    db_dir: str | os.PathLike[str] | None = None,
    *,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    durability: Durability = "sync",
    keep_files: bool = False,
    progress: Progress | None = None,
) -> list[StepResult]:
    """Run one turn of N steps per size on a fresh SQLite checkpoint file; one result each.

    A run that passes ``max_seconds`` is stopped from inside the model node and reported as
    skipped; larger sizes are then skipped without running, since they would take longer
    still. Database files go in ``db_dir`` (a temporary directory if ``None``) and are
    deleted after measuring unless ``keep_files``: at thousands of steps they reach gigabytes.
    """
    reason = _missing(_LANGGRAPH_MODULES)
    if reason is not None:
        return [StepResult(system=LANGGRAPH, size=n, skipped=True, reason=reason) for n in sizes]
    results: list[StepResult] = []
    over_budget_at: int | None = None
    with _work_dir(db_dir) as work, _no_tracing():
        for n in sizes:
            if over_budget_at is not None and n >= over_budget_at:
                why = f"not run: {over_budget_at} steps already went over {max_seconds:g} s"
                results.append(StepResult(system=LANGGRAPH, size=n, skipped=True, reason=why))
                continue
            if progress is not None:
                progress(f"langgraph steps: {n} steps (budget {max_seconds:g} s)")
            result = _langgraph_run(n, work, max_seconds, durability, keep_files)
            if result.skipped:
                over_budget_at = n
            if progress is not None:
                progress(f"langgraph steps: {n} steps -> {_describe_step(result)}")
            results.append(result)
    return results


def _langgraph_run(
    n: int, work: Path, max_seconds: float, durability: Durability, keep_files: bool
) -> StepResult:
    from langchain_core.messages import HumanMessage

    path = work / f"langgraph-steps-{n}.sqlite"
    _remove_sqlite(path)
    script = _Script(n)
    config = {"configurable": {"thread_id": f"steps-{n}"}, "recursion_limit": _recursion_limit(n)}
    try:
        with _open_saver(path) as saver:
            graph = _compile_graph(saver, script)
            start = time.perf_counter()
            script.deadline = start + max_seconds
            try:
                final = graph.invoke(
                    {"messages": [HumanMessage(content="begin", id="human-0")]},
                    config,
                    durability=durability,
                )
            except _OverBudget as exc:
                elapsed = time.perf_counter() - start
                tail = _tail_mean(script.stamps)
                size = _sqlite_bytes(path)
                return StepResult(
                    system=LANGGRAPH,
                    size=n,
                    steps_done=exc.steps_done,
                    skipped=True,
                    reason=(
                        f"over the {max_seconds:g} s budget: {exc.steps_done}/{n} steps in "
                        f"{elapsed:.1f} s, last steps {tail * 1e3:.1f} ms each, "
                        f"{format_bytes(size)} so far"
                    ),
                )
            seconds = time.perf_counter() - start
            size = _sqlite_bytes(path)
    finally:
        if not keep_files:
            _remove_sqlite(path)
    # Proof the work was done: the opening message, a call and a result per step, the answer.
    count = len(final["messages"])
    if count != 2 * n + 2:
        raise RuntimeError(f"LangGraph run of {n} steps ended with {count} messages")
    return StepResult(
        system=LANGGRAPH,
        size=n,
        seconds=seconds,
        per_step_seconds=_tail_mean(script.stamps),
        bytes=size,
        steps_done=n,
    )


def _tail_mean(stamps: Sequence[float]) -> float:
    """Mean gap between consecutive model calls over the last 10% of gaps (at least one)."""
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    if not gaps:
        return 0.0
    tail = gaps[-max(1, len(gaps) // 10) :]
    return sum(tail) / len(tail)


def _history(n: int) -> list[Any]:
    """A finished conversation of exactly ``n`` messages shaped like an agent loop's:
    a human message, (tool call, tool result) pairs, and a final answer."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    if n < 2:
        raise ValueError(f"a history needs at least 2 messages (a question, an answer), got {n}")
    messages: list[Any] = [HumanMessage(content="begin", id="h-0")]
    if n % 2:
        # An odd count gets a second human message so the total is exact.
        messages.append(HumanMessage(content="go on", id="h-1"))
    for i in range((n - len(messages) - 1) // 2):
        call = {"name": "lookup", "args": {"query": f"step {i}"}, "id": f"hist_{i}"}
        messages.append(AIMessage(content="", tool_calls=[call], id=f"ai-{i}"))
        messages.append(
            ToolMessage(content=f"step {i}", tool_call_id=f"hist_{i}", name="lookup", id=f"t-{i}")
        )
    messages.append(AIMessage(content=_FINAL_ANSWER, id="ai-final"))
    return messages


def langgraph_restore(
    n_messages: int,
    db_dir: str | os.PathLike[str] | None = None,
    *,
    repeats: int = 3,
    keep_files: bool = False,
    progress: Progress | None = None,
) -> RestoreResult:
    """Time ``graph.get_state(config)`` on a thread holding ``n_messages``, then one resumed turn.

    The history is written with a single ``update_state(..., as_node="agent")`` carrying the
    whole message list: building 100k messages through real steps would take hours (every
    checkpoint holds the full list). This is legitimate for the read: ``get_state`` loads only
    the newest checkpoint, and that checkpoint is byte-for-byte what a real thread of the same
    messages would have. ``bytes`` is therefore the size of one checkpoint, far below what a
    thread that grew step by step occupies (see :func:`langgraph_steps` for that).
    """
    reason = _missing(_LANGGRAPH_MODULES)
    if reason is not None:
        return RestoreResult(system=LANGGRAPH, size=n_messages, skipped=True, reason=reason)
    from langchain_core.messages import HumanMessage

    if progress is not None:
        progress(f"langgraph restore: {n_messages} messages")
    config = {"configurable": {"thread_id": f"restore-{n_messages}"}}
    with _work_dir(db_dir) as work, _no_tracing():
        path = work / f"langgraph-restore-{n_messages}.sqlite"
        _remove_sqlite(path)
        try:
            history = _history(n_messages)
            with _open_saver(path) as saver:
                graph = _compile_graph(saver, _Script(1))
                start = time.perf_counter()
                graph.update_state(config, {"messages": history}, as_node="agent")
                build_seconds = time.perf_counter() - start
                size = _sqlite_bytes(path)
            del history
            best = float("inf")
            for _ in range(max(1, repeats)):
                # A new connection and graph each time: nothing read earlier can be reused.
                with _open_saver(path) as saver:
                    graph = _compile_graph(saver, _Script(1))
                    start = time.perf_counter()
                    snapshot = graph.get_state(config)
                    best = min(best, time.perf_counter() - start)
                count = len(snapshot.values["messages"])
                if count != n_messages or snapshot.next != ():
                    raise RuntimeError(
                        f"LangGraph restore read {count} messages (next {snapshot.next}), "
                        f"expected {n_messages} and a finished thread"
                    )
                del snapshot
            with _open_saver(path) as saver:
                graph = _compile_graph(saver, _Script(1))
                start = time.perf_counter()
                final = graph.invoke(
                    {"messages": [HumanMessage(content="one more", id="h-resume")]},
                    {**config, "recursion_limit": _recursion_limit(1)},
                    durability="sync",
                )
                resume_seconds = time.perf_counter() - start
            if len(final["messages"]) != n_messages + 4:
                raise RuntimeError("LangGraph resumed turn did not add one step and an answer")
        finally:
            if not keep_files:
                _remove_sqlite(path)
    result = RestoreResult(
        system=LANGGRAPH,
        size=n_messages,
        seconds=best,
        records_per_second=n_messages / best if best > 0 else None,
        resume_seconds=resume_seconds,
        build_seconds=build_seconds,
        bytes=size,
        note="history written as one update_state checkpoint",
    )
    if progress is not None:
        progress(f"langgraph restore: {n_messages} messages -> {best:.3f} s")
    return result


# -- eventsourcing --------------------------------------------------------------------------

# The aggregate must live at module level: eventsourcing stores each event's class as a
# "module:qualname" topic and imports it back on replay, which a class defined inside a
# function could not survive.
try:
    from eventsourcing.domain import Aggregate as _Aggregate
    from eventsourcing.domain import event as _es_event
except ImportError:
    _Conversation: type[Any] | None = None
else:

    class Conversation(_Aggregate):
        """A conversation whose every message is one event, like a loop's journal."""

        def __init__(self) -> None:
            self.messages: list[tuple[str, str, str]] = []

        @_es_event("MessageAppended")
        def append_message(self, role: str, content: str, call_id: str) -> None:
            self.messages.append((role, content, call_id))

    _Conversation = Conversation


def _eventsourcing_persistence() -> tuple[str, str]:
    """The persistence module to use and a note naming it (SQLite, else POPO in memory)."""
    try:
        importlib.import_module("eventsourcing.sqlite")
    except ImportError as exc:
        return "eventsourcing.popo", f"POPO in-memory store: eventsourcing.sqlite missing ({exc})"
    return "eventsourcing.sqlite", "eventsourcing.sqlite, snapshotting off"


def eventsourcing_replay(
    n_events: int,
    db_dir: str | os.PathLike[str] | None = None,
    *,
    repeats: int = 3,
    keep_files: bool = False,
    progress: Progress | None = None,
) -> RestoreResult:
    """Time ``application.repository.get(id)`` replaying an aggregate of ``n_events`` events.

    The events are stored with one ``save`` of the aggregate (one transaction for all of
    them), the cheapest legitimate build; only the replay is compared. Each timed read uses a
    new ``Application`` so its repository has nothing cached.
    """
    reason = _missing(("eventsourcing.application", "eventsourcing.domain"))
    conversation_class = _Conversation
    if reason is not None or conversation_class is None:
        reason = reason or "eventsourcing.domain did not import when this module loaded"
        return RestoreResult(system=EVENTSOURCING, size=n_events, skipped=True, reason=reason)
    if n_events < 1:
        raise ValueError(f"an aggregate has at least its creation event, got n_events={n_events}")
    from eventsourcing.application import Application

    if progress is not None:
        progress(f"eventsourcing replay: {n_events} events")
    module, note = _eventsourcing_persistence()
    with _work_dir(db_dir) as work:
        path = work / f"eventsourcing-{n_events}.sqlite"
        _remove_sqlite(path)
        env = {
            "PERSISTENCE_MODULE": module,
            "SQLITE_DBNAME": str(path),
            # Explicit, so an environment variable cannot turn replay into a snapshot read.
            "IS_SNAPSHOTTING_ENABLED": "n",
        }
        try:
            app: Application[Any] = Application(env=env)
            start = time.perf_counter()
            conversation = conversation_class()
            # The creation event is the first of the n events.
            for i in range(n_events - 1):
                if i % 2 == 0:
                    conversation.append_message("assistant", "", f"call_{i}")
                else:
                    conversation.append_message("tool", f"step {i}", f"call_{i - 1}")
            app.save(conversation)
            build_seconds = time.perf_counter() - start
            aggregate_id = conversation.id
            del conversation
            best = float("inf")
            for _ in range(max(1, repeats)):
                if module != "eventsourcing.popo":
                    # POPO lives inside its application, so only SQLite gets a fresh one.
                    app.close()
                    app = Application(env=env)
                start = time.perf_counter()
                replayed: Any = app.repository.get(aggregate_id)
                best = min(best, time.perf_counter() - start)
                if replayed.version != n_events:
                    raise RuntimeError(
                        f"eventsourcing replayed version {replayed.version}, expected {n_events}"
                    )
                del replayed
            size = _sqlite_bytes(path) if module == "eventsourcing.sqlite" else None
            app.close()
        finally:
            if not keep_files:
                _remove_sqlite(path)
    if progress is not None:
        progress(f"eventsourcing replay: {n_events} events -> {best:.3f} s")
    return RestoreResult(
        system=EVENTSOURCING,
        size=n_events,
        seconds=best,
        records_per_second=n_events / best if best > 0 else None,
        build_seconds=build_seconds,
        bytes=size,
        note=note,
    )


# -- running and printing -------------------------------------------------------------------


def run_all(
    *,
    quick: bool = False,
    db_dir: str | os.PathLike[str] | None = None,
    max_seconds: float | None = None,
    progress: Progress | None = None,
) -> PeerFigures:
    """Every peer figure. ``quick`` keeps to small sizes (well under 30 s); the full run keeps
    under about five minutes on two cores because the step runs have a time budget."""
    if quick:
        step_sizes: Sequence[int] = (10, 100)
        restore_sizes: Sequence[int] = (1_000, 10_000)
        replay_sizes: Sequence[int] = (1_000, 10_000)
        budget = 10.0 if max_seconds is None else max_seconds
        repeats = 1
    else:
        step_sizes, restore_sizes, replay_sizes = (
            DEFAULT_STEP_SIZES,
            DEFAULT_RESTORE_SIZES,
            DEFAULT_REPLAY_SIZES,
        )
        budget = DEFAULT_MAX_SECONDS if max_seconds is None else max_seconds
        repeats = 3
    steps = langgraph_steps(step_sizes, db_dir, max_seconds=budget, progress=progress)
    restores = [
        langgraph_restore(n, db_dir, repeats=repeats, progress=progress) for n in restore_sizes
    ]
    replays = [
        eventsourcing_replay(n, db_dir, repeats=repeats, progress=progress) for n in replay_sizes
    ]
    return PeerFigures(versions=peer_versions(), steps=steps, restores=restores, replays=replays)


def _describe_step(result: StepResult) -> str:
    if result.skipped:
        return f"skipped: {result.reason}"
    return (
        f"{format_number(result.seconds, '.2f')} s, "
        f"{format_number(result.per_step_seconds, '.2f', 1e3)} ms/step "
        f"at the end, {format_bytes(result.bytes)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.peers [--quick] [--max-seconds S] [--dir D] [--json]``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes only (under 30 s)")
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="time budget per step-run size"
    )
    parser.add_argument("--dir", default=None, help="where the databases go (default: a tmpdir)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)

    def progress(line: str) -> None:
        print(f"[peers] {line}", file=sys.stderr, flush=True)

    figures = run_all(
        quick=args.quick, db_dir=args.dir, max_seconds=args.max_seconds, progress=progress
    )
    if args.json:
        print(msgspec.json.format(msgspec.json.encode(figures).decode()))
    else:
        print(tables.peers_table(msgspec.to_builtins(figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
