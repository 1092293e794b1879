"""The loop and restore benchmarks run end to end at tiny sizes and return well-formed rows;
the journal benchmark's trio harness stores what it claims and its targets are named.

A smoke test only: benchmarks print figures and never gate anything on wall time, so
nothing here compares a number with a bound other than "was measured".
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import trio

from benchmarks import journal as journal_bench
from benchmarks import loops, restore
from benchmarks.report import INFO, Targets, journal_targets

STEP_KEYS = {
    "scenario",
    "system",
    "synchronous",
    "steps",
    "runs",
    "seconds",
    "per_step_seconds",
    "bytes",
    "bytes_open",
}
LOOP_KEYS = {
    "scenario",
    "system",
    "synchronous",
    "loops",
    "turns_per_loop",
    "turns",
    "records",
    "seconds",
    "turns_per_second",
    "records_per_second",
    "appends",
    "commit_p50_seconds",
    "commit_p99_seconds",
    "gc_seconds",
    "bare_records",
    "bare_records_per_second",
    "ratio",
    "pairs",
    "pair_ratios",
}
IDLE_KEYS = {
    "scenario",
    "system",
    "loops",
    "rss_before_bytes",
    "rss_after_bytes",
    "bytes_per_loop",
    "setup_seconds",
    "gc_seconds",
}


def _positive(row: dict[str, Any], keys: set[str]) -> None:
    for key in keys:
        value = row[key]
        # The collector may not run at all; the RSS growth of two loops can round to 0.
        if isinstance(value, int | float) and key not in ("gc_seconds", "bytes_per_loop"):
            assert value > 0, (key, row)


def test_loop_benchmark_rows() -> None:
    # Synchronous on purpose: run() owns its own trio.run, as the benchmark command does.
    rows = loops.run(
        quick=True,
        step_sizes=(10,),
        loop_counts=(2,),
        idle_counts=(2,),
        total_turns=6,
        progress=lambda line: None,
    )
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_scenario.setdefault(row["scenario"], []).append(row)
    assert sorted(by_scenario) == ["idle", "loops", "steps", "waits"]

    # A turn of one tool step waits on three commits (its input, tool.started
    # and the answer with turn.ended); everything else is pipelined.
    waits = {r["steps"]: r for r in by_scenario["waits"]}
    assert set(waits) == {1, 10}
    assert waits[1]["waits"] == 3 and waits[1]["pipelined"] >= 4
    assert waits[10]["waits"] == 12

    steps = by_scenario["steps"]
    assert {r["synchronous"] for r in steps} == {"FULL", "NORMAL"}
    for row in steps:
        assert set(row) == STEP_KEYS
        assert row["steps"] == 10
        _positive(row, STEP_KEYS)

    (many,) = by_scenario["loops"]
    assert set(many) == LOOP_KEYS
    assert many["loops"] == 2 and many["turns"] == 2 * many["turns_per_loop"]
    # Every turn writes at least turn.started, a model call and turn.ended.
    assert many["records"] >= 3 * many["turns"]
    _positive(many, LOOP_KEYS)

    (idle,) = by_scenario["idle"]
    assert set(idle) == IDLE_KEYS
    assert idle["loops"] == 2
    assert idle["rss_after_bytes"] > 0 and idle["setup_seconds"] > 0


RESTORE_KEYS = {
    "scenario",
    "system",
    "records",
    "messages",
    "bytes",
    "checkpoint_every",
    "checkpoints",
    "tail_records",
    "checkpoint_bytes",
    "checkpoint_share",
    "seconds",
    "records_per_second",
    "full_seconds",
    "fold_seconds",
    "full_fold_seconds",
    "floor_seconds",
    "floor_ratio",
    "full_floor_ratio",
}


def test_restore_benchmark_rows() -> None:
    # Past two checkpoint intervals, so the copied file has checkpoints to start from.
    (row,) = restore.run(quick=True, sizes=(2_500,), progress=lambda line: None)
    assert set(row) == RESTORE_KEYS
    assert 2_000 < row["records"] <= 2_500 and row["messages"] > 0
    assert row["checkpoint_every"] == 1_000
    assert row["checkpoints"] == 2
    # Restore folds only what follows the last checkpoint, at most one interval.
    assert 0 < row["tail_records"] <= row["checkpoint_every"]
    assert 0 < row["checkpoint_bytes"] < row["bytes"]
    _positive(row, RESTORE_KEYS)


def test_trio_harness_commits_every_row_in_order(tmp_path: Path) -> None:
    # The ceiling the append ratio is read against must do the storage work it
    # claims: every prebuilt row committed, each session's seqs gap-free.
    sessions = [f"c{i}" for i in range(5)]
    rows = journal_bench.stored_rows(sessions, 7)

    async def fill() -> float:
        path = await journal_bench._new_file(str(tmp_path), "harness.db")
        return await journal_bench._trio_harness_insert(path, rows, "NORMAL")

    assert trio.run(fill) > 0
    with closing(sqlite3.connect(tmp_path / "harness.db")) as conn:
        stored = conn.execute(
            "SELECT session, seq, digest FROM records ORDER BY session, seq"
        ).fetchall()
    assert stored == sorted((r[0], r[1], r[6]) for r in rows)


def test_journal_targets_name_each_ratio_and_its_ceiling() -> None:
    def row(name: str, backend: str, ratio: float) -> dict[str, Any]:
        return {"benchmark": name, "backend": backend, "n": 100_000, "ratio": ratio}

    rows = [
        row("append 1/call, 100 concurrent", "sqlite FULL", 0.5),
        row("  (bare: trio harness)", "sqlite FULL", 0.8),
        row("  trio harness (bare: thread)", "sqlite FULL", 0.6),
        row("read+decode", "sqlite", 0.85),
        row("read+decode (bare: + chain check)", "sqlite", 0.9),
        row("  chain check (bare: read+decode)", "sqlite", 0.7),
    ]
    targets: Targets = []
    journal_targets(rows, targets)
    assert targets == [
        ("SQLite FULL, 100 concurrent appenders >= 0.8x a bare thread", "0.50x", False),
        ("ceiling (FULL): trio tasks on a bare thread / bare thread", "0.60x", INFO),
        ("journal / trio tasks on a bare thread (FULL)", "0.80x", INFO),
        ("SQLite read+decode 100,000 records >= 0.8x the bare loop", "0.85x", True),
        ("ceiling: bare loop + chain check / bare loop", "0.70x", INFO),
        ("journal / bare loop + chain check", "0.90x", INFO),
    ]
