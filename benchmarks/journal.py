"""Journal throughput: each backend beside a bare loop doing the same storage work.

Run ``python -m benchmarks.journal`` (``--quick`` for a short run).  Rules: a figure with
a bare counterpart is measured in the same run, on the same machine, with the same bytes,
and reported as journal / bare (1.0 = no overhead); each ratio the issue sets a target
for has its ceiling measured beside it (the trio harness, the bare read that also checks
the digest chain).  Nothing here asserts a number.  What each row measures, and what the
bare loops leave out: ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import queue
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import trio

from journal import Draft, Journal, open_journal
from journal.codec import GENESIS, chain, encode_event
from journal.content import TextDelta
from journal.events import Event, ModelOutput
from session.replay.terminal import note

from . import tables

__all__ = ["main", "run"]

_INSERT = (
    "INSERT INTO records (session, seq, id, loop, at, cause, digest, body)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


def _event(i: int) -> ModelOutput:
    # A typical coalesced stream chunk: ~190 bytes encoded.
    text = f"chunk {i}: " + "the quick brown fox jumps over the lazy dog " * 3
    return ModelOutput(effect_id=f"effect-{i // 50}", pieces=(TextDelta(index=0, text=text),))


def make_draft(session: str, i: int) -> Draft:
    """The i-th draft of a session in these benchmarks (shared with the Postgres one)."""
    return Draft(id=f"{session}-{i}", loop="main", event=_event(i), cause=f"cmd-{i}")


def stored_rows(sessions: Sequence[str], per_session: int) -> list[tuple[Any, ...]]:
    """The rows the journal would store, in the order concurrent appenders produce them."""
    now = time.time_ns()
    digests = dict.fromkeys(sessions, GENESIS)
    rows = []
    for i in range(per_session):
        for session in sessions:
            d = make_draft(session, i)
            body = encode_event(d.event)
            digests[session] = chain(
                digests[session], i + 1, d.id, session, d.loop, now, d.cause, body
            )
            rows.append((session, i + 1, d.id, d.loop, now, d.cause, digests[session], body))
    return rows


def _progress(text: str) -> None:
    note(f"  .. {text}")


# -- bare counterparts ------------------------------------------------------------


async def _new_file(directory: str, name: str) -> str:
    """A fresh journal file (same schema and indexes as the journal uses), closed."""
    path = os.path.join(directory, name)
    async with open_journal(f"sqlite:///{path}"):
        pass
    return path


def _bare_insert(path: str, rows: list[tuple[Any, ...]], batch: int, synchronous: str) -> float:
    """Seconds for one thread to commit ``rows`` in transactions of ``batch``."""
    elapsed = 0.0

    def work() -> None:
        nonlocal elapsed
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executemany(
            "INSERT INTO sessions (session, incarnation, created_at) VALUES (?, 1, 0)",
            [(s,) for s in sorted({r[0] for r in rows})],
        )
        start = time.perf_counter()
        for i in range(0, len(rows), batch):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_INSERT, rows[i : i + batch])
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        conn.close()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return elapsed


async def _trio_harness_insert(path: str, rows: list[tuple[Any, ...]], synchronous: str) -> float:
    """Seconds for one trio task per session to commit ``rows`` through a bare thread.

    The least a journal whose appenders are trio tasks waiting for their own
    durability can do: each task hands its next prebuilt row to a writer thread
    and parks; the thread commits whatever was handed over in one
    ``executemany`` transaction and wakes those tasks.  Hand-over and wake-up
    follow the journal's policy (the requests of one scheduling round go
    together) but nothing else: no encoding, chaining, validation or results.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA journal_mode = WAL")
    by_session: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_session.setdefault(row[0], []).append(row)
    conn.executemany(
        "INSERT INTO sessions (session, incarnation, created_at) VALUES (?, 1, 0)",
        [(s,) for s in by_session],
    )
    token = trio.lowlevel.current_trio_token()
    handed: queue.SimpleQueue[list[tuple[Any, tuple[Any, ...]]] | None] = queue.SimpleQueue()
    outbox: list[tuple[Any, tuple[Any, ...]]] = []

    def wake(group: list[tuple[Any, tuple[Any, ...]]]) -> None:
        for task, _row in group:
            trio.lowlevel.reschedule(task)

    def writer() -> None:
        while (group := handed.get()) is not None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_INSERT, [row for _task, row in group])
            conn.execute("COMMIT")
            token.run_sync_soon(wake, group)

    def flush() -> None:
        handed.put(outbox[:])
        outbox.clear()

    async def appender(mine: list[tuple[Any, ...]]) -> None:
        for row in mine:
            outbox.append((trio.lowlevel.current_task(), row))
            if len(outbox) == 1:
                token.run_sync_soon(flush)
            await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for mine in by_session.values():
                nursery.start_soon(appender, mine)
        return time.perf_counter() - start
    finally:
        handed.put(None)
        thread.join()
        conn.close()


def _bare_insert_beside_python(path: str, rows: list[tuple[Any, ...]], batch: int) -> float:
    """``_bare_insert`` (NORMAL) while another thread runs Python without pause.

    Shows why the journal cannot overlap its Python work with SQLite's: the
    sqlite3 module releases the GIL around every statement step and must take
    it back for the next row, which waits for the busy thread to give it up
    (up to ``sys.getswitchinterval()``, 5 ms by default).
    """
    stop = threading.Event()

    def busy() -> None:
        n = 0
        while not stop.is_set():
            n += 1

    spinner = threading.Thread(target=busy)
    spinner.start()
    try:
        return _bare_insert(path, rows, batch, "NORMAL")
    finally:
        stop.set()
        spinner.join()


def _bare_read(path: str, session: str, columns: str, verify: bool = False) -> tuple[float, int]:
    decoder = msgspec.msgpack.Decoder(Event)
    decode = decoder.decode
    # The cheapest chain step there is (what journal.codec.chain does: the
    # packed envelope, then the body), so the "+ chain check" figure is a fair
    # floor, not a slow strawman.
    new_hash = hashlib.blake2b(digest_size=16).copy
    pack = msgspec.msgpack.Encoder().encode
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    cursor = conn.execute(
        f"SELECT {columns} FROM records WHERE session = ? ORDER BY seq", (session,)
    )
    n = 0
    previous = GENESIS
    while rows := cursor.fetchmany(4096):
        for row in rows:
            if verify:
                seq, id, loop, at, cause = row[:5]
                h = new_hash()
                h.update(pack((previous, seq, id, session, loop, at, cause)))
                h.update(row[-1])
                digest = h.digest()
                if digest != row[-2]:
                    raise AssertionError(f"chain broken at {row[0]}")
                previous = digest
            decode(row[-1])
        n += len(rows)
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed, n


# -- journal side -------------------------------------------------------------------


async def _sequential(journal: Journal, n: int) -> float:
    lease = await journal.open_session("seq")
    drafts = [make_draft("seq", i) for i in range(n)]
    start = time.perf_counter()
    for i, draft in enumerate(drafts):
        await journal.append(lease, [draft], expected_seq=i)
    return time.perf_counter() - start


async def _concurrent(journal: Journal, tasks: int, per_task: int) -> float:
    sessions = [f"c{t}" for t in range(tasks)]
    leases = [await journal.open_session(s) for s in sessions]
    drafts = {s: [make_draft(s, i) for i in range(per_task)] for s in sessions}

    async def appender(lease: Any) -> None:
        for i, draft in enumerate(drafts[lease.session]):
            await journal.append(lease, [draft], expected_seq=i)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for lease in leases:
            nursery.start_soon(appender, lease)
    return time.perf_counter() - start


async def _read(journal: Journal, session: str) -> tuple[float, int]:
    start = time.perf_counter()
    n = 0
    async for _ in journal.read(session):
        n += 1
    return time.perf_counter() - start, n


# -- the table ------------------------------------------------------------------------


def _row(
    name: str, backend: str, n: int, seconds: float, bare: float | None, unit: str
) -> dict[str, Any]:
    rate = n / seconds
    bare_rate = n / bare if bare else None
    return {
        "benchmark": name,
        "backend": backend,
        "n": n,
        "unit": unit,
        "rate": rate,
        "bare_rate": bare_rate,
        "ratio": rate / bare_rate if bare_rate else None,
    }


async def _run(quick: bool, directory: str, repeat: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    seq_n = 500 if quick else 5000
    seq_full_n = 200 if quick else 1000
    per_task = 10 if quick else 100
    tasks = 100
    read_n = 10_000 if quick else 100_000
    counter = 0

    def fresh() -> str:
        nonlocal counter
        counter += 1
        return f"b{counter}.db"

    async def best(measure: Callable[[], Any]) -> float:
        return min([await measure() for _ in range(repeat)])

    _progress("memory, sequential appends")
    async with open_journal("memory:") as mem:
        t = await _sequential(mem, seq_n)
    results.append(_row("append 1/call, sequential", "memory", seq_n, t, None, "records/s"))

    _progress("memory, 100 concurrent appenders")
    async with open_journal("memory:") as mem:
        t = await _concurrent(mem, tasks, per_task)
    results.append(
        _row("append 1/call, 100 concurrent", "memory", tasks * per_task, t, None, "records/s")
    )

    for sync in ("NORMAL", "FULL"):
        n = seq_n if sync == "NORMAL" else seq_full_n
        _progress(f"sqlite {sync}, sequential appends ({n})")
        rows = stored_rows(["seq"], n)

        async def journal_seq(sync: str = sync, n: int = n) -> float:
            path = os.path.join(directory, fresh())
            async with open_journal(f"sqlite:///{path}?synchronous={sync}") as j:
                return await _sequential(j, n)

        async def bare_seq(sync: str = sync, rows: list[tuple[Any, ...]] = rows) -> float:
            path = await _new_file(directory, fresh())
            return await trio.to_thread.run_sync(_bare_insert, path, rows, 1, sync)

        t, bare = await best(journal_seq), await best(bare_seq)
        results.append(_row("append 1/call, sequential", f"sqlite {sync}", n, t, bare, "records/s"))

        _progress(f"sqlite {sync}, {tasks} concurrent appenders x {per_task}")
        rows = stored_rows([f"c{t}" for t in range(tasks)], per_task)

        async def journal_conc(sync: str = sync) -> float:
            path = os.path.join(directory, fresh())
            async with open_journal(f"sqlite:///{path}?synchronous={sync}") as j:
                return await _concurrent(j, tasks, per_task)

        async def bare_conc(sync: str = sync, rows: list[tuple[Any, ...]] = rows) -> float:
            path = await _new_file(directory, fresh())
            return await trio.to_thread.run_sync(_bare_insert, path, rows, tasks, sync)

        async def harness_conc(sync: str = sync, rows: list[tuple[Any, ...]] = rows) -> float:
            return await _trio_harness_insert(await _new_file(directory, fresh()), rows, sync)

        t, bare = await best(journal_conc), await best(bare_conc)
        harness = await best(harness_conc)
        n = tasks * per_task
        backend = f"sqlite {sync}"
        results.append(_row(f"append 1/call, {tasks} concurrent", backend, n, t, bare, "records/s"))
        results.append(_row("  (bare: trio harness)", backend, n, t, harness, "records/s"))
        results.append(
            _row("  trio harness (bare: thread)", backend, n, harness, bare, "records/s")
        )
        if sync == "NORMAL":
            few = rows[: 2 * tasks]
            _progress(f"sqlite NORMAL, bare inserts beside a busy Python thread (5 x {len(few)})")
            # The median of five: now and then the scheduler happens to let
            # the inserting thread run a whole short run unopposed.
            runs = [
                await trio.to_thread.run_sync(
                    _bare_insert_beside_python, await _new_file(directory, fresh()), few, tasks
                )
                for _ in range(5)
            ]
            beside = sorted(runs)[2]
            # The bare thread's time for as many rows, from its full run.
            alone = bare * len(few) / n
            results.append(
                _row("  thread beside busy Python", backend, len(few), beside, alone, "records/s")
            )

    _progress(f"sqlite, writing {read_n} records to read back")
    path = os.path.join(directory, fresh())
    async with open_journal(f"sqlite:///{path}") as j:
        lease = await j.open_session("big")
        for i in range(0, read_n, 1000):
            drafts = [make_draft("big", k) for k in range(i, min(i + 1000, read_n))]
            await j.append(lease, drafts, expected_seq=i)
        _progress(f"sqlite, read+decode {read_n} records")
        timings = []
        for _ in range(repeat):
            elapsed, n = await _read(j, "big")
            assert n == read_n
            bare, _n = await trio.to_thread.run_sync(
                _bare_read, path, "big", "seq, id, loop, at, cause, digest, body"
            )
            body_only, _n = await trio.to_thread.run_sync(_bare_read, path, "big", "body")
            verified, _n = await trio.to_thread.run_sync(
                _bare_read, path, "big", "seq, id, loop, at, cause, digest, body", True
            )
            timings.append((elapsed, bare, body_only, verified))
    t = min(x[0] for x in timings)
    bare = min(x[1] for x in timings)
    body_only = min(x[2] for x in timings)
    verified = min(x[3] for x in timings)
    results.append(_row("read+decode", "sqlite", read_n, t, bare, "records/s"))
    results.append(
        _row("read+decode (bare: body only)", "sqlite", read_n, t, body_only, "records/s")
    )
    results.append(
        _row("read+decode (bare: + chain check)", "sqlite", read_n, t, verified, "records/s")
    )
    results.append(
        _row("  chain check (bare: read+decode)", "sqlite", read_n, verified, bare, "records/s")
    )

    _progress(f"memory, read+decode {read_n} records")
    async with open_journal("memory:") as mem:
        lease = await mem.open_session("big")
        for i in range(0, read_n, 1000):
            drafts = [make_draft("big", k) for k in range(i, min(i + 1000, read_n))]
            await mem.append(lease, drafts, expected_seq=i)
        t = min([(await _read(mem, "big"))[0] for _ in range(repeat)])
    results.append(_row("read+decode", "memory", read_n, t, None, "records/s"))
    return results


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run every journal benchmark; return one dict per table row.

    Keys: ``benchmark``, ``backend``, ``n``, ``unit``, ``rate`` (per second),
    ``bare_rate`` and ``ratio`` (``None`` where there is no bare counterpart).
    Uses a temporary directory, removed afterwards.
    """
    directory = tempfile.mkdtemp(prefix="loopruntime-bench-")
    try:
        return trio.run(_run, quick, directory, 1 if quick else 3)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.journal", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (smaller counts)")
    args = parser.parse_args(argv)
    print(tables.journal_table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
