"""The session writers' commit timings: each durable append counted once, in
the bucket its time falls in (a time equal to a bound is in that bucket), and
what ``commit_latency()`` reads back."""

from __future__ import annotations

import math

import pytest

from journal.memory import MemoryJournal
from session import CommitLatency, Session, commit_latency
from session.embedded.commit_latency import COMMIT_BUCKETS, observe_commit
from tests.host.support import counting_definition


def test_a_commit_is_counted_in_the_bucket_its_time_falls_in() -> None:
    before = commit_latency()
    observe_commit(0.001)  # on a bound: that bucket
    observe_commit(0.0011)  # just past it: the next
    observe_commit(60.0)  # past every bound: +Inf
    after = commit_latency()
    added = [b - a for a, b in zip(before.counts, after.counts, strict=True)]
    at = COMMIT_BUCKETS.index(0.001)
    assert added[at] == 1 and added[at + 1] == 1 and added[-1] == 1
    assert sum(added) == after.count - before.count == 3
    assert after.seconds - before.seconds == pytest.approx(60.0021)
    assert after.bounds == (*COMMIT_BUCKETS, math.inf)
    cumulative = after.cumulative()
    assert cumulative[-1] == (math.inf, after.count)
    assert [n for _, n in cumulative] == sorted(n for _, n in cumulative)


async def test_each_durable_append_of_a_session_is_timed(autojump_clock: object) -> None:
    journal = MemoryJournal()
    before = commit_latency().count
    async with Session.create(journal, counting_definition()) as session:
        await session.submit("count")
        await session.wait_idle()
        appends = session.commit_statistics().appends
    assert appends >= 2
    found = commit_latency()
    assert isinstance(found, CommitLatency)
    assert found.count - before == appends
