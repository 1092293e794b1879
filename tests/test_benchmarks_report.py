"""The report's performance targets (issue 39), read from canned results: each target's
rows, their verdicts, and what a run that left a section out says.  No benchmark runs here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchmarks import __main__ as bench_main
from benchmarks import report
from benchmarks.report import hosts_targets, performance_targets, render
from benchmarks.rows import target_row

MACHINE = {
    "cpu": "test cpu",
    "cores": 2,
    "memory_bytes": 2**33,
    "os": "Linux",
    "python": "3.12",
    "sqlite": "3.45",
    "trio": "0.27",
    "msgspec": "0.18",
}

AGENTS = "agents per core, ours / LangGraph (N per core; CPU a turn, ms)"
FLOOR = "a durable tool step / one bare commit, "
CPU = "two hosts / one host, host CPU per turn"
STATEMENTS = "two hosts / one host, PostgreSQL statements per turn"
TAKEOVER = "a takeover of 1,000 sessions / the bare read, "
NO_POSTGRES = (
    "no figure: no PostgreSQL server (set LOOPRUNTIME_TEST_PG_DSN or run scripts/ensure-postgres)"
)


def _results(**sections: dict[str, Any]) -> dict[str, Any]:
    return {"date": "2026-12-05 03:00 UTC", "quick": False, "machine": MACHINE, **sections}


def _run(sessions: int, cpu: float | None) -> dict[str, Any]:
    return {"sessions": sessions, "passed": True, "cpu_per_turn": cpu}


def _side(n: int, *runs: dict[str, Any]) -> dict[str, Any]:
    return {"n": n, "first_failing": 2 * n, "verdicts": [], "runs": list(runs)}


def _agents(ours: dict[str, Any], langgraph: dict[str, Any]) -> dict[str, Any]:
    return {"status": "ok", "ours": ours, "langgraph": langgraph}


def _floor_row(backend: str, step: float, bare: float) -> dict[str, Any]:
    return {
        "backend": backend,
        "per_step_seconds": step,
        "bare_commit_seconds": bare,
        "ratio": step / bare,
        "round_ratios": [step / bare],
        "waits_per_step": 1.0,
        "appends_per_step": 2.0,
        "load": 1.0,
    }


def _scaleout_rows(cpu: float, statements: float | None) -> list[dict[str, Any]]:
    rows = [
        target_row("scale-out: host CPU per turn, 1 host", 2.0, "ms", "", None),
        target_row("scale-out: host CPU per turn, 2 hosts", 2.0 * cpu, "ms", "", None),
        target_row(
            "scale-out: host CPU per turn, 2 hosts / 1 host", cpu, "x", "<= 1.15 x", cpu <= 1.15
        ),
    ]
    if statements is None:
        rows.append(
            target_row(
                "scale-out: statements per turn, 2 hosts / 1 host",
                0.0,
                "x",
                "<= 1.10 x",
                None,
                "not counted: the server does not load pg_stat_statements",
            )
        )
    else:
        rows.append(
            target_row(
                "scale-out: statements per turn, 2 hosts / 1 host",
                statements,
                "x",
                "<= 1.10 x",
                statements <= 1.10,
            )
        )
    return rows


def _takeover_rows(backend: str, count: int, ratio: float) -> list[dict[str, Any]]:
    start = f"takeover of {count:,} sessions ({backend}): "
    return [
        target_row(start + "heir serves all", 1.5, "s", "", None),
        target_row(start + "heir / bare read", ratio, "x", "<= 2 x", ratio <= 2.0),
        target_row(start + "journal read (read_restored) / bare read", 0.8, "x", "", None),
    ]


def _hosts(*rows: list[dict[str, Any]]) -> dict[str, Any]:
    failover = target_row("failover: kill to first record, p99", 0.9, "s", "<= 1.5 s", True)
    return {"status": "ok", "rows": [failover, *(r for group in rows for r in group)]}


def _rows_of(results: dict[str, Any], start: str) -> list[tuple[str, str, str, object]]:
    return [row for row in performance_targets(results) if row[0].startswith(start)]


# -- target 1: agents per core ---------------------------------------------------------------


def test_agents_per_core_is_met_at_five_times_langgraphs_n() -> None:
    results = _results(
        agents=_agents(
            _side(40, _run(20, 0.001), _run(40, 0.003), _run(40, 0.002), _run(40, 0.004)),
            _side(8, _run(8, 0.010), _run(16, 0.020)),
        )
    )
    assert _rows_of(results, "agents") == [
        (
            AGENTS,
            ">= 5x",
            "5.00x: ours N 40 (CPU 3.000), LangGraph N 8 (CPU 10.000)",
            True,
        )
    ]


def test_agents_per_core_is_missed_below_five_times() -> None:
    results = _results(agents=_agents(_side(30, _run(30, 0.002)), _side(8, _run(8, 0.010))))
    ((_, _, measured, verdict),) = _rows_of(results, "agents")
    assert measured == "3.75x: ours N 30 (CPU 2.000), LangGraph N 8 (CPU 10.000)"
    assert verdict is False


def test_agents_per_core_without_langgraph_has_no_verdict() -> None:
    skipped = {"side": "langgraph", "skipped": "not installed (langgraph)"}
    results = _results(agents=_agents(_side(30, _run(30, 0.002)), skipped))
    assert _rows_of(results, "agents") == [
        (AGENTS, ">= 5x", "ours N 30 (CPU 2.000)", "no figure: LangGraph not installed (langgraph)")
    ]
    results = _results(agents=_agents(_side(30, _run(30, 0.002)), _side(0, _run(1, None))))
    ((_, _, measured, verdict),) = _rows_of(results, "agents")
    assert measured == "ours N 30 (CPU 2.000), LangGraph N 0 (CPU -)"
    assert verdict == "no ratio: LangGraph passed at no N it tried"


# -- target 2: a durable step beside its floor ----------------------------------------------


def test_each_floor_backend_is_its_own_row_met_or_missed() -> None:
    results = _results(
        floor={
            "status": "ok",
            "rows": [
                _floor_row("sqlite FULL", 0.00036, 0.0002),
                _floor_row("sqlite NORMAL", 0.00012, 0.00005),
                _floor_row("postgres", 0.0019, 0.001),
            ],
        }
    )
    assert _rows_of(results, FLOOR) == [
        (FLOOR + "SQLite FULL", "<= 2x", "1.80x (0.360 / 0.200 ms)", True),
        (FLOOR + "SQLite NORMAL", "<= 2x", "2.40x (0.120 / 0.050 ms)", False),
        (FLOOR + "PostgreSQL", "<= 2x", "1.90x (1.900 / 1.000 ms)", True),
    ]


def test_a_floor_run_without_postgres_says_what_would_give_the_figure() -> None:
    rows = [_floor_row("sqlite FULL", 0.0005, 0.0002), _floor_row("sqlite NORMAL", 0.0001, 0.0001)]
    results = _results(floor={"status": "ok", "rows": rows})
    assert [(f, v) for f, _, _, v in _rows_of(results, FLOOR)] == [
        (FLOOR + "SQLite FULL", False),
        (FLOOR + "SQLite NORMAL", True),
        (FLOOR + "PostgreSQL", NO_POSTGRES),
    ]


# -- target 3: two hosts beside one ---------------------------------------------------------


def test_scale_out_cpu_met_and_statements_missed() -> None:
    results = _results(hosts=_hosts(_scaleout_rows(1.08, 1.25)))
    assert _rows_of(results, "two hosts") == [
        (CPU, "<= 1.15x", "1.08x (2.00 -> 2.16 ms)", True),
        (STATEMENTS, "<= 1.10x", "1.25x", False),
    ]


def test_scale_out_cpu_missed_and_statements_met() -> None:
    results = _results(hosts=_hosts(_scaleout_rows(1.30, 1.02)))
    assert [(f, m, v) for f, _, m, v in _rows_of(results, "two hosts")] == [
        (CPU, "1.30x (2.00 -> 2.60 ms)", False),
        (STATEMENTS, "1.02x", True),
    ]


def test_statements_not_counted_and_hosts_without_postgres() -> None:
    results = _results(hosts=_hosts(_scaleout_rows(1.0, None)))
    (cpu, statements) = _rows_of(results, "two hosts")
    assert cpu[3] is True
    assert statements == (
        STATEMENTS,
        "<= 1.10x",
        "-",
        "no figure: not counted: the server does not load pg_stat_statements",
    )
    results = _results(hosts=_hosts(_takeover_rows("sqlite", 1000, 1.5)))
    assert [v for _, _, _, v in _rows_of(results, "two hosts")] == [NO_POSTGRES, NO_POSTGRES]


# -- target 4: a takeover of 1,000 sessions -------------------------------------------------


def test_takeover_rows_met_and_missed_on_each_backend() -> None:
    hosts = _hosts(_takeover_rows("sqlite", 1000, 1.5), _takeover_rows("postgres", 1000, 2.5))
    assert _rows_of(_results(hosts=hosts), "a takeover") == [
        (TAKEOVER + "SQLite", "<= 2x", "1.50x", True),
        (TAKEOVER + "PostgreSQL", "<= 2x", "2.50x", False),
    ]
    hosts = _hosts(_takeover_rows("sqlite", 1000, 2.2), _takeover_rows("postgres", 1000, 1.9))
    assert [v for *_, v in _rows_of(_results(hosts=hosts), "a takeover")] == [False, True]


def test_a_quick_takeover_is_shown_but_not_judged() -> None:
    results = _results(hosts=_hosts(_takeover_rows("sqlite", 100, 1.2)))
    assert _rows_of(results, "a takeover") == [
        (
            TAKEOVER + "SQLite",
            "<= 2x",
            "1.20x at 100 sessions",
            "not run at 1,000 sessions: drop --quick",
        ),
        (TAKEOVER + "PostgreSQL", "<= 2x", "-", NO_POSTGRES),
    ]


# -- sections not run, and the report --------------------------------------------------------


def test_a_section_not_run_names_the_flag_that_runs_it() -> None:
    results = _results(floor={"status": "error", "reason": "RuntimeError: disk"})
    verdicts = {figure: verdict for figure, _, _, verdict in performance_targets(results)}
    assert len(verdicts) == 8
    assert verdicts[AGENTS] == "not run: `./dev bench --only agents` runs it"
    assert verdicts[FLOOR + "SQLite FULL"] == "not run: the floor section failed (above)"
    for figure in (CPU, STATEMENTS, TAKEOVER + "SQLite", TAKEOVER + "PostgreSQL"):
        assert verdicts[figure] == "not run: `./dev bench --only hosts` runs it"


def test_the_report_ends_with_the_targets_after_issue_22s_information() -> None:
    hosts = _hosts(_scaleout_rows(1.08, 1.25), _takeover_rows("sqlite", 1000, 1.5))
    text = render(_results(hosts=hosts))
    assert "### Performance targets (issue 22)" not in text
    information = text.index("### Issue 22's ratios against bare loops (information, not targets)")
    earlier = text.index("### Earlier targets and ceilings")
    issue39 = text.index("### Performance targets (issue 39)")
    assert information < earlier < issue39
    # Issue 22's rows keep their figures, read against its bounds.
    assert "| 100 loops / bare records/s | >= 0.7x | not measured (" in text
    lines = text.splitlines()
    assert lines[-8:] == [
        f"| {AGENTS} | >= 5x | - | not run: `./dev bench --only agents` runs it |",
        f"| {FLOOR}SQLite FULL | <= 2x | - | not run: `./dev bench --only floor` runs it |",
        f"| {FLOOR}SQLite NORMAL | <= 2x | - | not run: `./dev bench --only floor` runs it |",
        f"| {FLOOR}PostgreSQL | <= 2x | - | not run: `./dev bench --only floor` runs it |",
        f"| {CPU} | <= 1.15x | 1.08x (2.00 -> 2.16 ms) | met |",
        f"| {STATEMENTS} | <= 1.10x | 1.25x | **missed** |",
        f"| {TAKEOVER}SQLite | <= 2x | 1.50x | met |",
        f"| {TAKEOVER}PostgreSQL | <= 2x | - | {NO_POSTGRES} |",
    ]
    # Issue 39's rows are not listed a second time among the earlier targets.
    found: report.Targets = []
    hosts_targets(hosts["rows"], found)
    assert [t for t, _, _ in found] == ["failover: kill to first record, p99 <= 1.5 s"]


def test_a_run_written_to_a_file_shows_the_targets_on_stderr_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "results.json"
    saved.write_bytes(msgspec.json.encode(_results(hosts=_hosts(_scaleout_rows(1.08, 1.25)))))
    assert bench_main.main(["--from-json", str(saved)]) == 0
    out, err = capsys.readouterr()
    table = report.performance_targets_table(msgspec.json.decode(saved.read_bytes()))
    assert out.rstrip("\n").endswith("\n".join(table))
    assert err.rstrip("\n") == "\n".join(table)
    assert f"| {CPU} | <= 1.15x | 1.08x (2.00 -> 2.16 ms) | met |" in err
