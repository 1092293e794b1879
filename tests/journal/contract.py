"""The journal conformance suite: every backend runs these tests.

A backend is proven by subclassing ``JournalContract`` in
``tests/journal/test_contract_<backend>.py`` and providing one fixture.

The ``backend`` fixture contract
--------------------------------
``backend`` is a *synchronous* pytest fixture (hypothesis runs each example in
its own trio run, so nothing it returns may be bound to one) returning an
object with:

``persistent: bool``
    True when a journal opened again by ``open()`` sees what an earlier one
    wrote and committed.  False skips ``test_durable_across_reopen``.

``open() -> AbstractAsyncContextManager[Journal]``
    Open the backend's store, closing it on exit (``open_journal(url)`` is the
    usual answer).  Called inside the test's trio run, possibly several times in
    one test, and once per hypothesis example; every call opens the *same*
    store.  Tests use fresh session ids, so a store shared between examples is
    fine.

``async corrupt(journal, session, seq, body) -> None``
    Overwrite the stored event bytes of record ``seq`` of ``session``, leaving
    its digest and every other column alone (``journal`` is the one open in
    the test).

``async edit(journal, session, seq, column, value) -> None``
    Overwrite one other column (``id``, ``loop``, ``at`` or ``cause``) of
    record ``seq`` of ``session``, leaving the rest alone.

``async expire(journal, session) -> None``
    Move the expiry of the session's lease into the past, owner unchanged (as
    the passing of its ttl would).

``async damage_entry(journal, session, number, body) -> None``
    Overwrite the stored command bytes of inbox entry ``number``.

Example (PostgreSQL)::

    class PostgresBackend:
        persistent = True

        def __init__(self, url: str) -> None:
            self.url = url

        def open(self) -> AbstractAsyncContextManager[Journal]:
            return open_journal(self.url)

        async def corrupt(self, journal, session, seq, body) -> None:
            await trio.to_thread.run_sync(damage_postgres_record, self.url, session, seq, body)

        async def edit(self, journal, session, seq, column, value) -> None:
            await trio.to_thread.run_sync(
                edit_postgres_record, self.url, session, seq, column, value
            )

    class TestPostgres(JournalContract):
        @pytest.fixture
        def backend(self, postgres_url: str) -> PostgresBackend:
            return PostgresBackend(postgres_url)

Time: tests that follow a tail use ``autojump_clock`` (polling backends then
poll in virtual time) or ``mock_clock`` (frozen: only in-process wakeups can
deliver), never real sleeps.  ``real_time_guard`` is a hang guard for the
frozen clock, not a timing assertion.

The module also holds the hypothesis strategies for every event
(``EVENT_STRATEGIES``), derived from the msgspec type information so that a new
event type is covered without touching this file.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import msgspec.inspect as mi
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import (
    Checkpointed,
    ConflictError,
    Draft,
    DuplicateEventError,
    FencedError,
    HostIdInUseError,
    InboxConsumedError,
    InboxEntryTooLargeError,
    InboxError,
    InboxKeyError,
    InvalidEventError,
    Journal,
    JournalClosedError,
    JournalCorruptError,
    JournalError,
    LeaseHeldError,
    Record,
    SessionLease,
    SessionNotFoundError,
    WriterSpan,
)
from journal.codec import GENESIS, chain, encode_event
from journal.content import Message, Text
from journal.events import (
    CHECKPOINT_STREAM,
    EVENT_TYPES,
    Event,
    LoopImage,
    Notice,
    SessionCheckpoint,
)
from journal.inbox import (
    MAX_ENTRY_BYTES,
    Consumed,
    Create,
    InboxCommand,
    InboxOutcome,
    Steer,
    Submit,
    Wakeup,
    encode_command,
)

__all__ = [
    "EVENT_STRATEGIES",
    "Backend",
    "JournalContract",
    "any_event",
    "real_time_guard",
    "strategy_for",
]


class Backend(Protocol):
    persistent: bool

    def open(self) -> AbstractAsyncContextManager[Journal]: ...

    async def corrupt(self, journal: Journal, session: str, seq: int, body: bytes) -> None: ...

    async def edit(
        self, journal: Journal, session: str, seq: int, column: str, value: object
    ) -> None: ...

    async def expire(self, journal: Journal, session: str) -> None: ...

    async def damage_entry(
        self, journal: Journal, session: str, number: int, body: bytes
    ) -> None: ...


# -- strategies -------------------------------------------------------------------

_INT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_TEXT = st.text(max_size=24)

# ``Any`` fields (tool inputs, previews) hold JSON-like data.  Lists, not
# tuples: that is what a decoder gives back for an untyped array.
_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | _INT | st.floats(allow_nan=False) | _TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_TEXT, children, max_size=3),
    max_leaves=8,
)


def strategy_for(t: mi.Type) -> st.SearchStrategy[Any]:
    """A strategy for values of the msgspec type ``t`` that survive a msgpack round trip.

    Every field is drawn, defaulted ones included, so defaults are exercised
    with other values too.
    """
    match t:
        case mi.StructType(cls=cls, fields=fields):
            return st.builds(cls, **{f.name: strategy_for(f.type) for f in fields})
        case mi.UnionType(types=types):
            return st.one_of(*[strategy_for(member) for member in types])
        case mi.LiteralType(values=values):
            return st.sampled_from(values)
        case mi.StrType():
            return _TEXT
        case mi.IntType():
            return _INT
        case mi.BoolType():
            return st.booleans()
        case mi.NoneType():
            return st.none()
        case mi.FloatType():
            return st.floats(allow_nan=False)
        case mi.BytesType():
            return st.binary(max_size=24)
        case mi.VarTupleType(item_type=item):
            return st.lists(strategy_for(item), max_size=3).map(tuple)
        case mi.ListType(item_type=item):
            return st.lists(strategy_for(item), max_size=3)
        case mi.DictType(key_type=key, value_type=value):
            return st.dictionaries(strategy_for(key), strategy_for(value), max_size=3)
        case mi.AnyType():
            return _JSON
    raise TypeError(f"no strategy for {t!r}: teach tests/journal/contract.strategy_for this type")


EVENT_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    t: strategy_for(mi.type_info(t)) for t in EVENT_TYPES
}
"""One strategy per event type in ``journal.events.EVENT_TYPES``."""

any_event: st.SearchStrategy[Any] = st.one_of(*EVENT_STRATEGIES.values())

DESIGN_TAGS = frozenset(
    {
        "loop.started",
        "loop.mode_changed",
        "loop.stopped",
        "input.queued",
        "input.cancelled",
        "steer.queued",
        "steer.applied",
        "turn.started",
        "turn.ended",
        "model.call_started",
        "model.output",
        "model.message_committed",
        "model.call_failed",
        "tool.started",
        "tool.completed",
        "tool.abandoned",
        "tool.resolved",
        "gate.opened",
        "gate.resolved",
        "gate.cancelled",
        "context.measured",
        "compaction.started",
        "compaction.committed",
        "compaction.rejected",
        "child.started",
        "child.finished",
        "notice",
    }
)
"""The 27 event kinds of DESIGN.md section 3; kinds may be refined, never dropped."""


def tag_of(t: type[Any]) -> str:
    tag = t.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


# -- helpers --------------------------------------------------------------------------


@contextlib.contextmanager
def real_time_guard(seconds: float) -> Iterator[None]:
    """Fail the test if the block runs longer than ``seconds`` of real time.

    For tests under a frozen ``mock_clock``, where trio timeouts never fire: a
    guard against a hang, never an assertion about speed.
    """
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        timer = threading.Timer(seconds, token.run_sync_soon, (scope.cancel,))
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if scope.cancelled_caught:
        pytest.fail(f"still waiting after {seconds} s of real time")


def new_session() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def notice(i: int, text: str = "") -> Notice:
    return Notice(code="test", text=text or f"event {i}")


def drafts(prefix: str, n: int, *, start: int = 0, loop: str = "main") -> list[Draft]:
    return [
        Draft(id=f"{prefix}-{i}", loop=loop, event=notice(i), cause=f"cmd-{i}")
        for i in range(start, start + n)
    ]


def checkpoint(i: int, previous: int = 0) -> Draft:
    image = LoopImage(loop="main", state=f"state {i}".encode(), kept=i)
    return Draft(
        id=f"cp-{i}",
        loop=CHECKPOINT_STREAM,
        event=SessionCheckpoint(previous=previous, loops=(image,)),
    )


async def read_all(journal: Journal, session: str, after: int = 0) -> list[Record]:
    return [record async for record in journal.read(session, after=after)]


async def read_until_error(
    journal: Journal, session: str, after: int = 0
) -> tuple[list[Record], Exception | None]:
    got: list[Record] = []
    try:
        async for record in journal.read(session, after=after):
            got.append(record)
    except Exception as exc:
        return got, exc
    return got, None


async def _collect(
    journal: Journal, session: str, after: int, send: trio.MemorySendChannel[Record]
) -> None:
    async with send:
        async for record in journal.tail(session, after=after):
            await send.send(record)


async def receive(channel: trio.MemoryReceiveChannel[Record], n: int) -> list[Record]:
    return [await channel.receive() for _ in range(n)]


# -- the suite ----------------------------------------------------------------------------


class _RecordContract:
    """Every test a journal backend must pass.  Subclasses provide ``backend``."""

    # -- vocabulary coverage --------------------------------------------------------

    def test_strategies_cover_the_whole_catalog(self) -> None:
        tags = {tag_of(t) for t in EVENT_STRATEGIES}
        assert set(EVENT_STRATEGIES) == set(EVENT_TYPES)
        assert tags >= DESIGN_TAGS, f"event kinds missing: {sorted(DESIGN_TAGS - tags)}"
        assert len(DESIGN_TAGS) == 27

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(data=st.data())
    async def test_every_event_type_round_trips(
        self, backend: Backend, data: st.DataObject
    ) -> None:
        # One event of every type in every example, plus a random tail of more.
        events: list[Event] = [data.draw(EVENT_STRATEGIES[t], label=tag_of(t)) for t in EVENT_TYPES]
        events += data.draw(st.lists(any_event, max_size=10), label="more")
        order = data.draw(st.permutations(range(len(events))), label="order")
        cut = data.draw(st.integers(min_value=1, max_value=len(events)), label="first append")
        session = new_session()
        batch = [
            Draft(id=f"e{i}", loop=f"loop-{i % 3}", event=events[k], cause=None if i % 2 else "c")
            for i, k in enumerate(order)
        ]
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            written = await journal.append(lease, batch[:cut], expected_seq=0)
            written += await journal.append(lease, batch[cut:], expected_seq=cut)
            read = await read_all(journal, session)
        assert read == written
        assert [r.event for r in read] == [d.event for d in batch]
        assert [(r.id, r.loop, r.cause) for r in read] == [(d.id, d.loop, d.cause) for d in batch]
        assert {type(r.event) for r in read} == set(EVENT_TYPES)

    # -- appending --------------------------------------------------------------------

    async def test_seq_is_gap_free_from_one(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            assert lease.head == 0
            assert await journal.head(session) == 0
            head = 0
            for size in (1, 3, 1, 5, 2):
                records = await journal.append(lease, drafts(f"a{head}", size), expected_seq=head)
                assert [r.seq for r in records] == list(range(head + 1, head + size + 1))
                assert {r.session for r in records} == {session}
                head += size
                assert await journal.head(session) == head
            assert [r.seq for r in await read_all(journal, session)] == list(range(1, head + 1))
            assert (await journal.open_session(session)).head == head

    async def test_append_returns_what_read_yields(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            written = await journal.append(lease, drafts("x", 4), expected_seq=0)
            assert await read_all(journal, session) == written
            assert await read_all(journal, session, after=2) == written[2:]
            assert await read_all(journal, session, after=4) == []
            assert await read_all(journal, session, after=9) == []

    async def test_empty_append_writes_nothing(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 2), expected_seq=0)
            assert await journal.append(lease, [], expected_seq=2) == []
            assert await journal.head(session) == 2

    async def test_edge_text_and_large_bodies_round_trip(self, backend: Backend) -> None:
        # Empty and non-ASCII text (astral plane included), a cause that is
        # empty rather than absent, long text and a body of megabytes, over
        # several appends (a backend may write a known session another way).
        session = new_session()
        edges = [
            Draft(id="", loop="", event=Notice(code="", text=""), cause=""),
            Draft(id="id-\u00fc-\u65e5\u672c-\U0001f600", loop="\U0001d4c1oop", event=notice(1)),
            Draft(id="long", loop="\u03bb" * 50_000, event=notice(2), cause="\U0001f600" * 50_000),
        ]
        big = Draft(id="big", loop="main", event=Notice(code="big", text="\U0001f600" * 1_000_000))
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            written = await journal.append(lease, edges[:1], expected_seq=0)
            written += await journal.append(lease, edges[1:], expected_seq=1)
            written += await journal.append(lease, [big], expected_seq=3)
            written += await journal.append(lease, [], expected_seq=4)
            assert [(r.id, r.loop, r.cause) for r in written] == [
                (d.id, d.loop, d.cause) for d in [*edges, big]
            ]
            assert [r.event for r in written] == [d.event for d in [*edges, big]]
            assert await read_all(journal, session) == written
            # Each one is found by its id again.
            assert await journal.append(lease, edges, expected_seq=4) == written[:3]
            assert await journal.append(lease, [big], expected_seq=4) == written[3:]

    async def test_text_that_is_not_unicode_is_refused_alone(self, backend: Backend) -> None:
        # A lone surrogate is a Python str but no Unicode text: UTF-8 cannot
        # encode it.  Refused with a named ValueError before it is queued, so
        # an append committing at the same moment for another session (in the
        # same group, on a backend that groups) is untouched.
        session, other = new_session(), new_session()
        bad = [
            Draft(id="l-\ud800", loop="main", event=notice(1)),
            Draft(id="l-2", loop="\udfff", event=notice(1)),
            Draft(id="l-2", loop="main", event=notice(1), cause="\ud83d"),
        ]
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            other_lease = await journal.open_session(other)
            first = await journal.append(lease, drafts("l", 1), expected_seq=0)
            others: list[Record] = []

            async def refused(draft: Draft) -> None:
                with pytest.raises(ValueError, match="not valid Unicode"):
                    await journal.append(lease, [*drafts("l", 1, start=1), draft], expected_seq=1)

            async def innocent(i: int) -> None:
                others.extend(
                    await journal.append(other_lease, drafts("o", 1, start=i), expected_seq=i)
                )

            for i, draft in enumerate(bad):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(refused, draft)
                    nursery.start_soon(innocent, i)
            with pytest.raises(ValueError, match="not valid Unicode"):
                await journal.open_session("bad-\ud800")
            # A lease is plain data a caller can build; its session id too.
            forged = SessionLease(session="s-\ud800", incarnation=1, head=0)
            with pytest.raises(ValueError, match="not valid Unicode"):
                await journal.append(forged, drafts("f", 1), expected_seq=0)
            assert await journal.head(session) == 1
            assert await read_all(journal, other) == others and len(others) == 3
            second = await journal.append(lease, drafts("l", 1, start=1), expected_seq=1)
            assert await read_all(journal, session) == first + second

    async def test_an_event_that_could_not_be_read_back_is_refused_alone(
        self, backend: Backend
    ) -> None:
        # Structs are not type-checked when built; decoding is.  A wrong type
        # stored would make the session unreadable from its seq on, so the
        # append is refused (and nothing of it written) while an append
        # committing at the same moment for another session is untouched.
        session, other = new_session(), new_session()
        wrong: list[Any] = [
            Notice(code=5, text="a number where text belongs"),  # type: ignore[arg-type]
            Notice(code="x", text=object()),  # type: ignore[arg-type]
        ]
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            other_lease = await journal.open_session(other)
            others: list[Record] = []
            for i, event in enumerate(wrong):

                async def refused(event: Any = event) -> None:
                    bad = Draft(id="bad", loop="main", event=event)
                    with pytest.raises(InvalidEventError, match="Notice cannot be stored"):
                        await journal.append(lease, [*drafts("a", 1), bad], expected_seq=0)

                async def innocent(i: int = i) -> None:
                    others.extend(
                        await journal.append(other_lease, drafts("o", 1, start=i), expected_seq=i)
                    )

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(refused)
                    nursery.start_soon(innocent)
            assert await journal.head(session) == 0
            assert await read_all(journal, other) == others and len(others) == 2
            written = await journal.append(lease, drafts("a", 1), expected_seq=0)
            assert await read_all(journal, session) == written

    async def test_multi_record_append_is_all_or_nothing(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 2), expected_seq=0)
            # The last draft reuses a stored id with other content: the whole
            # append fails, the two good drafts before it included.
            bad = [*drafts("y", 2), Draft(id="x-0", loop="main", event=notice(0, "other"))]
            with pytest.raises(DuplicateEventError):
                await journal.append(lease, bad, expected_seq=2)
            assert await journal.head(session) == 2
            assert [r.id for r in await read_all(journal, session)] == ["x-0", "x-1"]
            # Nothing of the failed append was kept: its good drafts append cleanly.
            records = await journal.append(lease, drafts("y", 2), expected_seq=2)
            assert [(r.seq, r.id) for r in records] == [(3, "y-0"), (4, "y-1")]

    async def test_stale_expected_seq_conflicts_and_writes_nothing(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 3), expected_seq=0)
            for stale in (0, 2, 4):
                with pytest.raises(ConflictError) as caught:
                    await journal.append(lease, drafts(f"y{stale}", 2), expected_seq=stale)
                assert (caught.value.session, caught.value.expected, caught.value.actual) == (
                    session,
                    stale,
                    3,
                )
            assert [r.id for r in await read_all(journal, session)] == ["x-0", "x-1", "x-2"]

    async def test_older_incarnation_is_fenced(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            old = await journal.open_session(session)
            committed = await journal.append(old, drafts("old", 2), expected_seq=0)
            new = await journal.open_session(session)
            assert new.incarnation > old.incarnation
            assert new.head == 2
            with pytest.raises(FencedError) as caught:
                await journal.append(old, drafts("late", 1), expected_seq=2)
            assert caught.value.session == session
            assert (caught.value.incarnation, caught.value.current) == (
                old.incarnation,
                new.incarnation,
            )
            # Fencing wins over idempotency: the old writer learns it must stop.
            with pytest.raises(FencedError):
                await journal.append(old, drafts("old", 2), expected_seq=0)
            assert await read_all(journal, session) == committed
            records = await journal.append(new, drafts("new", 1), expected_seq=2)
            assert records[0].seq == 3

    async def test_open_session_without_create(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            with pytest.raises(SessionNotFoundError) as caught:
                await journal.open_session(session, create=False)
            assert caught.value.session == session
            first = await journal.open_session(session)
            again = await journal.open_session(session, create=False)
            assert again.incarnation == first.incarnation + 1

    async def test_reappending_the_same_drafts_returns_the_stored_records(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            original = await journal.append(lease, drafts("x", 3), expected_seq=0)
            await journal.append(lease, drafts("later", 1), expected_seq=3)
            # A retry after a lost reply: its expected_seq is stale by now.
            assert await journal.append(lease, drafts("x", 3), expected_seq=0) == original
            # ... or current: still nothing new is written.
            assert await journal.append(lease, drafts("x", 3), expected_seq=4) == original
            assert await journal.append(lease, drafts("x", 1, start=1), expected_seq=4) == [
                original[1]
            ]
            assert await journal.head(session) == 4

    async def test_same_id_with_other_content_is_refused(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 2), expected_seq=0)
            other_event = Draft(id="x-0", loop="main", event=notice(0, "something else"))
            other_loop = Draft(id="x-0", loop="elsewhere", event=notice(0))
            for draft in (other_event, other_loop):
                for expected in (0, 2):
                    with pytest.raises(DuplicateEventError) as caught:
                        await journal.append(lease, [draft], expected_seq=expected)
                    assert caught.value.session == session
                    assert caught.value.event_id == "x-0"
            # Part stored, part new: not a retry of one append.
            with pytest.raises(DuplicateEventError):
                await journal.append(lease, [*drafts("x", 1), *drafts("fresh", 1)], expected_seq=2)
            # One id twice in the same append.
            twice = [*drafts("dup", 1), *drafts("dup", 1)]
            with pytest.raises(DuplicateEventError):
                await journal.append(lease, twice, expected_seq=2)
            assert [r.id for r in await read_all(journal, session)] == ["x-0", "x-1"]

    async def test_one_id_twice_is_refused_even_when_it_is_stored(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            stored = await journal.append(lease, drafts("x", 2), expected_seq=0)
            # No append holding one id twice can have committed, so this is
            # not a retry whose stored records could be returned.
            twice = [*drafts("x", 1), *drafts("x", 1)]
            for expected in (0, 2):
                with pytest.raises(DuplicateEventError) as caught:
                    await journal.append(lease, twice, expected_seq=expected)
                assert caught.value.event_id == "x-0"
            assert await read_all(journal, session) == stored

    async def test_ids_are_unique_per_session(self, backend: Backend) -> None:
        a, b = new_session(), new_session()
        async with backend.open() as journal:
            lease_a = await journal.open_session(a)
            lease_b = await journal.open_session(b)
            ra = await journal.append(lease_a, drafts("x", 1), expected_seq=0)
            rb = await journal.append(lease_b, drafts("x", 1), expected_seq=0)
            assert (ra[0].session, rb[0].session) == (a, b)

    # -- reading --------------------------------------------------------------------------

    async def test_digest_chain_links_every_record(self, backend: Backend) -> None:
        # The whole record is chained: seq, id, session, loop, at, cause, body.
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 3), expected_seq=0)
            await journal.append(
                lease,
                [Draft(id="no-cause", loop="other", event=notice(7)), checkpoint(0)],
                expected_seq=3,
            )
            previous = GENESIS
            records = await read_all(journal, session)
            assert [r.cause for r in records] == ["cmd-0", "cmd-1", "cmd-2", None, None]
            for r in records:
                body = encode_event(r.event)
                assert r.digest == chain(
                    previous, r.seq, r.id, r.session, r.loop, r.at, r.cause, body
                )
                previous = r.digest

    @pytest.mark.parametrize(
        ("column", "value"),
        [("loop", "elsewhere"), ("id", "forged-id"), ("cause", "forged-cmd"), ("at", 12345)],
    )
    async def test_an_edited_column_breaks_the_chain(
        self, backend: Backend, column: str, value: object
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            written = await journal.append(
                lease, [*drafts("x", 2), checkpoint(0), *drafts("y", 2)], expected_seq=0
            )
            await backend.edit(journal, session, 3, column, value)
            got, error = await read_until_error(journal, session)
            assert got == written[:2]
            assert isinstance(error, JournalCorruptError)
            assert (error.session, error.seq) == (session, 3)
            assert await read_all(journal, session, after=3) == written[3:]
            # The checkpoint index reads the edited record too.
            with pytest.raises(JournalCorruptError) as caught:
                await journal.checkpoints(session)
            assert caught.value.seq == 3

    async def test_a_cause_removed_or_added_breaks_the_chain(self, backend: Backend) -> None:
        # NULL and a string are different values to the chain (msgpack nil is
        # not any string, the empty one included).
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(
                lease,
                [*drafts("x", 1), Draft(id="n", loop="main", event=notice(1))],
                expected_seq=0,
            )
            await backend.edit(journal, session, 1, "cause", None)
            await backend.edit(journal, session, 2, "cause", "")
            got, error = await read_until_error(journal, session)
            assert got == [] and isinstance(error, JournalCorruptError) and error.seq == 1
            got, error = await read_until_error(journal, session, after=1)
            assert got == [] and isinstance(error, JournalCorruptError) and error.seq == 2

    async def test_storage_check_passes_on_an_intact_journal(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, [*drafts("x", 3), checkpoint(0)], expected_seq=0)
            report = await journal.check_storage()
            assert report.ok, report.problems
            assert report.checked or report.skipped

    async def test_missing_session(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            with pytest.raises(SessionNotFoundError):
                await journal.head(session)
            with pytest.raises(SessionNotFoundError):
                await read_all(journal, session)
            with pytest.raises(SessionNotFoundError):
                async for _ in journal.tail(session):
                    pass
            lease = SessionLease(session=session, incarnation=1, head=0)
            with pytest.raises(SessionNotFoundError):
                await journal.append(lease, drafts("x", 1), expected_seq=0)
            assert session not in {info.session for info in await journal.sessions()}

    @pytest.mark.parametrize("damage", ["other event", "garbage"])
    async def test_corrupt_record_fails_after_the_good_ones(
        self, backend: Backend, damage: str
    ) -> None:
        session = new_session()
        body = encode_event(notice(99, "forged")) if damage == "other event" else b"\xc1\x00garbage"
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            written = await journal.append(lease, drafts("x", 5), expected_seq=0)
            await backend.corrupt(journal, session, 3, body)
            got, error = await read_until_error(journal, session)
            assert got == written[:2]
            assert isinstance(error, JournalCorruptError)
            assert (error.session, error.seq) == (session, 3)
            # Reading from just after the damage chains from the stored digest.
            assert await read_all(journal, session, after=3) == written[3:]
            got, error = await read_until_error(journal, session, after=1)
            assert got == written[1:2]
            assert isinstance(error, JournalCorruptError)
            assert error.seq == 3

    @pytest.mark.parametrize("damage", ["edit", "garbage"])
    async def test_a_skipped_stream_is_verified_but_not_yielded(
        self, backend: Backend, damage: str
    ) -> None:
        # What a full-fold restore reads: every record on the chain, the
        # checkpoints left out; damage to a left-out record is still found.
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            written = await journal.append(
                lease,
                [*drafts("x", 2), checkpoint(0), *drafts("y", 2), checkpoint(1, 3)],
                expected_seq=0,
            )
            kept = [r for r in written if r.loop != CHECKPOINT_STREAM]
            skip = CHECKPOINT_STREAM

            async def read(after: int = 0) -> tuple[list[Record], Exception | None]:
                got: list[Record] = []
                try:
                    async for record in journal.read(session, after=after, skip_stream=skip):
                        got.append(record)
                except Exception as exc:
                    return got, exc
                return got, None

            assert await read() == (kept, None)
            assert await read(after=3) == (kept[2:], None)
            if damage == "edit":
                await backend.edit(journal, session, 3, "at", 12345)
            else:
                await backend.corrupt(journal, session, 3, b"\xc1\x00garbage")
            got, error = await read()
            assert got == written[:2]
            assert isinstance(error, JournalCorruptError)
            assert (error.session, error.seq) == (session, 3)

    # -- checkpoints ---------------------------------------------------------------------

    async def test_checkpoints_are_indexed_as_they_are_appended(self, backend: Backend) -> None:
        session, other = new_session(), new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            assert await journal.checkpoints(session) == []
            # Alone, first in an append, last in an append, between others.
            await journal.append(lease, [checkpoint(0)], expected_seq=0)
            await journal.append(lease, [checkpoint(1, 1), *drafts("x", 2)], expected_seq=1)
            await journal.append(lease, [*drafts("y", 2), checkpoint(2, 2)], expected_seq=4)
            await journal.append(
                lease, [*drafts("z", 1), checkpoint(3, 7), *drafts("w", 1)], expected_seq=7
            )
            other_lease = await journal.open_session(other)
            await journal.append(other_lease, [checkpoint(9)], expected_seq=0)
            found = await journal.checkpoints(session)
            records = await read_all(journal, session)
            assert [r.seq for r in found] == [1, 2, 7, 9]
            assert found == [records[seq - 1] for seq in (1, 2, 7, 9)]
            assert [r.seq for r in await journal.checkpoints(other)] == [1]

    async def test_checkpoints_survive_idempotent_reappends(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            batch = [*drafts("x", 2), checkpoint(0)]
            first = await journal.append(lease, batch, expected_seq=0)
            assert await journal.append(lease, batch, expected_seq=0) == first
            assert await journal.checkpoints(session) == [first[2]]

    async def test_a_refused_append_indexes_no_checkpoint(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 1), expected_seq=0)
            with pytest.raises(ConflictError):
                await journal.append(lease, [checkpoint(0)], expected_seq=0)
            await journal.open_session(session)
            with pytest.raises(FencedError):
                await journal.append(lease, [checkpoint(1)], expected_seq=1)
            assert await journal.checkpoints(session) == []

    async def test_a_damaged_checkpoint_is_reported_with_its_seq(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, [*drafts("x", 2), checkpoint(0)], expected_seq=0)
            forged = SessionCheckpoint(previous=0, loops=())
            await backend.corrupt(journal, session, 3, encode_event(forged))
            with pytest.raises(JournalCorruptError) as caught:
                await journal.checkpoints(session)
            assert (caught.value.session, caught.value.seq) == (session, 3)

    async def test_checkpoints_of_a_missing_session(self, backend: Backend) -> None:
        async with backend.open() as journal:
            with pytest.raises(SessionNotFoundError):
                await journal.checkpoints(new_session())

    # -- a restore's read: the checkpoints and the tail together --------------------------

    async def test_read_checkpointed_gives_the_chain_and_the_records_after_it(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, [*drafts("x", 2), checkpoint(0)], expected_seq=0)
            await journal.append(lease, [*drafts("y", 2), checkpoint(1, 3)], expected_seq=3)
            await journal.append(lease, drafts("z", 3), expected_seq=6)
            records = await read_all(journal, session)
            got = await journal.read_checkpointed(session)
            assert got.checkpoints == await journal.checkpoints(session)
            assert [r.seq for r in got.checkpoints] == [3, 6]
            assert got.tail == records[6:]
            assert (got.head, got.after, got.complete) == (9, 6, True)

    async def test_read_checkpointed_without_checkpoints_reads_from_seq_1(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            assert await journal.read_checkpointed(session) == Checkpointed(
                checkpoints=[], tail=[], head=0
            )
            written = await journal.append(lease, drafts("x", 3), expected_seq=0)
            got = await journal.read_checkpointed(session)
            assert (got.checkpoints, got.tail, got.head, got.complete) == ([], written, 3, True)

    async def test_read_checkpointed_at_its_last_checkpoint_has_no_tail(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            written = await journal.append(lease, [*drafts("x", 2), checkpoint(0)], expected_seq=0)
            got = await journal.read_checkpointed(session)
            assert (got.checkpoints, got.tail, got.head, got.complete) == (
                written[2:],
                [],
                3,
                True,
            )

    async def test_read_checkpointed_holds_at_most_tail_limit_records(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, [checkpoint(0), *drafts("x", 5)], expected_seq=0)
            records = await read_all(journal, session)
            got = await journal.read_checkpointed(session, tail_limit=2)
            assert got.tail == records[1:3]
            assert (got.head, got.complete) == (6, False)
            # The rest follows with ``read``, on the same chain.
            assert await read_all(journal, session, after=got.tail[-1].seq) == records[3:]
            assert (await journal.read_checkpointed(session, tail_limit=5)).complete

    @pytest.mark.parametrize("limit", [0, -1, True, 2.0, "3"])
    async def test_read_checkpointed_refuses_a_tail_limit_that_is_no_count(
        self, backend: Backend, limit: Any
    ) -> None:
        async with backend.open() as journal:
            with pytest.raises(ValueError, match="tail_limit must be a positive number"):
                await journal.read_checkpointed(new_session(), tail_limit=limit)

    async def test_read_checkpointed_reports_a_damaged_tail_record_with_its_seq(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, [checkpoint(0), *drafts("x", 3)], expected_seq=0)
            await backend.corrupt(journal, session, 3, encode_event(notice(99)))
            with pytest.raises(JournalCorruptError) as caught:
                await journal.read_checkpointed(session)
            assert (caught.value.session, caught.value.seq) == (session, 3)

    async def test_read_checkpointed_refuses_a_checkpoint_off_the_chain(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(
                lease, [*drafts("x", 2), checkpoint(0), *drafts("y", 1)], expected_seq=0
            )
            forged = SessionCheckpoint(previous=0, loops=())
            await backend.corrupt(journal, session, 3, encode_event(forged))
            with pytest.raises(JournalCorruptError) as caught:
                await journal.read_checkpointed(session)
            assert (caught.value.session, caught.value.seq) == (session, 3)

    async def test_read_checkpointed_of_a_missing_or_closed_journal_session(
        self, backend: Backend
    ) -> None:
        async with backend.open() as journal:
            with pytest.raises(SessionNotFoundError):
                await journal.read_checkpointed(new_session())
            session = new_session()
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 1), expected_seq=0)
            await journal.aclose()
            with pytest.raises(JournalClosedError):
                await journal.read_checkpointed(session)

    # -- following -----------------------------------------------------------------------

    async def test_tail_follows_later_appends(
        self, backend: Backend, autojump_clock: trio.testing.MockClock
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 2), expected_seq=0)
            send, receive_channel = trio.open_memory_channel[Record](100)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_collect, journal, session, 1, send)
                first = await receive(receive_channel, 1)
                assert [r.seq for r in first] == [2]
                await journal.append(lease, drafts("y", 2), expected_seq=2)
                await journal.append(lease, drafts("z", 1), expected_seq=4)
                later = await receive(receive_channel, 3)
                assert [(r.seq, r.id) for r in later] == [(3, "y-0"), (4, "y-1"), (5, "z-0")]
                assert later == (await read_all(journal, session))[2:]
                nursery.cancel_scope.cancel()

    async def test_tail_is_woken_by_appends_without_waiting_for_time(
        self, backend: Backend, mock_clock: trio.testing.MockClock
    ) -> None:
        # The clock is frozen: a backend that only polled would never deliver.
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            send, receive_channel = trio.open_memory_channel[Record](100)
            with real_time_guard(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_collect, journal, session, 0, send)
                    await trio.testing.wait_all_tasks_blocked()
                    for i in range(3):
                        await journal.append(lease, drafts(f"w{i}", 1), expected_seq=i)
                        (record,) = await receive(receive_channel, 1)
                        assert record.seq == i + 1
                    nursery.cancel_scope.cancel()

    async def test_tail_of_an_empty_session_waits_for_the_first_record(
        self, backend: Backend, autojump_clock: trio.testing.MockClock
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            send, receive_channel = trio.open_memory_channel[Record](100)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_collect, journal, session, 0, send)
                await trio.sleep(5)
                assert receive_channel.statistics().current_buffer_used == 0
                written = await journal.append(lease, drafts("x", 2), expected_seq=0)
                assert await receive(receive_channel, 2) == written
                nursery.cancel_scope.cancel()

    async def test_closing_ends_tails(
        self, backend: Backend, mock_clock: trio.testing.MockClock
    ) -> None:
        session = new_session()
        ended = trio.Event()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 1), expected_seq=0)
            seen: list[Record] = []

            async def follow() -> None:
                async for record in journal.tail(session):
                    seen.append(record)
                ended.set()

            with real_time_guard(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(follow)
                    await trio.testing.wait_all_tasks_blocked()
                    await journal.aclose()
                    await ended.wait()
            assert [r.seq for r in seen] in ([], [1])

    # -- concurrency -------------------------------------------------------------------

    @pytest.mark.parametrize("rounds", [1, 2, 3, 6])
    async def test_append_is_atomic_under_cancellation(self, backend: Backend, rounds: int) -> None:
        """A cancelled append either wrote nothing (it raised Cancelled) or
        finished and returned; it never wrote without telling its caller."""
        sessions = [new_session() for _ in range(12)]
        async with backend.open() as journal:
            leases = {s: await journal.open_session(s) for s in sessions}
            returned: dict[str, bool] = {}
            scopes: list[trio.CancelScope] = []

            async def appender(session: str) -> None:
                with trio.CancelScope() as scope:
                    scopes.append(scope)
                    await journal.append(
                        leases[session],
                        [Draft(id=f"{session}-a", loop="main", event=notice(1))],
                        expected_seq=0,
                    )
                    returned[session] = True
                returned.setdefault(session, False)

            async with trio.open_nursery() as nursery:
                for s in sessions:
                    nursery.start_soon(appender, s)
                for _ in range(rounds):
                    await trio.lowlevel.checkpoint()
                for scope in scopes[::2]:  # cancel every other appender, mid-flight
                    scope.cancel()
            for s in sessions:
                stored = [r.id async for r in journal.read(s)]
                assert stored == ([f"{s}-a"] if returned[s] else []), (s, returned[s])

    async def test_concurrent_appenders_on_many_sessions(self, backend: Backend) -> None:
        sessions = [new_session() for _ in range(6)]
        writers_per_session, records_per_writer = 5, 4
        async with backend.open() as journal:
            leases = {s: await journal.open_session(s) for s in sessions}

            async def writer(session: str, w: int) -> None:
                for i in range(records_per_writer):
                    draft = Draft(id=f"w{w}-{i}", loop=f"loop-{w}", event=notice(i))
                    while True:
                        head = await journal.head(session)
                        try:
                            await journal.append(leases[session], [draft], expected_seq=head)
                            break
                        except ConflictError:
                            continue

            async with trio.open_nursery() as nursery:
                for s in sessions:
                    for w in range(writers_per_session):
                        nursery.start_soon(writer, s, w)
            total = writers_per_session * records_per_writer
            for s in sessions:
                records = await read_all(journal, s)
                assert [r.seq for r in records] == list(range(1, total + 1))
                assert sorted(r.id for r in records) == sorted(
                    f"w{w}-{i}"
                    for w in range(writers_per_session)
                    for i in range(records_per_writer)
                )
                for w in range(writers_per_session):
                    mine = [r.event for r in records if r.loop == f"loop-{w}"]
                    assert mine == [notice(i) for i in range(records_per_writer)]

    async def test_a_failing_append_does_not_fail_the_others(self, backend: Backend) -> None:
        # Started together, so a grouping backend commits them together.
        good = [new_session() for _ in range(5)]
        stale, fenced, duplicate = new_session(), new_session(), new_session()
        async with backend.open() as journal:
            leases = {s: await journal.open_session(s) for s in [*good, stale, fenced, duplicate]}
            await journal.append(leases[stale], drafts("s", 1), expected_seq=0)
            old_lease = leases[fenced]
            await journal.open_session(fenced)
            await journal.append(leases[duplicate], drafts("d", 1), expected_seq=0)
            outcomes: dict[str, list[Record] | Exception] = {}

            async def attempt(session: str, lease: SessionLease, batch: Sequence[Draft]) -> None:
                try:
                    outcomes[session] = await journal.append(lease, batch, expected_seq=0)
                except Exception as exc:
                    outcomes[session] = exc

            async with trio.open_nursery() as nursery:
                for s in good:
                    nursery.start_soon(attempt, s, leases[s], drafts("g", 2))
                nursery.start_soon(attempt, stale, leases[stale], drafts("late", 1))
                nursery.start_soon(attempt, fenced, old_lease, drafts("f", 1))
                other = [Draft(id="d-0", loop="main", event=notice(0, "other"))]
                nursery.start_soon(attempt, duplicate, leases[duplicate], other)
            assert isinstance(outcomes[stale], ConflictError)
            assert isinstance(outcomes[fenced], FencedError)
            assert isinstance(outcomes[duplicate], DuplicateEventError)
            for s in good:
                result = outcomes[s]
                assert isinstance(result, list)
                assert await read_all(journal, s) == result
            assert await journal.head(stale) == 1
            assert await journal.head(fenced) == 0
            assert await journal.head(duplicate) == 1

    async def test_racing_identical_appends_store_once(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            results: list[list[Record]] = []

            async def attempt() -> None:
                results.append(await journal.append(lease, drafts("x", 3), expected_seq=0))

            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(attempt)
            assert len(results) == 4
            assert all(r == results[0] for r in results)
            assert await read_all(journal, session) == results[0]

    # -- listing, lifecycle, durability -------------------------------------------------

    async def test_sessions_lists_heads_and_incarnations(self, backend: Backend) -> None:
        a, b, c = new_session(), new_session(), new_session()
        async with backend.open() as journal:
            lease_a = await journal.open_session(a)
            await journal.open_session(b)
            lease_b = await journal.open_session(b)
            await journal.open_session(c)
            await journal.append(lease_a, drafts("x", 3), expected_seq=0)
            await journal.append(lease_b, drafts("y", 1), expected_seq=0)
            infos = {info.session: info for info in await journal.sessions()}
            assert {a, b, c} <= set(infos)
            assert (infos[a].head, infos[a].incarnation) == (3, 1)
            assert (infos[b].head, infos[b].incarnation) == (1, 2)
            assert (infos[c].head, infos[c].incarnation) == (0, 1)
            for s in (a, b, c):
                assert infos[s].updated_at >= infos[s].created_at > 0

    async def test_closed_journal_refuses_everything(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.open_session(session)
            await journal.append(lease, drafts("x", 1), expected_seq=0)
            await journal.aclose()
            await journal.aclose()  # idempotent
            with pytest.raises(JournalClosedError):
                await journal.open_session(session)
            with pytest.raises(JournalClosedError):
                await journal.append(lease, drafts("y", 1), expected_seq=1)
            with pytest.raises(JournalClosedError):
                await journal.head(session)
            with pytest.raises(JournalClosedError):
                await journal.sessions()
            with pytest.raises(JournalClosedError):
                await journal.checkpoints(session)
            with pytest.raises(JournalClosedError):
                await read_all(journal, session)
            with pytest.raises(JournalClosedError):
                async for _ in journal.tail(session):
                    pass

    @pytest.fixture
    def persistent_backend(self, backend: Backend) -> Backend:
        # Skipped here, not inside the async test: a skip raised within a trio
        # run reaches the report without its reason.
        if not backend.persistent:
            pytest.skip(f"{type(backend).__name__} keeps nothing after it is closed")
        return backend

    async def test_durable_across_reopen(self, persistent_backend: Backend) -> None:
        backend = persistent_backend
        session = new_session()
        async with backend.open() as journal:
            old = await journal.open_session(session)
            written = await journal.append(old, drafts("x", 3), expected_seq=0)
        async with backend.open() as journal:
            assert await read_all(journal, session) == written
            assert await journal.head(session) == 3
            info = {i.session: i for i in await journal.sessions()}[session]
            assert (info.head, info.incarnation) == (3, old.incarnation)
            # Retrying the last append after a restart is still idempotent ...
            assert await journal.append(old, drafts("x", 3), expected_seq=0) == written
            new = await journal.open_session(session)
            assert (new.incarnation, new.head) == (old.incarnation + 1, 3)
            # ... and the incarnation survived: the old writer is fenced.
            with pytest.raises(FencedError):
                await journal.append(old, drafts("y", 1), expected_seq=3)
            more = await journal.append(new, [checkpoint(0, 0), *drafts("y", 1)], expected_seq=3)
        async with backend.open() as journal:
            assert await read_all(journal, session) == written + more
            assert await journal.checkpoints(session) == more[:1]


# -- leases and the inbox ------------------------------------------------------------------
#
# Written as a second class body and mixed into JournalContract below, so every
# backend runs them: one contract, one suite.


def submit(text: str) -> Submit:
    return Submit(message=Message(role="user", blocks=(Text(text=text),)))


def submit_of_size(size: int) -> Submit:
    """A submit whose stored command is exactly ``size`` bytes (``size`` above 64 KiB)."""
    probe = 100_000
    overhead = len(encode_command(submit("x" * probe))) - probe
    command = submit("x" * (size - overhead))
    assert len(encode_command(command, limit=size)) == size
    return command


_COMMANDS = strategy_for(mi.type_info(InboxCommand))
"""Any inbox command a caller may build, blank input and odd text included."""

_NOT_COMMANDS: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    _TEXT,
    _INT,
    st.builds(Create, definition=_INT),
    st.builds(
        Submit,
        message=st.builds(
            Message,
            role=st.just("user"),
            blocks=st.lists(_TEXT | st.builds(Text, text=_TEXT), min_size=1, max_size=3).map(tuple),
        ),
    ),
)
"""What a caller may pass by mistake: no command, or one whose fields the
journal could not read back (a plain string among a message's blocks)."""


def said_something(command: InboxCommand) -> bool:
    """Input the model API would take: some block, and no blank text."""
    if isinstance(command, Steer):
        return bool(command.text.strip())
    if isinstance(command, Submit):
        blocks = command.message.blocks
        return bool(blocks) and all(b.text.strip() for b in blocks if isinstance(b, Text))
    return True


class _LeaseAndInboxContract:
    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(data=st.data())
    async def test_any_put_is_stored_once_or_refused_by_name_writing_nothing(
        self, backend: Backend, data: st.DataObject
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            await journal.put(session, "first", Create(definition="agent"), definition="agent")
            for i in range(data.draw(st.integers(min_value=1, max_value=4), label="puts")):
                command = data.draw(_COMMANDS | _NOT_COMMANDS, label=f"command {i}")
                key = data.draw(st.sampled_from(["first", "k1", "\udcff"]) | _TEXT, label="key")
                where = data.draw(st.sampled_from([session, new_session()]), label="session")
                definition = data.draw(st.sampled_from([None, "agent"]), label="definition")
                before = await journal.sessions(), await journal.inbox(session)
                try:
                    entry = await journal.put(where, key, command, definition=definition)
                except (JournalError, ValueError) as exc:
                    assert str(exc)  # says what was refused
                    assert (await journal.sessions(), await journal.inbox(session)) == before
                    continue
                assert (entry.session, entry.key, entry.command) == (where, key, command)
                assert said_something(command), "input with nothing to say was stored"
                # Once: the same put again is the same entry.
                again = await journal.put(where, key, command, definition=definition)
                assert again.number == entry.number

    async def test_acquire_takes_a_new_incarnation_and_fences_the_last(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            with pytest.raises(SessionNotFoundError):
                await journal.acquire(session, "host-a", ttl=60)
            first = await journal.open_session(session)
            await journal.append(first, drafts("x", 1), expected_seq=0)
            lease = await journal.acquire(session, "host-a", ttl=60)
            assert (lease.owner, lease.head) == ("host-a", 1)
            assert lease.incarnation == first.incarnation + 1
            assert lease.expires_at > 0
            with pytest.raises(FencedError):
                await journal.append(first, drafts("y", 1), expected_seq=1)
            await journal.append(lease, drafts("y", 1), expected_seq=1)
            info = {i.session: i for i in await journal.sessions()}[session]
            assert (info.owner, info.expires_at) == ("host-a", lease.expires_at)
            assert info.live
            # Live is judged by the journal's own clock (the server's, on PostgreSQL).
            await backend.expire(journal, session)
            info = {i.session: i for i in await journal.sessions()}[session]
            assert (info.owner, info.live) == ("host-a", False)

    async def test_a_live_lease_is_held_against_other_owners(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.acquire(session, "host-a", ttl=60, create=True)
            with pytest.raises(LeaseHeldError) as caught:
                await journal.acquire(session, "host-b", ttl=60)
            assert (caught.value.session, caught.value.owner) == (session, "host-a")
            assert "loopruntime submit" in str(caught.value)
            with pytest.raises(LeaseHeldError):
                await journal.open_session(session)
            # Refused takes changed nothing: the holder still writes.
            await journal.append(lease, drafts("x", 1), expected_seq=0)
            # Its own owner may take it again (a restarted host): a new incarnation.
            again = await journal.acquire(session, "host-a", ttl=60)
            assert again.incarnation == lease.incarnation + 1
            with pytest.raises(FencedError):
                await journal.append(lease, drafts("y", 1), expected_seq=1)

    async def test_an_expired_lease_is_taken_over(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            a = await journal.acquire(session, "host-a", ttl=60, create=True)
            await backend.expire(journal, session)
            b = await journal.acquire(session, "host-b", ttl=60)
            assert (b.owner, b.incarnation) == ("host-b", a.incarnation + 1)
            # The former owner is fenced at its next append and renewal.
            with pytest.raises(FencedError):
                await journal.append(a, drafts("x", 1), expected_seq=0)
            with pytest.raises(FencedError):
                await journal.renew(a, ttl=60)

    async def test_renewal_moves_the_expiry_of_a_current_lease(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.acquire(session, "host-a", ttl=1, create=True)
            renewed = await journal.renew(lease, ttl=3600)
            assert renewed.expires_at > lease.expires_at
            assert (renewed.incarnation, renewed.owner) == (lease.incarnation, "host-a")
            # Expired but not taken: still current, so it may be renewed.
            await backend.expire(journal, session)
            assert (await journal.renew(lease, ttl=60)).incarnation == lease.incarnation
            with pytest.raises(ValueError, match="ttl"):
                await journal.renew(lease, ttl=0)
            with pytest.raises(LeaseHeldError):
                await journal.acquire(session, "host-b", ttl=60)

    async def test_renew_all_renews_the_current_and_names_the_lost(self, backend: Backend) -> None:
        kept, taken, released, missing = (new_session() for _ in range(4))
        async with backend.open() as journal:
            a = await journal.acquire(kept, "host-a", ttl=1, create=True)
            b = await journal.acquire(taken, "host-a", ttl=60, create=True)
            c = await journal.acquire(released, "host-a", ttl=60, create=True)
            await backend.expire(journal, taken)
            await journal.acquire(taken, "host-b", ttl=60)
            await journal.release(c)
            gone = SessionLease(session=missing, incarnation=1, head=0, owner="host-a")
            renewed = await journal.renew_all([a, b, gone, c], ttl=3600)
            assert [r is None for r in renewed] == [False, True, True, True]
            first = renewed[0]
            assert first is not None
            assert (first.session, first.incarnation, first.owner) == (
                kept,
                a.incarnation,
                "host-a",
            )
            assert first.expires_at > a.expires_at
            # The one lost fails alone: what was renewed holds, the lost stay as they were.
            with pytest.raises(LeaseHeldError):
                await journal.acquire(kept, "host-b", ttl=60)
            await journal.append(a, drafts("x", 1), expected_seq=0)
            info = {i.session: i for i in await journal.sessions()}
            assert info[kept].expires_at == first.expires_at
            assert info[taken].owner == "host-b" and info[released].owner is None
            assert await journal.renew_all([], ttl=60) == []
            with pytest.raises(ValueError, match="ttl"):
                await journal.renew_all([a], ttl=0)

    async def test_acquire_all_takes_each_and_names_each_refusal(self, backend: Backend) -> None:
        free, expired, held, missing = (new_session() for _ in range(4))
        async with backend.open() as journal:
            f = await journal.acquire(free, "host-b", ttl=60, create=True)
            await journal.append(f, drafts("f", 2), expected_seq=0)
            await journal.release(f)
            e = await journal.acquire(expired, "host-b", ttl=60, create=True)
            await backend.expire(journal, expired)
            h = await journal.acquire(held, "host-b", ttl=60, create=True)
            taken = await journal.acquire_all([free, expired, held, missing], "host-a", ttl=60)
            first, second, refused, absent = taken
            assert isinstance(first, SessionLease) and isinstance(second, SessionLease)
            assert (first.session, first.owner, first.head) == (free, "host-a", 2)
            assert (second.session, second.owner) == (expired, "host-a")
            assert second.incarnation == e.incarnation + 1
            assert isinstance(refused, LeaseHeldError)
            assert (refused.session, refused.owner) == (held, "host-b")
            assert isinstance(absent, SessionNotFoundError) and absent.session == missing
            # Each take fences its former holder; the refused one's holder still writes.
            with pytest.raises(FencedError):
                await journal.append(e, drafts("e", 1), expected_seq=0)
            await journal.append(second, drafts("e", 1), expected_seq=0)
            await journal.append(first, drafts("g", 1), expected_seq=2)
            await journal.append(h, drafts("h", 1), expected_seq=0)
            info = {i.session: i for i in await journal.sessions()}
            assert (info[free].owner, info[free].expires_at) == ("host-a", first.expires_at)
            assert info[held].owner == "host-b" and missing not in info
            # Taken leases are held against other owners and renewed like any other.
            with pytest.raises(LeaseHeldError):
                await journal.acquire(expired, "host-b", ttl=60)
            assert None not in await journal.renew_all([first, second], ttl=60)

    async def test_acquire_all_checks_its_arguments_first(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            lease = await journal.acquire(session, "host-b", ttl=60, create=True)
            await backend.expire(journal, session)
            assert await journal.acquire_all([], "host-a", ttl=60) == []
            with pytest.raises(ValueError, match="ttl"):
                await journal.acquire_all([session], "host-a", ttl=0)
            with pytest.raises(ValueError, match="session id"):
                await journal.acquire_all([session, "bad\udc80"], "host-a", ttl=60)
            # Nothing was taken: the expired holder renews its lease still.
            assert (await journal.renew(lease, ttl=60)).incarnation == lease.incarnation
            # A session named twice is taken twice, in order: the later take fences the first.
            await backend.expire(journal, session)
            again = await journal.acquire(session, "host-a", ttl=60)
            one, two = await journal.acquire_all([session, session], "host-a", ttl=60)
            assert isinstance(one, SessionLease) and isinstance(two, SessionLease)
            assert (one.incarnation, two.incarnation) == (
                again.incarnation + 1,
                again.incarnation + 2,
            )
            with pytest.raises(FencedError):
                await journal.append(one, drafts("x", 1), expected_seq=0)
            await journal.append(two, drafts("x", 1), expected_seq=0)

    async def test_inbox_wakeups_say_first_that_they_watch(self, backend: Backend) -> None:
        async with backend.open() as journal:
            wakeups = journal.inbox_wakeups()
            try:
                assert await wakeups.__anext__() == Wakeup(session="")
            finally:
                await wakeups.aclose()  # type: ignore[attr-defined]

    async def test_a_puts_wakeup_names_the_live_holder(self, backend: Backend) -> None:
        if not getattr(backend, "wakeups", True):
            pytest.skip("no wake-ups between processes: its hosts poll")
        held, expired, free = new_session(), new_session(), new_session()
        async with backend.open() as journal:
            for session in (held, expired, free):
                await journal.put(session, "c", Create(definition="agent"), definition="agent")
            lease = await journal.acquire(held, "host-a", ttl=60)
            await journal.acquire(expired, "host-b", ttl=60)
            await backend.expire(journal, expired)
            wakeups = journal.inbox_wakeups()
            try:
                assert await wakeups.__anext__() == Wakeup(session="")
                for session in (held, expired, free):
                    await journal.put(session, "s", submit("hi"))
                await journal.release(lease, handoff=True)
                ours = {held, expired, free}
                seen: list[Wakeup] = []
                while len(seen) < 4:
                    wakeup = await wakeups.__anext__()
                    if wakeup.session in ours:
                        seen.append(wakeup)
            finally:
                await wakeups.aclose()  # type: ignore[attr-defined]
            # Only a live lease is named (by the journal's clock); a hand-over names none.
            assert seen == [
                Wakeup(session=held, holder="host-a"),
                Wakeup(session=expired),
                Wakeup(session=free),
                Wakeup(session=held),
            ]

    async def test_a_host_id_is_held_by_one_live_registration(self, backend: Backend) -> None:
        host = new_session()
        async with backend.open() as journal:
            first = await journal.register_host(host, "token-1", ttl=60, definitions=["agent"])
            with pytest.raises(HostIdInUseError) as caught:
                await journal.register_host(host, "token-2", ttl=60, definitions=["other"])
            assert caught.value.host == host and "another id" in str(caught.value)
            # Refused, it changed nothing; the holder renews.
            assert await journal.register_host(host, "token-1", ttl=60) >= first
            [info] = [h for h in await journal.hosts() if h.host == host]
            assert (info.definitions, info.live) == ((), True)
            await journal.register_host(host, "token-1", ttl=60, definitions=["agent", "b"])
            [info] = [h for h in await journal.hosts() if h.host == host]
            assert info.definitions == ("agent", "b")
            # Another token cannot remove it; its own can.
            await journal.deregister_host(host, "token-2")
            assert host in {h.host for h in await journal.hosts()}
            await journal.deregister_host(host, "token-1")
            assert host not in {h.host for h in await journal.hosts()}
            # An expired registration is free for another token (a microsecond passes).
            await journal.register_host(host, "token-1", ttl=1e-6)
            await journal.register_host(host, "token-2", ttl=60)
            [info] = [h for h in await journal.hosts() if h.host == host]
            assert info.live
            with pytest.raises(ValueError, match="ttl"):
                await journal.register_host(host, "token-2", ttl=0)

    async def test_hosts_say_which_definitions_a_live_host_serves(self, backend: Backend) -> None:
        """What a session's status reads to say "no live host serves definition
        ...": every registration, its definitions in order, and whether it is live
        (an expired one stays listed, not live, until it is replaced or removed)."""
        live, gone = new_session(), new_session()
        async with backend.open() as journal:
            await journal.register_host(live, "token", ttl=60, definitions=["echo", "asker"])
            await journal.register_host(gone, "token", ttl=1e-6, definitions=["nosuch"])
            listed = {h.host: h for h in await journal.hosts()}
            assert (listed[live].definitions, listed[live].live) == (("echo", "asker"), True)
            assert (listed[gone].definitions, listed[gone].live) == (("nosuch",), False)
            assert listed[gone].expires_at <= listed[live].expires_at
            await journal.deregister_host(live, "token")
            await journal.deregister_host(gone, "token")

    async def test_release_fences_and_frees_at_once(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            a = await journal.acquire(session, "host-a", ttl=3600, create=True)
            await journal.release(a)
            with pytest.raises(FencedError):
                await journal.append(a, drafts("x", 1), expected_seq=0)
            with pytest.raises(FencedError):
                await journal.renew(a, ttl=60)
            with pytest.raises(FencedError):
                await journal.release(a)
            info = {i.session: i for i in await journal.sessions()}[session]
            assert info.owner is None
            assert await journal.claimable(definitions=[]) == []
            b = await journal.acquire(session, "host-b", ttl=60)
            # A hand-over names the owner on an expired lease: claimable now.
            await journal.release(b, handoff=True, definition="agent")
            claims = [
                c for c in await journal.claimable(definitions=["agent"]) if c.session == session
            ]
            assert [(c.owner, c.pending, c.definition) for c in claims] == [("host-b", 0, "agent")]
            assert [
                c for c in await journal.claimable(definitions=["other"]) if c.session == session
            ] == []

    async def test_put_numbers_entries_and_is_idempotent_by_key(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            with pytest.raises(SessionNotFoundError):
                await journal.put(session, "k0", submit("hi"))
            created = await journal.put(
                session, "k1", Create(definition="agent"), definition="agent"
            )
            assert (created.number, created.key, created.consumed) == (1, "k1", False)
            assert created.command == Create(definition="agent")
            assert await journal.head(session) == 0
            second = await journal.put(session, "k2", submit("hello"))
            assert second.number == 2
            # The same key with the same command: the stored entry, nothing new.
            assert await journal.put(session, "k2", submit("hello")) == second
            with pytest.raises(InboxKeyError) as caught:
                await journal.put(session, "k2", submit("other"))
            assert (caught.value.key, caught.value.number) == ("k2", 2)
            assert [e.number for e in await journal.inbox(session)] == [1, 2]
            assert [e.number for e in await journal.inbox(session, after=1)] == [2]
            assert await journal.entry(session, "k2") == second
            assert await journal.entry(session, "nope") is None
            info = {i.session: i for i in await journal.sessions()}[session]
            assert (info.pending, info.definition, info.owner) == (2, "agent", None)

    async def test_a_command_that_cannot_be_stored_is_refused_at_put(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            await journal.put(session, "k1", Create(definition="agent"), definition="agent")
            with pytest.raises(InvalidEventError):
                await journal.put(session, "k2", Steer(text=3))  # type: ignore[arg-type]
            with pytest.raises(InvalidEventError):
                await journal.put(session, "k3", "submit hi")  # type: ignore[arg-type]
            assert [e.number for e in await journal.inbox(session)] == [1]

    async def test_an_entry_over_the_limit_is_refused_before_it_is_stored(
        self, backend: Backend
    ) -> None:
        session = new_session()
        async with backend.open() as journal:
            await journal.put(session, "k1", Create(definition="agent"), definition="agent")
            at_limit = submit_of_size(MAX_ENTRY_BYTES)
            accepted = await journal.put(session, "k2", at_limit)
            assert accepted.command == at_limit
            before = (await journal.head(session), await journal.inbox(session))
            with pytest.raises(InboxEntryTooLargeError) as caught:
                await journal.put(session, "k3", submit_of_size(MAX_ENTRY_BYTES + 1))
            refused = caught.value
            assert (refused.size, refused.limit, refused.what) == (
                MAX_ENTRY_BYTES + 1,
                MAX_ENTRY_BYTES,
                "submit",
            )
            assert f"{MAX_ENTRY_BYTES + 1:,} bytes" in str(refused)
            assert (await journal.head(session), await journal.inbox(session)) == before
            assert await journal.entry(session, "k3") is None

    async def test_claimable_lists_waiting_work_without_a_live_owner(
        self, backend: Backend
    ) -> None:
        waiting, held, other = new_session(), new_session(), new_session()
        async with backend.open() as journal:
            await journal.put(waiting, "k", Create(definition="agent"), definition="agent")
            await journal.put(held, "k", Create(definition="agent"), definition="agent")
            await journal.put(other, "k", Create(definition="other"), definition="other")
            lease = await journal.acquire(held, "host-a", ttl=3600)

            async def claims(owner: str | None = None) -> dict[str, str | None]:
                found = await journal.claimable(definitions=["agent"], owner=owner)
                return {c.session: c.owner for c in found if c.session in (waiting, held, other)}

            assert await claims() == {waiting: None}
            # A host learns of its own sessions' new entries in the same query.
            assert await claims("host-a") == {waiting: None, held: "host-a"}
            await backend.expire(journal, held)
            assert await claims() == {waiting: None, held: "host-a"}
            await journal.append(
                lease, [], expected_seq=0, consumes=[Consumed(entry=1, outcome=InboxOutcome())]
            )
            # Expired with nothing waiting: still claimable (a host that went away).
            assert await claims() == {waiting: None, held: "host-a"}

    async def test_consuming_is_atomic_with_the_append(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            await journal.put(session, "k1", Create(definition="agent"), definition="agent")
            await journal.put(session, "k2", submit("hi"))
            lease = await journal.acquire(session, "host-a", ttl=3600)
            done = InboxOutcome(record="x-0", value="in_1")
            records = await journal.append(
                lease, drafts("x", 2), expected_seq=0, consumes=[Consumed(entry=1, outcome=done)]
            )
            entry = await journal.entry(session, "k1")
            assert entry is not None and entry.consumed and entry.outcome == done
            assert entry.consumed_at is not None and entry.consumed_at > 0
            assert [e.number for e in await journal.inbox(session)] == [2]
            # A retry of that append (a lost reply) returns the records and leaves the entry.
            again = await journal.append(
                lease, drafts("x", 2), expected_seq=0, consumes=[Consumed(entry=1, outcome=done)]
            )
            assert again == records
            # Applying it again, with records of its own, is refused whole.
            with pytest.raises(InboxConsumedError) as caught:
                await journal.append(
                    lease,
                    drafts("y", 1),
                    expected_seq=2,
                    consumes=[Consumed(entry=1, outcome=InboxOutcome(record="y-0"))],
                )
            assert caught.value.number == 1
            # A refused append consumes nothing: a conflict, a missing entry, fencing.
            with pytest.raises(ConflictError):
                await journal.append(
                    lease,
                    drafts("z", 1),
                    expected_seq=1,
                    consumes=[Consumed(entry=2, outcome=InboxOutcome())],
                )
            with pytest.raises(InboxError):
                await journal.append(
                    lease,
                    drafts("z", 1),
                    expected_seq=2,
                    consumes=[
                        Consumed(entry=2, outcome=InboxOutcome()),
                        Consumed(entry=9, outcome=InboxOutcome()),
                    ],
                )
            newer = await journal.acquire(session, "host-a", ttl=3600)
            with pytest.raises(FencedError):
                await journal.append(
                    lease,
                    drafts("z", 1),
                    expected_seq=2,
                    consumes=[Consumed(entry=2, outcome=InboxOutcome())],
                )
            assert await journal.head(session) == 2
            assert [e.number for e in await journal.inbox(session)] == [2]
            # An append of no records consumes alone (a command refused).
            refused = InboxOutcome(error="GateMismatchError", message="no gate")
            assert (
                await journal.append(
                    newer, [], expected_seq=2, consumes=[Consumed(entry=2, outcome=refused)]
                )
                == []
            )
            assert await journal.inbox(session) == []
            entry = await journal.entry(session, "k2")
            assert entry is not None and entry.outcome == refused

    async def test_a_damaged_entry_is_reported_not_raised(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            await journal.put(session, "k1", Create(definition="agent"), definition="agent")
            await journal.put(session, "k2", submit("hi"))
            await backend.damage_entry(journal, session, 1, b"\xc1 not msgpack")
            entries = await journal.inbox(session)
            assert [e.number for e in entries] == [1, 2]
            assert entries[0].command is None and entries[0].damage
            assert entries[1].command == submit("hi")

    async def test_inbox_of_a_missing_session(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            with pytest.raises(SessionNotFoundError):
                await journal.inbox(session)
            with pytest.raises(SessionNotFoundError):
                await journal.entry(session, "k")


# -- writers: who appended each record ------------------------------------------------


class _WriterContract:
    async def test_each_append_is_attributed_to_its_lease(self, backend: Backend) -> None:
        session = new_session()
        async with backend.open() as journal:
            opened = await journal.open_session(session)
            assert await journal.writers(session) == []
            first = await journal.append(opened, drafts("a", 2), expected_seq=0)
            await journal.append(opened, drafts("b", 1), expected_seq=2)
            # A retried append stores nothing, so it starts no span.
            assert await journal.append(opened, drafts("a", 2), expected_seq=0) == first
            held = await journal.acquire(session, "host-a", ttl=60)
            assert await journal.writers(session) == [
                WriterSpan(first_seq=1, incarnation=opened.incarnation)
            ]
            await journal.append(held, drafts("c", 2), expected_seq=3)
            with pytest.raises(FencedError):
                await journal.append(opened, drafts("d", 1), expected_seq=5)
            with pytest.raises(ConflictError):
                await journal.append(held, drafts("e", 1), expected_seq=1)
            await journal.release(held)
            other = await journal.acquire(session, "host-b", ttl=60)
            await journal.append(other, drafts("f", 1), expected_seq=5)
            assert await journal.writers(session) == [
                WriterSpan(first_seq=1, incarnation=opened.incarnation),
                WriterSpan(first_seq=4, incarnation=held.incarnation, owner="host-a"),
                WriterSpan(first_seq=6, incarnation=other.incarnation, owner="host-b"),
            ]
            with pytest.raises(SessionNotFoundError):
                await journal.writers(new_session())

    async def test_appends_committed_together_keep_their_own_writers(
        self, backend: Backend
    ) -> None:
        sessions = [new_session() for _ in range(6)]
        async with backend.open() as journal:
            leases = [
                await journal.acquire(s, f"host-{i % 2}", ttl=60, create=True)
                for i, s in enumerate(sessions)
            ]

            async def append(lease: SessionLease, stale: bool) -> None:
                with contextlib.suppress(ConflictError):
                    await journal.append(lease, drafts("x", 2), expected_seq=7 if stale else 0)

            async with trio.open_nursery() as nursery:
                for i, lease in enumerate(leases):
                    nursery.start_soon(append, lease, i == 5)
            for i, (s, lease) in enumerate(zip(sessions, leases, strict=True)):
                expected = (
                    []
                    if i == 5
                    else [
                        WriterSpan(
                            first_seq=1, incarnation=lease.incarnation, owner=f"host-{i % 2}"
                        )
                    ]
                )
                assert await journal.writers(s) == expected

    async def test_writers_survive_reopen(self, persistent_backend: Backend) -> None:
        session = new_session()
        async with persistent_backend.open() as journal:
            lease = await journal.acquire(session, "host-a", ttl=60, create=True)
            await journal.append(lease, drafts("x", 1), expected_seq=0)
        async with persistent_backend.open() as journal:
            again = await journal.acquire(session, "host-a", ttl=60)
            await journal.append(again, drafts("y", 1), expected_seq=1)
            assert await journal.writers(session) == [
                WriterSpan(first_seq=1, incarnation=lease.incarnation, owner="host-a"),
                WriterSpan(first_seq=2, incarnation=again.incarnation, owner="host-a"),
            ]


class JournalContract(_RecordContract, _LeaseAndInboxContract, _WriterContract):
    """The whole contract: records, leases and the inbox, and who wrote what."""
