"""What only the PostgreSQL backend has to prove, against a real server.

Fencing and following across real OS processes, a connection cut in the
middle of an append (by a TCP proxy and by ``pg_terminate_backend``), group
commits that isolate a failing append and index only the checkpoints that
committed, group commits that apply inbox entries in the round trips libpq's
own trace counts (and refuse a fenced or twice-applied entry whole), a
version-1 database upgraded when opened, and the named errors
for a server that cannot be reached or a database written by a newer
version.  The shared semantics are in ``test_contract_postgres.py``.

The cross-process tests wrap their waits in ``trio.fail_after(HANG_GUARD)``:
a guard so a broken build fails instead of hanging CI, not a timing
assertion -- nothing here measures how long anything took.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import msgspec
import psycopg
import pytest
import trio
import trio.testing
from psycopg import pq

from journal import (
    SCHEMA_VERSION,
    ConflictError,
    Draft,
    DuplicateEventError,
    FencedError,
    InboxConsumedError,
    InboxError,
    JournalCorruptError,
    JournalError,
    JournalSchemaError,
    JournalUnavailableError,
    LeaseHeldError,
    NotAJournalError,
    Record,
    SessionLease,
    WriterSpan,
    open_journal,
)
from journal.codec import GENESIS, chain, chain_body, encode_event
from journal.content import Message, Text
from journal.events import CHECKPOINT_STREAM, LoopImage, Notice, SessionCheckpoint
from journal.inbox import Consumed, InboxOutcome, Submit, encode_outcome
from journal.postgres import PostgresJournal, init_schema
from journal.postgres import writer as postgres_writer
from journal.postgres.schema import channel as _channel
from journal.postgres.writer import Writer as _Writer
from tests.support.damage import edit_postgres_record
from tests.support.old_journal import (
    to_version_1_postgres,
    to_version_2_postgres,
    to_version_4_postgres,
)

pytestmark = pytest.mark.slow

HANG_GUARD = 120
REPO = Path(__file__).resolve().parents[2]


def _draft(id: str, text: str = "x") -> Draft:
    return Draft(id=id, loop="main", event=Notice(code="test", text=text))


def _checkpoint(id: str, previous: int = 0) -> Draft:
    image = LoopImage(loop="main", state=id.encode())
    return Draft(
        id=id, loop=CHECKPOINT_STREAM, event=SessionCheckpoint(previous=previous, loops=(image,))
    )


def _sql(url: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Blocking: run one statement on a connection of its own (autocommit)."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url)


async def _stored_ids(url: str, session: str) -> list[str]:
    """The event ids of ``session`` as the server holds them, in seq order."""
    rows = await trio.to_thread.run_sync(
        _sql, url, "SELECT id FROM loopruntime_records WHERE session = %s ORDER BY seq", (session,)
    )
    return [r[0] for r in rows]


class _Lines:
    """Lines from a child process's stdout."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream, self._buffer = stream, b""

    async def next(self) -> str | None:
        """The next line, or None at end of stream."""
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some()
            if not chunk:
                rest, self._buffer = self._buffer, b""
                return rest.decode() if rest else None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()


def _python(script: str, *args: str) -> list[str]:
    return [sys.executable, "-c", script, *args]


async def _run(
    command: list[str], *, task_status: trio.TaskStatus[trio.Process] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run a child with its stdout piped; hand back the process; wait for it to exit."""
    await trio.run_process(
        command, stdout=subprocess.PIPE, check=False, cwd=REPO, task_status=task_status
    )


# -- fencing across processes -------------------------------------------------------

WRITER_A = """
import sys, trio
from journal import Draft, FencedError, open_journal
from journal.events import Notice

async def main(url, session):
    async with open_journal(url) as journal:
        lease = await journal.open_session(session)
        seq = lease.head
        # Bounded so a broken fence ends the test instead of running for ever.
        while seq < 50_000:
            draft = Draft(id=f"a-{seq + 1}", loop="a", event=Notice(code="a", text=str(seq)))
            try:
                await journal.append(lease, [draft], expected_seq=seq)
            except FencedError as exc:
                print("fenced", exc, flush=True)
                sys.exit(3)
            seq += 1
            print("committed", draft.id, flush=True)

trio.run(main, *sys.argv[1:])
"""

WRITER_B = """
import json, sys, trio
from journal import Draft, open_journal
from journal.events import Notice

async def main(url, session):
    async with open_journal(url) as journal:
        lease = await journal.open_session(session, create=False)
        seen = [record.id async for record in journal.read(session)]
        print(json.dumps({"incarnation": lease.incarnation, "head": lease.head, "seen": seen}))
        drafts = [Draft(id=f"b-{n}", loop="b", event=Notice(code="b", text="")) for n in (1, 2)]
        await journal.append(lease, drafts, expected_seq=lease.head)

trio.run(main, *sys.argv[1:])
"""


async def test_a_newer_writer_in_another_process_fences_the_older(postgres_url: str) -> None:
    session = "fenced-across-processes"
    committed: list[str] = []
    output: list[str] = []
    enough = trio.Event()

    with trio.fail_after(HANG_GUARD):
        async with trio.open_nursery() as nursery:
            writer_a: trio.Process = await nursery.start(
                _run, _python(WRITER_A, postgres_url, session)
            )
            assert writer_a.stdout is not None
            lines = _Lines(writer_a.stdout)

            async def drain_a() -> None:
                # Keeps A's pipe empty so A appends at full speed while B takes over.
                while (line := await lines.next()) is not None:
                    output.append(line)
                    if line.startswith("committed "):
                        committed.append(line.split()[1])
                        if len(committed) == 20:
                            enough.set()
                enough.set()

            nursery.start_soon(drain_a)
            await enough.wait()
            writer_b = await trio.run_process(
                _python(WRITER_B, postgres_url, session), capture_stdout=True, cwd=REPO
            )

    assert writer_a.returncode == 3, output[-5:]
    assert output[-1].startswith("fenced "), output[-5:]
    assert "opened by a newer writer (incarnation 2 > 1); this writer must stop" in output[-1]
    view = json.loads(writer_b.stdout)
    assert view["incarnation"] == 2
    # B saw everything A committed, and A committed nothing after B took over.
    assert view["seen"] == committed
    assert view["head"] == len(committed)
    assert await _stored_ids(postgres_url, session) == [*committed, "b-1", "b-2"]


# -- following from another process ---------------------------------------------------

FOLLOWER = """
import sys, trio
from journal import open_journal

async def main(url, session, count):
    async with open_journal(url) as journal:
        seen = 0
        async for record in journal.tail(session):
            print(record.id, record.seq, flush=True)
            seen += 1
            if seen == int(count):
                return

trio.run(main, *sys.argv[1:])
"""


async def test_a_follower_in_another_process_sees_each_append(postgres_url: str) -> None:
    session = "followed"
    async with open_journal(postgres_url) as journal:
        lease = await journal.open_session(session)
        await journal.append(lease, [_draft("t-1")], expected_seq=0)
        with trio.fail_after(HANG_GUARD):
            async with trio.open_nursery() as nursery:
                follower: trio.Process = await nursery.start(
                    _run, _python(FOLLOWER, postgres_url, session, "5")
                )
                assert follower.stdout is not None
                lines = _Lines(follower.stdout)
                seen = []
                for n in range(1, 6):
                    # The follower is waiting on NOTIFY with no timer: each line
                    # below arrives only because the commit woke it.
                    seen.append(await lines.next())
                    if n < 5:
                        await journal.append(lease, [_draft(f"t-{n + 1}")], expected_seq=n)
    assert seen == [f"t-{n} {n}" for n in range(1, 6)]
    assert follower.returncode == 0


async def test_a_tail_survives_losing_its_listening_connection(postgres_url: str) -> None:
    async with open_journal(postgres_url) as journal:
        lease = await journal.open_session("relisten")
        await journal.append(lease, [_draft("r-1")], expected_seq=0)
        got: list[str] = []
        tail = cast(AsyncGenerator[Record, None], journal.tail("relisten"))
        got.append((await anext(tail)).id)

        async def next_id() -> None:
            got.append((await anext(tail)).id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(next_id)
            await trio.testing.wait_all_tasks_blocked()
            # Only this tail's listener, even on a server other runs share.
            ((schema,),) = await trio.to_thread.run_sync(
                _sql, postgres_url, "SELECT current_schema()"
            )
            listen = f'LISTEN "{_channel(schema, "relisten")}"'
            killed = await trio.to_thread.run_sync(
                _sql,
                postgres_url,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                (listen,),
            )
            assert killed == [(True,)]
            await journal.append(lease, [_draft("r-2")], expected_seq=1)
        await tail.aclose()
    assert got == ["r-1", "r-2"]


# -- cut connections ------------------------------------------------------------------


_SYNC = b"S\x00\x00\x00\x04"
"""The protocol's Sync message: the client waits for the server's reply after it."""

_READY_IDLE = b"Z\x00\x00\x00\x05I"
"""ReadyForQuery with no transaction open: the server's last word on a round trip."""


class _CuttingProxy:
    """A loopback TCP proxy in front of the server that can cut a connection mid-append.

    ``arm("before")``: the next client bytes that end a round trip (a Sync
    message: a group commit's one statement, or its checked pipeline) are
    dropped and the connection cut, so the server never commits.
    ``arm("after")``: they are forwarded, the server's reply is swallowed
    until it says the round trip is over and no transaction is open (ready
    for a query, idle), then the connection is cut: committed, but the client
    never hears it.  While ``refuse`` is set, new connections are closed at once.
    """

    def __init__(self, port: int) -> None:
        self.server_port, self.port = port, 0
        self.armed: str | None = None
        self.refuse = False
        self.cuts = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        if self.refuse:
            await client.aclose()
            return
        server = await trio.open_tcp_stream("127.0.0.1", self.server_port)
        swallow = False
        async with client, server, trio.open_nursery() as nursery:

            async def up() -> None:
                nonlocal swallow
                async for data in client:
                    if self.armed and data.endswith(_SYNC):
                        mode, self.armed = self.armed, None
                        self.cuts += 1
                        if mode == "before":
                            break
                        swallow = True
                    await server.send_all(data)
                nursery.cancel_scope.cancel()

            async def down() -> None:
                replies = b""
                async for data in server:
                    if swallow:
                        replies += data
                        if replies.endswith(_READY_IDLE):
                            break
                        continue
                    await client.send_all(data)
                nursery.cancel_scope.cancel()

            nursery.start_soon(up)
            nursery.start_soon(down)


@pytest.fixture
async def proxy(postgres_url: str) -> AsyncIterator[tuple[_CuttingProxy, str]]:
    """A cutting proxy in front of the test server, and a journal URL through it."""
    params = psycopg.conninfo.conninfo_to_dict(postgres_url)
    cutter = _CuttingProxy(int(params.get("port") or 5432))
    async with trio.open_nursery() as nursery:
        await nursery.start(cutter.serve)
        host = params.get("host") or "127.0.0.1"
        yield (
            cutter,
            postgres_url.replace(f"{host}:{params.get('port')}", f"127.0.0.1:{cutter.port}"),
        )
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("cut", ["before", "after"])
async def test_a_cut_append_is_retried_on_a_new_connection_exactly_once(
    proxy: tuple[_CuttingProxy, str], postgres_url: str, cut: str
) -> None:
    cutter, url = proxy
    async with open_journal(url) as journal:
        lease = await journal.open_session("cut")
        await journal.append(lease, [_draft("c-1")], expected_seq=0)
        cutter.armed = cut
        records = await journal.append(lease, [_draft("c-2"), _draft("c-3")], expected_seq=1)
        assert cutter.cuts == 1
        assert [(r.id, r.seq) for r in records] == [("c-2", 2), ("c-3", 3)]
        assert [r.id async for r in journal.read("cut")] == ["c-1", "c-2", "c-3"]
    assert await _stored_ids(postgres_url, "cut") == ["c-1", "c-2", "c-3"]


@pytest.mark.parametrize("cut", ["before", "after"])
async def test_a_cut_append_with_the_server_gone_is_unavailable_and_safe_to_repeat(
    proxy: tuple[_CuttingProxy, str], postgres_url: str, cut: str
) -> None:
    cutter, url = proxy
    async with open_journal(url) as journal:
        lease = await journal.open_session("gone")
        await journal.append(lease, [_draft("g-1")], expected_seq=0)
        cutter.armed, cutter.refuse = cut, True
        with pytest.raises(JournalUnavailableError, match="outcome is unknown") as caught:
            await journal.append(lease, [_draft("g-2")], expected_seq=1)
        assert isinstance(caught.value.__cause__, psycopg.Error)
        # What the server holds, asked directly: the cut decided it.
        expected = ["g-1", "g-2"] if cut == "after" else ["g-1"]
        assert await _stored_ids(postgres_url, "gone") == expected
        cutter.refuse = False
        # The writer learns the outcome by appending the same event again.
        (record,) = await journal.append(lease, [_draft("g-2")], expected_seq=1)
        assert (record.id, record.seq) == ("g-2", 2)
    assert await _stored_ids(postgres_url, "gone") == ["g-1", "g-2"]


@asynccontextmanager
async def _row_locked(url: str, session: str) -> AsyncIterator[int]:
    """Hold ``session``'s row lock from another connection; yield that backend's pid.

    Use it inside the nursery running the appends it blocks: leaving it
    releases the lock, so those appends can finish and the nursery exit even
    when the test body fails.
    """
    blocker = await trio.to_thread.run_sync(_connect, url)
    try:
        await trio.to_thread.run_sync(
            blocker.execute,
            "SELECT 1 FROM loopruntime_sessions WHERE session = %s FOR UPDATE",
            (session,),
        )
        yield blocker.info.backend_pid
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(blocker.close)


async def _wait_blocked_by(url: str, blocker_pid: int, *, not_pid: int = 0) -> int:
    """The pid of a backend waiting for a lock ``blocker_pid`` holds (other than ``not_pid``)."""
    while True:
        rows = await trio.to_thread.run_sync(
            _sql,
            url,
            "SELECT pid FROM pg_stat_activity WHERE pg_blocking_pids(pid) @> ARRAY[%s::int] "
            "AND pid <> %s::int",
            (blocker_pid, not_pid),
        )
        if rows:
            return int(rows[0][0])


async def test_a_terminated_writer_backend_loses_nothing_and_writes_nothing_twice(
    postgres_url: str,
) -> None:
    async with open_journal(postgres_url) as journal:
        lease = await journal.open_session("terminated")
        await journal.append(lease, [_draft("k-1")], expected_seq=0)
        outcome: list[BaseException] = []

        async def append() -> None:
            try:
                await journal.append(lease, [_draft("k-2")], expected_seq=1)
            except JournalError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            # Another connection holds the session row, so the writer's append
            # stops mid-transaction, where it can be terminated.
            async with _row_locked(postgres_url, "terminated") as blocker:
                nursery.start_soon(append)
                first = await _wait_blocked_by(postgres_url, blocker)
                await trio.to_thread.run_sync(
                    _sql, postgres_url, "SELECT pg_terminate_backend(%s::int)", (first,)
                )
                # The writer retries once on a new connection; terminate that too.
                second = await _wait_blocked_by(postgres_url, blocker, not_pid=first)
                await trio.to_thread.run_sync(
                    _sql, postgres_url, "SELECT pg_terminate_backend(%s::int)", (second,)
                )
        assert len(outcome) == 1
        assert isinstance(outcome[0], JournalUnavailableError)
        assert "outcome is unknown" in str(outcome[0])
        assert await _stored_ids(postgres_url, "terminated") == ["k-1"]
        (record,) = await journal.append(lease, [_draft("k-2")], expected_seq=1)
        assert record.seq == 2
        # Repeating it once more is still idempotent.
        (again,) = await journal.append(lease, [_draft("k-2")], expected_seq=1)
        assert again == record
    assert await _stored_ids(postgres_url, "terminated") == ["k-1", "k-2"]


# -- group commit -----------------------------------------------------------------------


async def test_a_failing_append_does_not_fail_its_group_commit(postgres_url: str) -> None:
    async with open_journal(postgres_url) as journal:
        leases = {s: await journal.open_session(s) for s in ("hold", "ok", "stale", "dup", "big")}
        await journal.append(leases["stale"], [_draft("s-1")], expected_seq=0)
        await journal.append(leases["dup"], [_draft("d-1", "one")], expected_seq=0)
        fenced = await journal.open_session("fenced")
        await journal.open_session("fenced")
        # An id this long overflows the (session, id) index: the server
        # refuses the statement, which is not a lost connection.
        huge = base64.b64encode(os.urandom(9000)).decode()
        results: dict[str, object] = {}

        async def append(name: str, lease_name: str, draft: Draft, expected: int) -> None:
            try:
                lease = fenced if lease_name == "fenced" else leases[lease_name]
                results[name] = await journal.append(lease, [draft], expected_seq=expected)
            except JournalError as exc:
                results[name] = exc

        async with trio.open_nursery() as nursery:
            async with _row_locked(postgres_url, "hold") as blocker:
                # The first append holds the writer on the locked row, so the
                # next five wait together and go in one group commit.
                nursery.start_soon(append, "hold", "hold", _draft("h-1"), 0)
                await _wait_blocked_by(postgres_url, blocker)
                nursery.start_soon(append, "ok", "ok", _draft("o-1"), 0)
                nursery.start_soon(append, "stale", "stale", _draft("s-2"), 0)
                nursery.start_soon(append, "dup", "dup", _draft("d-1", "two"), 1)
                nursery.start_soon(append, "fenced", "fenced", _draft("f-1"), 0)
                nursery.start_soon(append, "big", "big", _draft(huge), 0)
                await trio.testing.wait_all_tasks_blocked()

    assert [r.id for r in results["hold"]] == ["h-1"]  # type: ignore[attr-defined]
    assert [r.id for r in results["ok"]] == ["o-1"]  # type: ignore[attr-defined]
    assert isinstance(results["stale"], ConflictError)
    assert isinstance(results["dup"], DuplicateEventError)
    assert isinstance(results["fenced"], FencedError)
    assert type(results["big"]) is JournalError
    assert "index row" in str(results["big"])
    assert await _stored_ids(postgres_url, "ok") == ["o-1"]
    assert await _stored_ids(postgres_url, "big") == []


async def test_a_group_commit_indexes_only_the_checkpoints_that_committed(
    postgres_url: str,
) -> None:
    async with open_journal(postgres_url) as journal:
        leases = {s: await journal.open_session(s) for s in ("hold", "a", "b", "fenced")}
        for name, lease in leases.items():
            # The writer now knows each session, so the batch below takes the
            # fast path, where the fenced session's guard fails.
            await journal.append(lease, [_draft(f"{name}-1")], expected_seq=0)
        await journal.open_session("fenced")
        results: dict[str, object] = {}

        async def append(name: str, drafts: list[Draft]) -> None:
            try:
                results[name] = await journal.append(leases[name], drafts, expected_seq=1)
            except JournalError as exc:
                results[name] = exc

        async with trio.open_nursery() as nursery:
            async with _row_locked(postgres_url, "hold") as blocker:
                nursery.start_soon(append, "hold", [_draft("hold-2")])
                await _wait_blocked_by(postgres_url, blocker)
                nursery.start_soon(append, "a", [_draft("a-2"), _checkpoint("a-cp", 1)])
                nursery.start_soon(append, "b", [_checkpoint("b-cp", 1), _draft("b-3")])
                nursery.start_soon(append, "fenced", [_checkpoint("f-cp", 1)])
                await trio.testing.wait_all_tasks_blocked()

        assert isinstance(results["fenced"], FencedError)
        assert [r.seq for r in await journal.checkpoints("a")] == [3]
        assert [r.seq for r in await journal.checkpoints("b")] == [2]
        assert await journal.checkpoints("fenced") == []
    indexed = await trio.to_thread.run_sync(
        _sql, postgres_url, "SELECT session, seq FROM loopruntime_checkpoints ORDER BY session"
    )
    assert indexed == [("a", 3), ("b", 2)]


async def _group_after_hold(
    journal: PostgresJournal,
    url: str,
    hold: SessionLease,
    appends: dict[SessionLease, list[Draft]],
) -> dict[str, list[Record] | BaseException]:
    """Run ``appends`` as one group commit, behind an append to ``hold`` (at seq 1)."""
    results: dict[str, list[Record] | BaseException] = {}

    async def append(lease: SessionLease, drafts: list[Draft], expected: int) -> None:
        try:
            results[lease.session] = await journal.append(lease, drafts, expected_seq=expected)
        except Exception as exc:
            results[lease.session] = exc

    async with trio.open_nursery() as nursery:
        async with _row_locked(url, hold.session) as blocker:
            # The hold append stops the writer on the locked row, so the
            # others wait together and go in one group commit.
            nursery.start_soon(append, hold, [_draft(f"{hold.session}-2")], 1)
            await _wait_blocked_by(url, blocker)
            for lease, drafts in appends.items():
                nursery.start_soon(append, lease, drafts, 1)
            await trio.testing.wait_all_tasks_blocked()
    return results


async def test_the_fast_path_stores_exactly_what_was_appended(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[list[str]] = []
    commit_checked = _Writer._commit_checked

    def spy(
        writer: _Writer, conn: psycopg.Connection[Any], batch: list[Any]
    ) -> list[list[Record] | BaseException]:
        checked.append(sorted(item.lease.session for item in batch))
        return commit_checked(writer, conn, batch)

    monkeypatch.setattr(_Writer, "_commit_checked", spy)
    astral = "\U0001d4d0stral-\u00fc"
    names = ["hold", "plain", astral, "large", "empty"]
    group = {
        "plain": [
            Draft(id="", loop="", event=Notice(code="", text=""), cause=""),
            Draft(id="p-none", loop="main", event=Notice(code="t", text="x"), cause=None),
        ],
        astral: [
            Draft(
                id="\U0001f600\u65e5\u672c",
                loop="\U0001d4c1",
                event=Notice(code="t", text="\u00e9"),
            ),
            _checkpoint("\U0001f600-cp", 1),
        ],
        "large": [
            Draft(id="big", loop="main", event=Notice(code="t", text="\U0001f600" * 1_000_000)),
            Draft(
                id="long",
                loop="\u03bb" * 50_000,
                event=Notice(code="t", text="y"),
                cause="c" * 200_000,
            ),
        ],
        "empty": [],
    }
    async with open_journal(postgres_url) as journal:
        assert isinstance(journal, PostgresJournal)
        leases = {s: await journal.open_session(s) for s in names}
        first = {
            s: await journal.append(leases[s], [_draft(f"{s}-1")], expected_seq=0) for s in names
        }
        checked.clear()
        results = await _group_after_hold(
            journal, postgres_url, leases["hold"], {leases[s]: d for s, d in group.items()}
        )
        # Every session was known to the writer: nothing went the checked way.
        assert checked == []
        for s, drafts in group.items():
            written = results[s]
            assert isinstance(written, list), written
            assert [(r.seq, r.id, r.loop, r.cause, r.event) for r in written] == [
                (seq, d.id, d.loop, d.cause, d.event) for seq, d in enumerate(drafts, 2)
            ]
            assert [r async for r in journal.read(s)] == first[s] + written
            assert await journal.head(s) == 1 + len(drafts)
        assert await journal.checkpoints(astral) == [results[astral][1]]  # type: ignore[index]
        assert await journal.checkpoints("plain") == []
    rows = await trio.to_thread.run_sync(
        _sql,
        postgres_url,
        "SELECT id, cause IS NULL, octet_length(body) FROM loopruntime_records "
        "WHERE session = 'plain' ORDER BY seq",
    )
    bodies = [len(encode_event(d.event)) for d in group["plain"]]
    assert rows[1:] == [("", False, bodies[0]), ("p-none", True, bodies[1])]
    indexed = await trio.to_thread.run_sync(
        _sql, postgres_url, "SELECT session, seq FROM loopruntime_checkpoints"
    )
    assert indexed == [(astral, 3)]


async def test_an_error_between_two_statements_leaves_no_transaction_behind(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An error raised in this process while a batch is being sent (here: out
    # of memory encoding the bodies of one append) fails that append only,
    # and nothing of it reaches a later commit.
    bytea_array = postgres_writer.bytea_array

    def poisoned(values: list[bytes]) -> Any:
        if any(b"poison" in v for v in values):
            raise MemoryError("out of memory")
        return bytea_array(values)

    monkeypatch.setattr(postgres_writer, "bytea_array", poisoned)
    async with open_journal(postgres_url) as journal:
        assert isinstance(journal, PostgresJournal)
        leases = {s: await journal.open_session(s) for s in ("hold", "good", "bad", "later")}
        for lease in leases.values():
            await journal.append(lease, [_draft(f"{lease.session}-1")], expected_seq=0)
        results = await _group_after_hold(
            journal,
            postgres_url,
            leases["hold"],
            {leases["good"]: [_draft("good-2")], leases["bad"]: [_draft("bad-2", "poison")]},
        )
        assert isinstance(results["bad"], MemoryError)
        assert [r.id for r in results["good"]] == ["good-2"]  # type: ignore[union-attr]
        # A later commit of another session commits nothing of the failed one.
        await journal.append(leases["later"], [_draft("later-2")], expected_seq=1)
        assert await journal.head("bad") == 1
        again = await journal.append(leases["bad"], [_draft("bad-2")], expected_seq=1)
        assert [r.seq for r in again] == [2]
        assert [r.id async for r in journal.read("bad")] == ["bad-1", "bad-2"]
    for session in ("hold", "good", "bad", "later"):
        assert await _stored_ids(postgres_url, session) == [f"{session}-1", f"{session}-2"]


# -- the fast path with inbox entries ---------------------------------------------------


class _Wire:
    """What the writer's connections say, read from libpq's own trace of the protocol.

    Since the last ``clear``: ``statements`` counts the Execute messages sent;
    ``round_trips`` the times the client sent and then read the server's
    reply (each turn from messages sent, ``F`` lines, to messages received,
    ``B``), which also counts a wait in the middle of a pipeline.
    """

    def __init__(self) -> None:
        self._trace = tempfile.TemporaryFile()
        self._start = 0
        self._traced: list[psycopg.Connection[Any]] = []

    def connect(self, url: str) -> psycopg.Connection[Any]:
        conn = _traced_connection(url)
        self._follow(conn)
        close = conn.close

        def untrace_and_close() -> None:
            # libpq writes its trace through a buffered stream: flushed here,
            # it can never write to this file's descriptor once it is reused.
            if not conn.closed:
                conn.pgconn.untrace()
            close()

        conn.close = untrace_and_close  # type: ignore[method-assign]
        self._traced.append(conn)
        return conn

    def _follow(self, conn: psycopg.Connection[Any]) -> None:
        conn.pgconn.trace(self._trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def _flush(self) -> None:
        """Flush the trace of every open connection (call while the writer is idle)."""
        for conn in self._traced:
            if not conn.closed:
                conn.pgconn.untrace()
                self._follow(conn)

    def _messages(self) -> list[tuple[str, str]]:
        """``(direction, message)`` of every message, in order."""
        self._flush()
        self._trace.seek(self._start)
        lines = self._trace.read().decode(errors="replace").splitlines()
        return [(f[0], f[2]) for f in (line.split("\t") for line in lines) if len(f) > 2]

    @property
    def statements(self) -> int:
        return sum(1 for way, message in self._messages() if (way, message) == ("F", "Execute"))

    @property
    def round_trips(self) -> int:
        ways = [way for way, _ in self._messages()]
        return sum(1 for sent, got in itertools.pairwise(ways) if (sent, got) == ("F", "B"))

    def clear(self) -> None:
        self._flush()
        self._trace.seek(0, os.SEEK_END)
        self._start = self._trace.tell()

    def close(self) -> None:
        for conn in self._traced:
            conn.close()
        self._trace.close()


_traced_connection = postgres_writer._writer_connection


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Wire]:
    """The writer's connections, traced from their first byte."""
    traced = _Wire()
    monkeypatch.setattr(postgres_writer, "_writer_connection", traced.connect)
    yield traced
    traced.close()


async def _consuming_group(
    journal: PostgresJournal,
    url: str,
    hold: SessionLease,
    appends: dict[SessionLease, tuple[list[Draft], int, InboxOutcome]],
) -> dict[str, list[Record] | BaseException]:
    """``appends`` (drafts, the entry each applies, its outcome; every session at
    seq 1) as one group commit, behind an append to ``hold``."""
    results: dict[str, list[Record] | BaseException] = {}

    async def append(lease: SessionLease, drafts: list[Draft], consumes: list[Consumed]) -> None:
        try:
            results[lease.session] = await journal.append(
                lease, drafts, expected_seq=1, consumes=consumes
            )
        except Exception as exc:
            results[lease.session] = exc

    async with trio.open_nursery() as nursery:
        async with _row_locked(url, hold.session) as blocker:
            nursery.start_soon(append, hold, [_draft(f"{hold.session}-2")], [])
            await _wait_blocked_by(url, blocker)
            for lease, (drafts, entry, outcome) in appends.items():
                consumes = [Consumed(entry=entry, outcome=outcome)]
                nursery.start_soon(append, lease, drafts, consumes)
            await trio.testing.wait_all_tasks_blocked()
    return results


async def _inbox_sessions(journal: PostgresJournal, names: list[str]) -> dict[str, SessionLease]:
    """Sessions with two inbox entries each, held, the first entry applied by a
    first append (so the writer knows every session's state)."""
    leases = {}
    for name in names:
        await journal.put(name, "k1", _submit("one"), definition="agent")
        await journal.put(name, "k2", _submit("two"))
        leases[name] = lease = await journal.acquire(name, "host-a", ttl=3600)
        done = [Consumed(entry=1, outcome=InboxOutcome(record=f"{name}-1"))]
        await journal.append(lease, [_draft(f"{name}-1")], expected_seq=0, consumes=done)
    return leases


def _submit(text: str) -> Submit:
    return Submit(message=Message(role="user", blocks=(Text(text=text),)))


async def test_a_consuming_group_commit_is_one_statement_in_one_round_trip(
    postgres_url: str, wire: _Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    commit_checked = _Writer._commit_checked

    def spy(
        writer: _Writer, conn: psycopg.Connection[Any], batch: list[Any]
    ) -> list[list[Record] | BaseException]:
        checked.extend(item.lease.session for item in batch)
        return commit_checked(writer, conn, batch)

    monkeypatch.setattr(_Writer, "_commit_checked", spy)
    async with open_journal(postgres_url) as journal:
        assert isinstance(journal, PostgresJournal)
        leases = await _inbox_sessions(journal, ["hold", "a", "b"])
        checked.clear()
        wire.clear()
        done = {s: InboxOutcome(record=f"{s}-2", value=s) for s in ("a", "b")}
        results = await _consuming_group(
            journal,
            postgres_url,
            leases["hold"],
            {
                leases["a"]: ([_draft("a-2"), _checkpoint("a-cp", 1)], 2, done["a"]),
                leases["b"]: ([_draft("b-2")], 2, done["b"]),
            },
        )
        # Two group commits (the hold's, then a's and b's together), each one
        # statement, sent and answered in one round trip; none went the checked way.
        assert (wire.statements, wire.round_trips) == (2, 2)
        assert checked == []
        assert [r.id for r in results["a"]] == ["a-2", "a-cp"]  # type: ignore[union-attr]
        assert [r.id for r in results["b"]] == ["b-2"]  # type: ignore[union-attr]
        for s in ("a", "b"):
            entry = await journal.entry(s, "k2")
            assert entry is not None and entry.consumed and entry.outcome == done[s]
            assert await journal.inbox(s) == []
        assert [r.seq for r in await journal.checkpoints("a")] == [3]


async def test_a_consuming_append_the_writer_cannot_guess_is_checked_in_two_round_trips(
    postgres_url: str, wire: _Wire
) -> None:
    async with open_journal(postgres_url) as journal:
        await journal.put("new", "k1", _submit("one"), definition="agent")
        lease = await journal.acquire("new", "host-a", ttl=3600)
        wire.clear()
        # The writer has not committed for this session yet: the checked path,
        # whose lookups of the ids and of the entries share one round trip.
        done = InboxOutcome(record="new-1")
        records = await journal.append(
            lease, [_draft("new-1")], expected_seq=0, consumes=[Consumed(entry=1, outcome=done)]
        )
        assert [r.id for r in records] == ["new-1"]
        assert wire.round_trips == 2
        entry = await journal.entry("new", "k1")
        assert entry is not None and entry.consumed and entry.outcome == done


async def test_a_fenced_hosts_consuming_append_is_refused_and_consumes_nothing(
    postgres_url: str, wire: _Wire
) -> None:
    async with open_journal(postgres_url) as journal:
        assert isinstance(journal, PostgresJournal)
        leases = await _inbox_sessions(journal, ["hold", "ok", "fenced"])
        # Another host takes the session: the first host's lease is now stale,
        # while its writer still knows the session at the head it left.
        await journal.release(leases["fenced"])
        newer = await journal.acquire("fenced", "host-b", ttl=3600)
        assert newer.incarnation > leases["fenced"].incarnation
        wire.clear()
        results = await _consuming_group(
            journal,
            postgres_url,
            leases["hold"],
            {
                leases["ok"]: ([_draft("ok-2")], 2, InboxOutcome(record="ok-2")),
                leases["fenced"]: ([_draft("fenced-2")], 2, InboxOutcome(record="fenced-2")),
            },
        )
        fenced = results["fenced"]
        assert isinstance(fenced, FencedError)
        assert (fenced.session, fenced.current) == ("fenced", newer.incarnation)
        # The one statement of that group was refused whole and the group
        # decided again on the checked path: the other append went through.
        assert [r.id for r in results["ok"]] == ["ok-2"]  # type: ignore[union-attr]
        assert wire.statements > 2
        entry = await journal.entry("fenced", "k2")
        assert entry is not None and not entry.consumed and entry.outcome is None
        assert [e.number for e in await journal.inbox("fenced")] == [2]
        assert await _stored_ids(postgres_url, "fenced") == ["fenced-1"]


async def test_an_entry_applied_twice_is_refused_on_the_fast_path(postgres_url: str) -> None:
    async with open_journal(postgres_url) as journal:
        assert isinstance(journal, PostgresJournal)
        lease = (await _inbox_sessions(journal, ["twice"]))["twice"]
        first = InboxOutcome(record="twice-1")
        # The writer knows the session at head 1: the next append of the same
        # entry is tried on the fast path first, whose guard finds it applied.
        with pytest.raises(InboxConsumedError) as caught:
            await journal.append(
                lease,
                [_draft("twice-2")],
                expected_seq=1,
                consumes=[Consumed(entry=1, outcome=InboxOutcome(record="twice-2"))],
            )
        assert (caught.value.session, caught.value.number) == ("twice", 1)
        assert await journal.head("twice") == 1
        entry = await journal.entry("twice", "k1")
        assert entry is not None and entry.outcome == first
        # Applied behind the writer's back (another writer of the same
        # incarnation, in effect): the fast path's guess is stale and refused.
        await trio.to_thread.run_sync(
            _sql,
            postgres_url,
            "UPDATE loopruntime_inbox SET consumed_at = 1, outcome = %s"
            " WHERE session = 'twice' AND number = 2",
            (encode_outcome(InboxOutcome(record="elsewhere")),),
        )
        with pytest.raises(InboxConsumedError):
            await journal.append(
                lease,
                [_draft("twice-3")],
                expected_seq=1,
                consumes=[Consumed(entry=2, outcome=InboxOutcome(record="twice-3"))],
            )
        assert await _stored_ids(postgres_url, "twice") == ["twice-1"]
        # One entry twice in one append never takes the fast path, and is refused.
        await journal.put("twice", "k3", _submit("three"))
        with pytest.raises(InboxError):
            await journal.append(
                lease,
                [_draft("twice-4")],
                expected_seq=1,
                consumes=[
                    Consumed(entry=3, outcome=InboxOutcome()),
                    Consumed(entry=3, outcome=InboxOutcome()),
                ],
            )
        assert [e.number for e in await journal.inbox("twice")] == [3]


# -- opening --------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize("opener", [PostgresJournal.open, init_schema])
async def test_an_unreachable_server_is_unavailable_with_a_clear_message(
    opener: Callable[[str], Any],
) -> None:
    port = _closed_port()
    url = f"postgresql://someone:sekrit@127.0.0.1:{port}/journal"
    with pytest.raises(JournalUnavailableError) as caught:
        await opener(url)
    message = str(caught.value)
    assert f"cannot reach PostgreSQL at postgresql://someone@127.0.0.1:{port}/journal" in message
    assert "check that the server is running" in message
    assert "sekrit" not in message
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)


async def test_a_database_with_a_newer_schema_is_refused(postgres_url: str) -> None:
    await init_schema(postgres_url)
    await trio.to_thread.run_sync(
        _sql,
        postgres_url,
        "UPDATE loopruntime_meta SET value = %s WHERE key = 'schema_version'",
        (str(SCHEMA_VERSION + 1),),
    )
    with pytest.raises(JournalSchemaError, match=f"schema {SCHEMA_VERSION + 1}, newer than"):
        await PostgresJournal.open(postgres_url)
    with pytest.raises(JournalSchemaError):
        await init_schema(postgres_url)
    # Refused, not "upgraded": the database is as the newer version left it.
    rows = await trio.to_thread.run_sync(
        _sql, postgres_url, "SELECT value FROM loopruntime_meta WHERE key = 'schema_version'"
    )
    assert rows == [(str(SCHEMA_VERSION + 1),)]


def _no_digests(records: list[Record]) -> list[Record]:
    return [msgspec.structs.replace(r, digest=b"") for r in records]


async def test_a_version_1_schema_is_upgraded_when_opened(postgres_url: str) -> None:
    assert SCHEMA_VERSION == 5, "add the upgrade from the previous version, and its test"
    async with open_journal(postgres_url) as journal:
        lease = await journal.open_session("old")
        written = await journal.append(lease, [_draft("o-1"), _draft("o-2")], expected_seq=0)
    await trio.to_thread.run_sync(to_version_1_postgres, postgres_url)

    # Opened by several at once: the advisory lock lets one upgrade, the
    # others find the current version (a second upgrade would fail creating the table).
    journals: list[PostgresJournal] = []

    async def open_one() -> None:
        journals.append(await PostgresJournal.open(postgres_url))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(open_one)
    try:
        journal = journals[0]
        old = [r async for r in journal.read("old")]
        assert _no_digests(old) == _no_digests(written)
        assert await journal.checkpoints("old") == []
        lease = await journal.open_session("old")
        # The first append after opening takes the checked path, the next the fast one.
        more = await journal.append(lease, [_checkpoint("cp-1", 0), _draft("o-3")], expected_seq=2)
        more += await journal.append(lease, [_checkpoint("cp-2", 3)], expected_seq=4)
        assert await journal.checkpoints("old") == [more[0], more[2]]
    finally:
        for opened in journals:
            await opened.aclose()

    rows = await trio.to_thread.run_sync(
        _sql, postgres_url, "SELECT key, value FROM loopruntime_meta"
    )
    assert rows == [("schema_version", str(SCHEMA_VERSION))]
    async with open_journal(postgres_url) as journal:
        assert [r async for r in journal.read("old")] == old + more
        assert await journal.checkpoints("old") == [more[0], more[2]]
        assert (await journal.check_storage()).ok


async def test_a_version_4_schema_gains_writers_from_the_next_append(postgres_url: str) -> None:
    async with open_journal(postgres_url) as journal:
        lease = await journal.acquire("s", "host-a", ttl=60, create=True)
        written = await journal.append(lease, [_draft("x-1"), _draft("x-2")], expected_seq=0)
    await trio.to_thread.run_sync(to_version_4_postgres, postgres_url)
    async with open_journal(postgres_url) as journal:
        assert [r async for r in journal.read("s")] == written
        assert await journal.writers("s") == []
        # The lease taken before the upgrade still writes, now attributed.
        await journal.append(lease, [_draft("x-3")], expected_seq=2)
        assert await journal.writers("s") == [
            WriterSpan(first_seq=3, incarnation=lease.incarnation, owner="host-a")
        ]
    rows = await trio.to_thread.run_sync(
        _sql, postgres_url, "SELECT value FROM loopruntime_meta WHERE key = 'schema_version'"
    )
    assert rows == [(str(SCHEMA_VERSION),)]


async def test_a_version_2_schema_keeps_its_chain_and_chains_new_records_whole(
    postgres_url: str,
) -> None:
    async with open_journal(postgres_url) as journal:
        lease = await journal.open_session("s")
        written = await journal.append(
            lease, [_draft("x-1"), _checkpoint("cp-1"), _draft("x-2")], expected_seq=0
        )
        await journal.open_session("empty")
    await trio.to_thread.run_sync(to_version_2_postgres, postgres_url)
    async with open_journal(postgres_url) as journal:
        old = [r async for r in journal.read("s")]
        assert _no_digests(old) == _no_digests(written)
        previous = GENESIS
        for r in old:
            previous = chain_body(previous, encode_event(r.event))
            assert r.digest == previous
        assert await journal.checkpoints("s") == [old[1]]
        # The upgrade fenced every lease taken before it (an older process's).
        with pytest.raises(FencedError):
            await journal.append(lease, [_draft("late")], expected_seq=3)
        lease = await journal.open_session("s", create=False)
        # Checked path first (the writer knows nothing yet), then the fast one.
        more = await journal.append(lease, [_draft("y-1")], expected_seq=3)
        more += await journal.append(lease, [_checkpoint("cp-2", 2), _draft("y-2")], expected_seq=4)
        for r in more:
            body = encode_event(r.event)
            previous = chain(previous, r.seq, r.id, r.session, r.loop, r.at, r.cause, body)
            assert r.digest == previous
        assert await journal.checkpoints("s") == [old[1], more[1]]
        empty = await journal.open_session("empty", create=False)
        fresh = await journal.append(empty, [_draft("e-1")], expected_seq=0)
        assert fresh[0].digest == chain(
            GENESIS, 1, "e-1", "empty", "main", fresh[0].at, None, encode_event(fresh[0].event)
        )
        assert (await journal.check_storage()).ok
    rows = await trio.to_thread.run_sync(
        _sql, postgres_url, "SELECT session, whole_from FROM loopruntime_chain_rule"
    )
    assert rows == [("s", 4)]
    async with open_journal(postgres_url) as journal:
        assert [r async for r in journal.read("s")] == old + more
        await trio.to_thread.run_sync(edit_postgres_record, postgres_url, "s", 5, "cause", "forged")
        with pytest.raises(JournalCorruptError) as caught:
            _ = [r async for r in journal.read("s")]
        assert caught.value.seq == 5


async def test_a_session_row_out_of_step_with_its_records_fails_the_storage_check(
    postgres_url: str,
) -> None:
    async with open_journal(postgres_url) as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, [_draft("x-1"), _draft("x-2")], expected_seq=0)
        await journal.open_session("t")
        await trio.to_thread.run_sync(
            _sql, postgres_url, "UPDATE loopruntime_sessions SET head = 1 WHERE session = 's'"
        )
        await trio.to_thread.run_sync(
            _sql,
            postgres_url,
            "UPDATE loopruntime_sessions SET digest = %s WHERE session = 't'",
            (b"x" * 16,),
        )
        report = await journal.check_storage()
    assert not report.ok
    assert [p.table for p in report.problems] == ["loopruntime_sessions"]
    assert "session s has head 1" in report.problems[0].detail
    assert "last record is seq 2" in report.problems[0].detail


async def test_the_storage_check_runs_amcheck_when_it_is_installed(postgres_url: str) -> None:
    async with open_journal(postgres_url) as journal:
        lease = await journal.open_session("s")
        await journal.append(lease, [_draft("x-1"), _checkpoint("cp-1")], expected_seq=0)
        before = await journal.check_storage()
        try:
            # Into the test's own schema, dropped with it.
            await trio.to_thread.run_sync(_sql, postgres_url, "CREATE EXTENSION amcheck")
        except psycopg.Error as exc:
            pytest.skip(f"amcheck cannot be installed on this server: {exc}")
        after = await journal.check_storage()
    assert before.ok and after.ok, (before, after)
    assert any("amcheck extension is not installed" in s for s in before.skipped)
    assert not any("amcheck" in c for c in before.checked)
    assert any("amcheck" in c for c in after.checked) and not after.skipped


async def test_a_current_schema_without_its_checkpoint_index_is_refused(
    postgres_url: str,
) -> None:
    await init_schema(postgres_url)
    await trio.to_thread.run_sync(_sql, postgres_url, "DROP TABLE loopruntime_checkpoints")
    with pytest.raises(NotAJournalError, match="no loopruntime_checkpoints table"):
        await PostgresJournal.open(postgres_url)


async def test_foreign_tables_are_not_a_journal(postgres_url: str) -> None:
    await trio.to_thread.run_sync(_sql, postgres_url, "CREATE TABLE loopruntime_records (x int)")
    with pytest.raises(NotAJournalError, match="not a journal"):
        await PostgresJournal.open(postgres_url)


async def test_init_schema_is_idempotent_and_concurrent_opens_create_once(
    postgres_url: str,
) -> None:
    journals: list[PostgresJournal] = []

    async def open_one() -> None:
        journals.append(await PostgresJournal.open(postgres_url))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(open_one)
    for journal in journals:
        await journal.aclose()
    await init_schema(postgres_url)
    rows = await trio.to_thread.run_sync(
        _sql, postgres_url, "SELECT key, value FROM loopruntime_meta"
    )
    assert rows == [("schema_version", str(SCHEMA_VERSION))]


async def test_text_postgres_cannot_store_is_refused_before_writing(postgres_url: str) -> None:
    async with open_journal(postgres_url) as journal:
        lease = await journal.open_session("nul")
        with pytest.raises(ValueError, match="NUL character"):
            await journal.append(lease, [_draft("bad\x00id")], expected_seq=0)
        with pytest.raises(ValueError, match="NUL character"):
            await journal.open_session("bad\x00session")
        assert await journal.head("nul") == 0


@pytest.mark.parametrize("how", ["environment", "url"])
async def test_text_round_trips_whatever_client_encoding_is_asked_for(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # LATIN1 cannot carry these ids; SQL_ASCII makes psycopg read text as bytes.
    url = postgres_url
    if how == "environment":
        monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    else:
        url = f"{postgres_url}&client_encoding=SQL_ASCII"
    ids = ["plain", "\u00e9t\u00e9", "\u65e5\u672c", "\U0001f600"]
    async with open_journal(url) as journal:
        lease = await journal.open_session("\u00fcber-\U0001f600")
        written = []
        for seq, id in enumerate(ids):
            # The first append takes the checked path, the others the fast one.
            written += await journal.append(lease, [_draft(id)], expected_seq=seq)
        assert [r.id for r in written] == ids
        assert [r async for r in journal.read("\u00fcber-\U0001f600")] == written
        assert await journal.append(lease, [_draft(ids[0])], expected_seq=0) == written[:1]
        assert await journal.append(lease, [_draft(ids[-1])], expected_seq=4) == written[3:]
    monkeypatch.delenv("PGCLIENTENCODING", raising=False)
    assert await _stored_ids(postgres_url, "\u00fcber-\U0001f600") == ids


async def test_a_take_skips_a_session_whose_row_another_transaction_holds(
    postgres_url: str,
) -> None:
    # Hosts racing for one session never queue behind each other: a take
    # finds the row locked (FOR UPDATE SKIP LOCKED) and is refused at once.
    async with open_journal(postgres_url) as journal:
        await journal.open_session("ses_locked")
        holder = await trio.to_thread.run_sync(_connect, postgres_url)
        try:
            await trio.to_thread.run_sync(
                lambda: holder.execute(
                    "SELECT 1 FROM loopruntime_sessions WHERE session = %s FOR UPDATE",
                    ("ses_locked",),
                )
            )
            async with trio.open_nursery() as nursery:

                async def let_go() -> None:
                    # Without SKIP LOCKED the take would wait for this, then succeed.
                    await trio.sleep(20)
                    await trio.to_thread.run_sync(holder.rollback)

                nursery.start_soon(let_go)
                with pytest.raises(LeaseHeldError, match="another host taking it now"):
                    await journal.acquire("ses_locked", "host-a", ttl=60)
                nursery.cancel_scope.cancel()
        finally:
            await trio.to_thread.run_sync(holder.rollback)
            holder.close()
        lease = await journal.acquire("ses_locked", "host-a", ttl=60)
        assert lease.owner == "host-a"
