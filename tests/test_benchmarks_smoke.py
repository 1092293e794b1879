"""The loop and restore benchmarks run end to end at tiny sizes and return well-formed rows;
the journal benchmark's trio harness stores what it claims and its targets are named.

A smoke test only: benchmarks print figures and never gate anything on wall time, so
nothing here compares a number with a bound other than "was measured".
"""

from __future__ import annotations

import gc
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import trio

from benchmarks import clients, loops, restore
from benchmarks import journal as journal_bench
from benchmarks.report import INFO, Targets, clients_section, journal_targets

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
    "transactions",
    "largest_transaction",
    "gc_seconds",
    "working_loops_limit",
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
    "gc_objects_per_loop",
    "setup_seconds",
    "setup_cpu_seconds",
    "setup_trio_cpu_seconds",
    "gc_seconds",
    "collector",
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
    assert many["working_loops_limit"] == 32  # the runtime's default
    # Every turn writes at least turn.started, a model call and turn.ended.
    assert many["records"] >= 3 * many["turns"]
    # Each transaction carries at most one append (or lease) per loop.
    assert many["transactions"] <= many["appends"] and many["largest_transaction"] <= 2
    _positive(many, LOOP_KEYS)

    (idle,) = by_scenario["idle"]
    assert set(idle) == IDLE_KEYS
    assert idle["loops"] == 2
    assert idle["rss_after_bytes"] > 0 and idle["setup_seconds"] > 0
    # The trio thread's CPU is a part of the process's (the journal's writer
    # thread has the rest).
    assert 0 < idle["setup_trio_cpu_seconds"] <= idle["setup_cpu_seconds"]
    # Not its size: two sessions' few dozen tracked objects each are fewer than the rest
    # of a test process may free meanwhile (an earlier trio run's idle worker thread
    # exiting, say). What a session keeps is pinned by tests/loop/test_idle_cost.py and
    # tests/loop/test_kept_objects.py, in runs of their own.
    assert isinstance(idle["gc_objects_per_loop"], float)
    # Made as an application making many at once would, and nothing left paused or
    # frozen in the process afterwards.
    assert idle["collector"] == "collector_paused"
    assert gc.isenabled() and gc.get_freeze_count() == 0


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


CLIENT_KEYS = {
    "client",
    "backend",
    "turns",
    "records",
    "submit_p50_seconds",
    "submit_p99_seconds",
    "stream_p50_seconds",
    "stream_p99_seconds",
}


def test_clients_benchmark_rows() -> None:
    # Synchronous: run() starts its own host process and event loops, as the command does.
    rows = clients.run(turns=2, progress=lambda line: None)
    assert [r["client"] for r in rows] == [
        "Session (in process)",
        "Client (trio)",
        "Client (asyncio)",
        "SyncClient (threads)",
    ]
    for row in rows:
        assert set(row) == CLIENT_KEYS
        assert row["turns"] == 2
        # Every turn streams at least its input, its start, a model call and its end.
        assert row["records"] >= 4 * 2
        _positive(row, CLIENT_KEYS)
    table = clients_section(rows)
    assert table[0] == "### Clients" and len([line for line in table if "|" in line]) == 6


def test_blobs_benchmark_rows() -> None:
    """Both storages measured on the same session: by reference its results are blobs."""
    from benchmarks import blobs
    from benchmarks.report import blob_rows

    ref, inline = blobs.run(count=3, size=300_000, progress=lambda line: None)
    assert (ref["storage"], inline["storage"]) == ("by reference", "inline")
    assert ref["records"] == inline["records"] and ref["results"] == 3
    assert ref["blobs"] == 3 and inline["blobs"] == 0
    assert ref["blob_bytes"] >= 3 * 300_000
    for row in (ref, inline):
        assert row["append_seconds"] > 0 and row["restore_seconds"] > 0 and row["bytes"] > 0
    assert len(blob_rows([ref, inline])) == 4


def test_hosts_benchmark_rows(tmp_path: Path) -> None:
    # Tiny sizes; the throughput needs PostgreSQL and is left to the benchmark run.
    from benchmarks import hosts
    from benchmarks.report import hosts_section, hosts_targets

    async def main() -> list[dict[str, Any]]:
        rows = await hosts.failover(tmp_path, sessions=1, lease_ttl=0.5)
        rows += await hosts.activation(tmp_path, (200,), repeats=1, progress=lambda _l: None)
        rows += await hosts.passivated_memory(tmp_path, 20, lambda _l: None)
        rows += await hosts.round_trip(f"sqlite:///{tmp_path / 'rt.db'}", repeats=2)
        return rows

    rows = trio.run(main)
    for start in (
        "failover: kill to first record of the new owner, p",
        "activation of a passivated session of",
        "memory held by 20 passivated sessions in a host",
        "inbox (SQLite): client submit to input record, p",
        "direct Session.submit (SQLite), p",
    ):
        assert any(r["benchmark"].startswith(start) for r in rows), start
    for r in rows:
        assert set(r) == {"benchmark", "value", "unit", "target", "met", "note"}
        assert r["value"] >= 0 and r["met"] in (True, False, None)
    found: Targets = []
    hosts_targets(rows, found)
    assert [t for t, _, _ in found] == [
        "failover: kill to first record of the new owner, p99 <= 1.5 x lease_ttl (750 ms)"
    ]
    assert "### Hosts" in hosts_section(rows)


CONSOLE_KEYS = {
    "measure",
    "records",
    "runs",
    "items",
    "bytes",
    "p50_seconds",
    "max_seconds",
    "poll_seconds",
}


def test_console_benchmark_rows(tmp_path: Path) -> None:
    """A real console process read over HTTP, no browser; the report puts the
    browser's figures beside them when they were written, and says so when not."""
    from benchmarks import console
    from benchmarks.report import console_section

    initial, streamed = console.run(records=300, loads=2, events=20, progress=lambda line: None)
    assert set(initial) == CONSOLE_KEYS and set(streamed) == CONSOLE_KEYS | {"p99_seconds"}
    assert initial["measure"] == "initial data" and streamed["measure"] == "commit -> SSE event"
    # Every record of the session reached the client before ``ready``.
    assert 200 <= initial["records"] <= 300 and initial["items"] == initial["records"]
    assert initial["runs"] == 2 and initial["bytes"] > 0
    assert streamed["records"] >= 20
    _positive(initial, CONSOLE_KEYS)
    _positive(streamed, CONSOLE_KEYS - {"bytes"})
    assert streamed["p50_seconds"] <= streamed["p99_seconds"] <= streamed["max_seconds"]
    table = console_section([initial, streamed], None)
    assert table[0] == "### Console" and len([line for line in table if "|" in line]) == 4
    assert "No browser figures" in table[-1]
    figures = tmp_path / "results-console.json"
    figures.write_text(
        '{"commit_to_page_ms": {"records": 1000, "p50": 31.5, "p99": 80.2},'
        ' "page_load": {"records": 10000, "seconds": 2.1}}'
    )
    browser = console.browser_figures(figures)
    assert browser is not None
    table = console_section([initial, streamed], browser)
    assert "| commit -> shown on the page | 1,000 records | p50 31.5 ms, p99 80.2 ms |" in table
    assert "| a session page loads | 10,000 records | 2.1 s to live |" in table
    assert console.browser_figures(tmp_path / "absent.json") is None


TAKEOVER_START = "takeover of 3 sessions (sqlite): "


def test_takeover_benchmark_rows(tmp_path: Path) -> None:
    """An heir takes every session of a dead host over, beside a bare read of
    their checkpoints on the same file; the ratio carries issue 39's target."""
    from benchmarks import takeover

    async def main() -> list[dict[str, Any]]:
        history = await takeover.history(300)
        url = f"sqlite:///{tmp_path / 'takeover.db'}"
        return await takeover.run_takeover(url, "sqlite", history, 3, lambda _l: None, repeats=1)

    rows = trio.run(main)
    assert [r["benchmark"].removeprefix(TAKEOVER_START) for r in rows] == [
        "heir serves all",
        "heir / bare read",
        "journal read (read_restored) / bare read",
    ]
    for r in rows:
        assert set(r) == {"benchmark", "value", "unit", "target", "met", "note"}
        assert r["value"] > 0
    assert rows[1]["target"] == "<= 2 x" and rows[1]["met"] in (True, False)
    # After each takeover every session is the dead host's again (for the next).
    with closing(sqlite3.connect(tmp_path / "takeover.db")) as conn:
        owners = conn.execute("SELECT owner, count(*) FROM leases GROUP BY owner").fetchall()
    assert owners == [("dead-host", 3)]


def test_scaleout_benchmark_rows() -> None:
    """One and two host processes on a PostgreSQL that counts statements:
    every figure measured, the two targets named."""
    from benchmarks import scaleout
    from tests.support.pgserver import ServerUnavailable
    from tests.support.postgres import _no_server

    async def main(dsn: str) -> list[dict[str, Any]]:
        return await scaleout.run_scaleout(dsn, 2, 2, 1, lambda _l: None)

    try:
        with scaleout.server() as dsn:
            rows = trio.run(main, dsn)
    except ServerUnavailable as exc:
        _no_server(exc)
    by_name = {r["benchmark"].removeprefix("scale-out: "): r for r in rows}
    # A throwaway server loads pg_stat_statements; a shared one may not, and
    # then the statements go uncounted (a row saying so, no ratio).
    counted = "LOOPRUNTIME_TEST_PG_DSN" not in os.environ
    assert list(by_name) == [
        "host CPU per turn, 1 host",
        "host CPU per turn, 2 hosts",
        "host CPU per turn, 2 hosts / 1 host",
        "statements per turn, 2 hosts / 1 host",
        "server CPU per turn, 2 hosts / 1 host",
        "projected speed-up of 2 hosts with cores to spare",
        "host CPU per turn, 2 hosts with twice the sessions / 1 host",
    ] + (["statements per turn, 2 hosts with twice the sessions / 1 host"] if counted else []) + [
        "a bystander host's CPU per turn (it holds no session)"
    ]
    # Host CPU is read in clock ticks (10 ms): four turns may take less than one.
    assert by_name["host CPU per turn, 1 host"]["value"] >= 0
    assert by_name["host CPU per turn, 1 host"]["unit"] == "ms"
    bystander = by_name["a bystander host's CPU per turn (it holds no session)"]
    assert bystander["value"] >= 0 and "wake-ups" in bystander["note"]
    assert by_name["host CPU per turn, 2 hosts / 1 host"]["target"] == "<= 1.15 x"
    statements = by_name["statements per turn, 2 hosts / 1 host"]
    assert statements["target"] == "<= 1.10 x"
    if counted:
        assert statements["value"] > 0 and statements["met"] in (True, False)


def test_hops_benchmark_rows(tmp_path: Path) -> None:
    """A SyncClient's put beside a Client's, and each hand-over alone."""
    from benchmarks import hops

    rows = hops.run_hops(tmp_path, 5, 1, lambda _l: None)
    assert [r["benchmark"] for r in rows] == [
        "put: Client (trio), p50",
        "put: SyncClient, p50",
        "put: SyncClient / Client (trio)",
        "hand-over: SyncClient hop, p50",
        "hand-over: anyio portal, p50",
        "hand-over: trio.from_thread, p50",
        "hand-over: thread round trip, p50",
    ]
    assert all(r["value"] > 0 and r["met"] is None for r in rows)
    # Every put reached the inbox: the create, then five of each client.
    with closing(sqlite3.connect(tmp_path / "hops.db")) as conn:
        (count,) = conn.execute("SELECT count(*) FROM inbox").fetchone()
    assert count == 1 + 5 + 5
