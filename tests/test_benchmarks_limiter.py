"""The limiter benchmark runs end to end at tiny sizes and returns well-formed rows.

A smoke test only: no figure is compared with a bound other than "was measured".
"""

from __future__ import annotations

from benchmarks import limiter
from benchmarks.report import limiter_section


def test_the_limiter_benchmark_measures_every_variant_at_both_levels() -> None:
    rows = limiter.run(calls=20, http_calls=2, rounds=1, progress=lambda line: None)
    seen = {(r["level"], r["limiter"]) for r in rows}
    names = {name for name, _ in limiter.VARIANTS}
    assert seen == {(level, name) for level in ("retries", "anthropic") for name in names}
    assert all(r["seconds_per_call"] > 0 for r in rows)
    assert all(r["overhead_seconds"] == 0 for r in rows if r["limiter"] == "none")
    table = limiter_section(rows)
    assert table[0] == "### Shared rate limiter"
    assert sum(line.startswith("| retries") for line in table) == 3
