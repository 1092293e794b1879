"""Riding out an unreachable journal: the retry policy, and journals whose
reads retry under it (``journal.retry``) while a put says it may be retried."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from journal import (
    READ_RETRIES,
    ForwardingJournal,
    InboxUnavailableError,
    Journal,
    JournalUnavailableError,
    Record,
    RetryingJournal,
    RetryPolicy,
    SessionInfo,
    SessionNotFoundError,
)
from journal.backoff import Retrying
from journal.inbox import InboxCommand, InboxEntry
from journal.memory import MemoryJournal
from tests.journal.contract import drafts, submit


def test_the_read_policy_is_bounded() -> None:
    assert READ_RETRIES.attempts == 8
    assert READ_RETRIES.bound == pytest.approx(0.05 + 0.1 + 0.2 + 0.4 + 0.8 + 1.6 + 2.0)


def test_pauses_grow_to_the_cap_each_drawn_below_its_ceiling() -> None:
    policy = RetryPolicy(attempts=6, first=0.5, cap=3.0)
    assert list(policy.pauses(lambda: 0.5)) == [0.25, 0.5, 1.0, 1.5, 1.5]
    assert list(policy.pauses(lambda: 0.0)) == [0.0] * 5
    assert list(RetryPolicy(attempts=1, first=0.5, cap=3.0).pauses()) == []
    assert all(0 <= p <= 3.0 for p in policy.pauses())


@pytest.mark.parametrize(
    ("attempts", "first", "cap"), [(0, 0.1, 1.0), (3, -0.1, 1.0), (3, 2.0, 1.0)]
)
def test_a_policy_out_of_range_is_refused(attempts: int, first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="retry policy"):
        RetryPolicy(attempts=attempts, first=first, cap=cap)


def test_retrying_counts_its_attempts_and_says_so_when_exhausted() -> None:
    tries = Retrying(RetryPolicy(attempts=3, first=0.1, cap=1.0))
    assert tries.pause() is not None
    assert tries.pause() is not None
    assert tries.pause() is None
    error = tries.exhausted(JournalUnavailableError("cannot reach it"))
    assert str(error).startswith("cannot reach it (tried 3 times over ")
    assert error.retryable


class Outage(ForwardingJournal):
    """Fails the next ``failures`` reads (a read fails after ``after_records``
    records) with ``JournalUnavailableError``, as a lost server would."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.failures = 0
        self.after_records = 0
        self.calls = 0

    def _fail(self) -> bool:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            return True
        return False

    async def sessions(self) -> list[SessionInfo]:
        if self._fail():
            raise JournalUnavailableError("cannot reach the server")
        return await self.inner.sessions()

    async def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        if self._fail():
            raise JournalUnavailableError("cannot reach the server")
        return await self.inner.put(session, key, command, definition=definition)

    async def _read(self, session: str, after: int) -> AsyncIterator[Record]:
        failing = self._fail()
        n = 0
        async for record in self.inner.read(session, after=after):
            if failing and n == self.after_records:
                raise JournalUnavailableError("the connection broke")
            n += 1
            yield record
        if failing:
            raise JournalUnavailableError("the connection broke")

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        return self._read(session, after)


async def test_a_read_resumes_after_its_last_record(autojump_clock: trio.testing.MockClock) -> None:
    inner = MemoryJournal()
    lease = await inner.open_session("s")
    written = await inner.append(lease, drafts("x", 6), expected_seq=0)
    outage = Outage(inner)
    outage.failures, outage.after_records = 3, 2
    journal = RetryingJournal(outage)
    got: list[Record] = [r async for r in journal.read("s")]
    # Each failed read gave two records before it broke: none twice, none lost.
    assert got == written
    assert outage.calls == 4


async def test_a_read_gives_up_past_the_bound(autojump_clock: trio.testing.MockClock) -> None:
    inner = MemoryJournal()
    await inner.open_session("s")
    outage = Outage(inner)
    outage.failures = 100
    policy = RetryPolicy(attempts=4, first=1.0, cap=1.5)
    journal = RetryingJournal(outage, policy)
    start = trio.current_time()
    with pytest.raises(
        JournalUnavailableError,
        match=r"tried 4 times over [0-9.]+ s; the bound of the retries is 4 s",
    ) as raised:
        await journal.sessions()
    assert trio.current_time() - start <= policy.bound
    assert outage.calls == 4
    assert raised.value.retryable


async def test_a_refusal_is_never_retried(autojump_clock: trio.testing.MockClock) -> None:
    outage = Outage(MemoryJournal())
    journal = RetryingJournal(outage)
    with pytest.raises(SessionNotFoundError):
        await journal.head("nowhere")
    with pytest.raises(SessionNotFoundError):
        [r async for r in journal.read("nowhere")]
    assert outage.calls == 1  # the read; head is not counted by Outage


async def test_a_put_that_cannot_reach_the_journal_is_retryable_under_its_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = MemoryJournal()
    await inner.open_session("s")
    outage = Outage(inner)
    outage.failures = 1
    journal = RetryingJournal(outage)
    with pytest.raises(InboxUnavailableError) as raised:
        await journal.put("s", "k-1", submit("hello"))
    assert raised.value.retryable
    assert (raised.value.session, raised.value.key) == ("s", "k-1")
    assert "send it again with the same key" in str(raised.value)
    assert isinstance(raised.value.__cause__, JournalUnavailableError)
    # Not retried by the journal: the caller sends it again, and it is stored once.
    assert outage.calls == 1
    first = await journal.put("s", "k-1", submit("hello"))
    again = await journal.put("s", "k-1", submit("hello"))
    assert first == again
    assert [e.number for e in await inner.inbox("s")] == [1]
