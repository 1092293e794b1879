"""The metrics benchmark runs end to end at tiny sizes and returns well-formed rows.

A smoke test only: no figure is compared with a bound other than "was measured".
"""

from __future__ import annotations

from benchmarks import metrics


def test_the_metrics_benchmark_measures_turns_with_and_without() -> None:
    rows = metrics.run(turns=3, rounds=2, progress=lambda line: None)
    assert [r["variant"] for r in rows] == list(metrics.VARIANTS)
    assert all(r["seconds_per_turn"] > 0 for r in rows)
    assert rows[0]["overhead_seconds"] == 0 and rows[0]["scrape_seconds"] is None
    assert rows[1]["scrape_seconds"] > 0
    assert metrics.table(rows)[0].startswith("| variant |")
