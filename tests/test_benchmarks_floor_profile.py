"""The floor's profile (``benchmarks/floor_profile.py``) runs at a tiny size and counts
what a durable tool step costs: a smoke test, comparing counts only, never a time."""

from __future__ import annotations

import sys

import pytest

from benchmarks.floor_profile import profile

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the writer thread's clock is read from /proc"
)


def test_a_step_is_taken_apart_into_threads_statements_and_calls() -> None:
    result = profile("NORMAL", steps=12)
    threads = result["threads"]
    assert threads["wall_us"] > 0 and threads["trio_cpu_us"] > 0 and threads["writer_cpu_us"] > 0
    # One transaction a step (its tool.started; the turn's own commits add one or two
    # over the whole turn), each one hand-off to the writer thread and one back.
    assert 1 <= threads["hops"] <= 15 / 12
    assert threads["task steps: entry queue (run_sync_soon)"] == pytest.approx(threads["hops"])
    assert {"BEGIN IMMEDIATE", "COMMIT", "INSERT INTO records (many)"} <= set(result["statements"])
    assert result["wal_frames_per_commit"] >= 1
    assert result["calls_per_step"] > 0
    assert sum(share for _, share in result["modules"]) <= 1
