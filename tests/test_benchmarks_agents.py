"""The agents-per-core and durable-step benchmarks run at tiny sizes and return
well-formed figures that the report renders.

A smoke test only: benchmarks print figures and never gate anything on wall time, so
nothing here compares a number with a bound other than "was measured".  The agents runs
are child processes in real time (a second or two each), as the benchmark runs them.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from benchmarks import agents, floor
from benchmarks.report import agents_section, floor_section
from journal.content import InputJsonDelta, Message, Text, TextDelta
from loopruntime import ModelRequest
from tests.support.loops import TaskSteps

RUN_KEYS = {
    "turns",
    "pieces",
    "commits",
    "cpu_seconds",
    "core_share",
    "cpu_per_turn",
    "piece_p99",
    "commit_p99",
    "lag_p99",
    "turn_p99",
    "turn_ratio_p99",
    "gc_seconds",
    "gc_longest",
    "side",
    "sessions",
    "seconds",
    "load",
    "pinned",
    "failed",
    "passed",
}


OURS_KEYS = RUN_KEYS | {"main_thread_cpu", "other_threads_cpu"}


def _tiny_search(side: str) -> dict:
    # Two sessions, a window that ends after the first reply, before any turn ends: pieces and
    # commits are measured, no turn ends in it, so the run is judged as failing.
    found = agents.search(
        [side], start=2, seconds=2.8, warmup=0.5, max_probes=1, progress=lambda line: None
    )
    return found[side]


def test_a_tiny_agents_search_measures_pieces_commits_and_lag() -> None:
    found = _tiny_search("ours")
    (run,) = found["runs"]
    assert set(run) == OURS_KEYS
    assert run["pieces"] > 0 and run["commits"] > 0
    assert run["piece_p99"] is not None and run["lag_p99"] is not None
    assert run["turns"] == 0 and "turns" in run["failed"] and not run["passed"]
    assert found["n"] == 0 and found["first_failing"] == 2


def test_py_spy_samples_are_counted_by_the_innermost_phase() -> None:
    main = "thread (101): MainThread;"
    raw = (
        f"{main}run (trio/_core/_run.py:2543);_steps (loopruntime/turn.py:192);"
        "fold (loopruntime/state.py:424);encode (<frozen abc>:12) 7\n"
        f"{main}run (trio/_core/_run.py:2543);_steps (loopruntime/turn.py:192);"
        "checkpoint (trio/_core/_run.py:2700) 3\n"
        "thread (102): writer;_run (threading.py:975);commit (journal/sqlite/writer.py:88) 5\n"
        f"{main}agent (benchmarks/agents.py:230) 1\n"
        f"{main}<module> (runpy.py:198) 2\n"
        f"{main}run (trio/_core/_run.py:2543);"
        "EpollIOManager.get_events (trio/_core/_io_epoll.py:243) 40\n"
    )
    # Left out: the writer thread's samples (its CPU comes from its own clock) and
    # the trio thread's waits in epoll.
    assert agents.phases_of(raw) == {
        "loopruntime/state.py": 7,
        "trio scheduler and I/O": 3,
        "harness (readers, agents, probe)": 1,
        "other Python": 2,
    }


def test_the_profiled_run_shares_its_cpu_out_by_phase() -> None:
    if agents._py_spy() is None:
        pytest.skip("py-spy is not installed (the bench extra)")
    profile = agents.profile_phases(2, 1.0, warmup=0.5)
    assert set(profile) == OURS_KEYS | {"samples", "phases"}
    assert profile["phases"][agents.WRITER_PHASE] == profile["other_threads_cpu"]
    # Two sessions for a second leave the trio thread a few samples at most, sometimes
    # none (py-spy counts it only while it holds the GIL); with any, the phases share
    # out exactly the window's CPU.
    if profile["samples"]:
        assert sum(profile["phases"].values()) == pytest.approx(profile["cpu_seconds"])


async def test_the_paced_model_wakes_its_reader_once_a_piece(
    autojump_clock: trio.abc.Clock,
) -> None:
    # As a network read would: one scheduler step a piece (its paced sleep), so the
    # profile's trio share is not inflated by steps no real model costs.
    steps = TaskSteps("reader")
    deltas: list[Any] = []

    async def reader() -> None:
        async with agents.PacedModel().stream(_first_request()) as stream:
            async for delta in stream:
                deltas.append(delta)

    trio.lowlevel.add_instrument(steps)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader, name="reader")
    paced = [d for d in deltas if isinstance(d, TextDelta | InputJsonDelta)]
    assert len(paced) == agents.Shape.first_pieces + 1
    assert steps.steps <= len(paced) + 1


def _first_request() -> ModelRequest:
    return ModelRequest(system="Work.", messages=(Message(role="user", blocks=(Text(text="go"),)),))


def test_the_wakeups_of_a_streamed_turn_are_counted_by_task() -> None:
    counted = agents.count_wakeups(2, (1, 2))
    pieces = agents.Shape.first_pieces + agents.Shape.final_pieces
    assert counted["pieces"] == pieces and counted["floor"] == 2 * (pieces + 1)
    by_task = counted["by_task"]
    assert counted["steps"] == pytest.approx(sum(by_task.values()))
    # The turn wakes once a paced piece and a few times more (its commits, the tool).
    # The subscriber wakes once a paced piece (the text and the tool's arguments), once
    # for each model call's opening deltas and at most once a durable append: never
    # once a delta (a piece comes with up to three more: block start and stop, usage).
    turn = by_task["the turn (the loop's actor runs it)"]
    assert pieces + 1 <= turn <= pieces + 12
    subscriber = by_task["the subscriber (harness)"]
    assert pieces <= subscriber <= (pieces + 1) + 2 + counted["appends"]


def test_the_langgraph_side_measures_the_same_figures() -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite.aio")
    found = _tiny_search("langgraph")
    (run,) = found["runs"]
    assert set(run) == RUN_KEYS
    assert run["pieces"] > 0 and run["commits"] > 0


def test_the_agents_section_renders_both_sides_and_the_ratio() -> None:
    ours = _tiny_search("ours")
    profile = {**ours["runs"][0], "phases": {"loopruntime/turn.py": 0.002}, "turns": 1}
    section = {
        "scripted_turn_seconds": agents.SCRIPTED_TURN_SECONDS,
        "budgets": agents.BUDGETS,
        "ours": ours,
        "langgraph": {"side": "langgraph", "skipped": "not installed (langgraph)"},
        "wakeups": agents.count_wakeups(2, (1, 2)),
        "profile": profile,
    }
    lines = agents_section(section)
    assert lines[0] == "### Agents per core"
    assert sum(line.startswith("| ours | 2 | fail") for line in lines) == 1
    assert any("LangGraph not installed" in line for line in lines)
    assert any(line.startswith("| loopruntime/turn.py | 2.000 | 100%") for line in lines)
    assert any(line.startswith("| the turn (the loop's actor runs it) | ") for line in lines)
    assert any(line.startswith("Scheduler steps a streamed turn") for line in lines)


def test_a_tool_step_is_measured_beside_a_bare_sqlite_commit() -> None:
    rows = floor.run(steps=12, rounds=1, progress=lambda line: None)
    assert [r["backend"] for r in rows] == ["sqlite FULL", "sqlite NORMAL"]
    for row in rows:
        assert row["per_step_seconds"] > 0 and row["bare_commit_seconds"] > 0
        assert row["ratio"] == row["per_step_seconds"] / row["bare_commit_seconds"]
        # A tool step waits on its tool.started; the turn's own commits (its
        # question, its end) add a wait or two over the whole turn.
        assert 1 <= row["waits_per_step"] <= 15 / 12
    table = floor_section(rows)
    assert table[0] == "### A durable step beside its floor"
    assert sum(line.startswith("| sqlite ") for line in table) == 2


def test_a_postgres_tool_step_is_measured_beside_a_bare_psycopg_commit(
    postgres_dsn: str,
) -> None:
    rows = floor.run(steps=12, rounds=1, postgres=True, dsn=postgres_dsn, progress=print)
    (row,) = [r for r in rows if r["backend"] == "postgres"]
    assert row["per_step_seconds"] > 0 and row["bare_commit_seconds"] > 0
    assert 1 <= row["waits_per_step"] <= 15 / 12


def test_the_search_doubles_until_a_failure_then_halves_the_gap() -> None:
    found = agents._Search("ours", start=100, max_probes=10)
    limit = 300  # the N past which a run fails, in this made-up machine
    tried = []
    while found.next is not None:
        tried.append(found.next)
        found.record({"sessions": found.next, "passed": found.next <= limit})
    assert tried == [100, 200, 400, 300, 350, 325]
    assert found.result()["n"] == 300 and found.result()["first_failing"] == 325


def test_with_three_votes_the_majority_of_an_ns_runs_decides() -> None:
    found = agents._Search("ours", start=100, max_probes=10, votes=3)
    outcomes = [True, True, False, True, True, False, False]
    tried = []
    for passed in outcomes:
        assert found.next is not None
        tried.append(found.next)
        found.record({"sessions": found.next, "passed": passed})
    # 100 passes twice; 200 splits and its third run passes; 400 fails twice.
    assert tried == [100, 100, 200, 200, 200, 400, 400]
    assert found.verdicts == [(100, True), (200, True), (400, False)]
    assert found.next == 300
