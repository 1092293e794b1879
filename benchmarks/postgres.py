"""PostgreSQL journal throughput beside raw psycopg doing the same storage work.

Run ``python -m benchmarks.postgres`` (``--quick`` for a short run).  Rules: the server is
``LOOPRUNTIME_TEST_PG_DSN`` or a throwaway one with fsync on
(``tests/support/pgserver.py``); every journal figure has a raw psycopg peer measured in
the same run, on the same server, with the same bytes, each benchmark in a schema of its
own, reported as journal / raw.  Nothing here asserts a number.  What each row measures:
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import psycopg
import trio
from psycopg import sql

from benchmarks import journal as journal_bench
from benchmarks import tables
from benchmarks.harness import quiet_logs
from benchmarks.restore import build_session, restore_once
from journal import Journal, open_journal
from journal.codec import GENESIS, chain
from journal.events import CHECKPOINT_STREAM, Event
from journal.postgres import init_schema
from tests.support.pgserver import isolated_schema, temporary_server

__all__ = ["main", "run"]

SESSIONS = 16
TARGET = 0.7

_INSERT = (
    "INSERT INTO loopruntime_records (session, seq, id, loop, at, cause, digest, body) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
# The tables that hold a journal's sessions (loopruntime_meta is made by init_schema).
_JOURNAL_TABLES = (
    "loopruntime_sessions",
    "loopruntime_records",
    "loopruntime_checkpoints",
    "loopruntime_chain_rule",
)
_SELECT = (
    "SELECT seq, id, loop, at, cause, digest, body FROM loopruntime_records "
    "WHERE session = %s ORDER BY seq"
)


def _say(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


# The same records as the SQLite journal benchmark, so the two read alike.
_draft = journal_bench.make_draft
_rows = journal_bench.stored_rows


@contextlib.contextmanager
def _server() -> Iterator[str]:
    given = os.environ.get("LOOPRUNTIME_TEST_PG_DSN")
    if given:
        yield given
    else:
        with temporary_server(durable=True) as dsn:
            yield dsn


# -- raw psycopg peers ---------------------------------------------------------------


def _raw_insert(url: str, rows: list[tuple[Any, ...]], batch: int) -> float:
    """Seconds for one connection to commit ``rows`` in transactions of ``batch`` rows."""
    with psycopg.connect(url) as conn:
        start = time.perf_counter()
        for i in range(0, len(rows), batch):
            with conn.cursor() as cur:
                cur.executemany(_INSERT, rows[i : i + batch])
            conn.commit()
        return time.perf_counter() - start


_decoder = msgspec.msgpack.Decoder(Event)


def _raw_read(url: str, session: str, verify: bool = False) -> tuple[float, int]:
    """Seconds to select one session's rows and decode every body; the row count.

    ``verify`` also checks the digest chain, the one thing a journal read
    does beyond this that costs real time (to show where the gap is).
    """
    with psycopg.connect(url) as conn:
        start = time.perf_counter()
        n = 0
        previous = GENESIS
        with conn.cursor(binary=True) as cur:
            cur.execute(_SELECT, (session,))
            while rows := cur.fetchmany(5000):
                for row in rows:
                    if verify:
                        seq, id, loop, at, cause, digest, body = row
                        if chain(previous, seq, id, session, loop, at, cause, body) != digest:
                            raise AssertionError(f"chain broken at {row[0]}")
                        previous = row[5]
                    _decoder.decode(row[6])
                n += len(rows)
        return time.perf_counter() - start, n


# -- journal side ------------------------------------------------------------------------


async def _sequential(journal: Journal, n: int) -> float:
    lease = await journal.open_session("seq")
    start = time.perf_counter()
    for i in range(n):
        await journal.append(lease, [_draft("seq", i)], expected_seq=i)
    return time.perf_counter() - start


async def _concurrent(journal: Journal, sessions: Sequence[str], per_session: int) -> float:
    leases = [await journal.open_session(s) for s in sessions]

    async def appender(index: int) -> None:
        lease = leases[index]
        for i in range(per_session):
            await journal.append(lease, [_draft(lease.session, i)], expected_seq=i)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(len(leases)):
            nursery.start_soon(appender, index)
    return time.perf_counter() - start


async def _read(url: str, session: str) -> tuple[float, int]:
    async with open_journal(url) as journal:
        start = time.perf_counter()
        n = 0
        async for _ in journal.read(session):
            n += 1
        return time.perf_counter() - start, n


def _copy_journal(source: str, target: str) -> None:
    """Copy every session of the journal at URL ``source`` into the (initialised, empty)
    journal at URL ``target``, on the same server, with ``INSERT ... SELECT``."""
    with psycopg.connect(source) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
    if row is None or row[0] is None:
        raise RuntimeError(f"{source} names no existing schema")
    with psycopg.connect(target) as conn:
        for table in _JOURNAL_TABLES:
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT * FROM {}.{}").format(
                    sql.Identifier(table), sql.Identifier(row[0]), sql.Identifier(table)
                )
            )
        conn.commit()
    _analyze(target)


def _analyze(url: str) -> None:
    # As autovacuum would soon: the source and every copy are read with fresh statistics.
    with psycopg.connect(url, autocommit=True) as conn:
        for table in _JOURNAL_TABLES:
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


def _size_label(n: int) -> str:
    return f"{round(n / 1000)}k" if n >= 1000 else str(n)


async def _restore(dsn: str, n: int, repeat: int) -> list[dict[str, Any]]:
    """The two restore rows: a real session of about ``n`` records, beside raw reads."""
    _say(f"postgres: building a session of ~{n} records to restore")
    with isolated_schema(dsn, prefix="bench") as source:
        async with open_journal(source) as journal:
            session_id, records = await build_session(journal, n)
            checkpoints = await journal.checkpoints(session_id)
        count = len(records)
        copied = sum(1 for r in records if r.loop == CHECKPOINT_STREAM)
        del records
        if not checkpoints:
            raise RuntimeError(f"a session of {count} records has no checkpoint in the index")
        if len(checkpoints) != copied:
            raise RuntimeError(
                f"the index holds {len(checkpoints)} checkpoints, {copied} were written"
            )
        tail = count - checkpoints[-1].seq
        del checkpoints
        await trio.to_thread.run_sync(_analyze, source)

        async def restore_copy(use_checkpoints: bool) -> tuple[float, int]:
            # Restore appends (loop.stopped on exit): each one gets an untouched copy.
            with isolated_schema(dsn, prefix="bench") as url:
                await init_schema(url)
                await trio.to_thread.run_sync(_copy_journal, source, url)
                return await restore_once(url, session_id, count, use_checkpoints=use_checkpoints)

        _say(
            f"postgres: restore {count} records ({copied} checkpoints, tail {tail}), "
            "from checkpoints, full fold and raw"
        )
        # Untimed: the first restore of a process pays for first uses (imports, caches).
        await restore_copy(True)
        timings = []
        for _ in range(repeat):
            ours, messages = await restore_copy(True)
            full, full_messages = await restore_copy(False)
            if full_messages != messages:
                raise RuntimeError(
                    f"restore from checkpoints holds {messages} messages, the full fold "
                    f"{full_messages}"
                )
            raw, raw_n = await trio.to_thread.run_sync(_raw_read, source, session_id)
            if raw_n != count:
                raise RuntimeError(f"the raw read found {raw_n} records, expected {count}")
            timings.append((ours, full, raw))
    raw = min(t[2] for t in timings)
    label = _size_label(count)
    return [
        _row(f"restore {label} (from checkpoints)", count, min(t[0] for t in timings), raw, TARGET),
        _row(f"restore {label} (full fold)", count, min(t[1] for t in timings), raw, None),
    ]


def _row(benchmark: str, n: int, ours: float, raw: float, target: float | None) -> dict[str, Any]:
    rate, raw_rate = n / ours, n / raw
    return {
        "benchmark": benchmark,
        "backend": "postgres",
        "n": n,
        "rate": rate,
        "bare_rate": raw_rate,
        "ratio": rate / raw_rate,
        "unit": "records/s",
        "target": target,
    }


async def _run(dsn: str, quick: bool, repeat: int) -> list[dict[str, Any]]:
    seq_n = 300 if quick else 2000
    per_session = 50 if quick else 400
    read_n = 20_000 if quick else 100_000
    sessions = [f"c{k:02d}" for k in range(SESSIONS)]
    results = []

    async def fresh(measure: Any, *args: Any) -> float:
        with isolated_schema(dsn, prefix="bench") as url:
            elapsed: float = await measure(url, *args)
            return elapsed

    async def pair(ours: Any, raw: Any, *raw_args: Any) -> tuple[float, float]:
        # Interleaved, best of each: the disk's fsync time drifts a lot on a
        # shared machine, and a drift should hit both sides alike.
        timings = [(await fresh(ours), await fresh(raw, *raw_args)) for _ in range(repeat)]
        return min(t[0] for t in timings), min(t[1] for t in timings)

    async def journal_seq(url: str) -> float:
        async with open_journal(url) as journal:
            return await _sequential(journal, seq_n)

    async def raw_rows(url: str, rows: list[tuple[Any, ...]], batch: int) -> float:
        await init_schema(url)
        return await trio.to_thread.run_sync(_raw_insert, url, rows, batch)

    _say(f"postgres: {seq_n} sequential appends, journal and raw")
    ours, raw = await pair(journal_seq, raw_rows, _rows(["seq"], seq_n), 1)
    results.append(_row("append, 1 record per append", seq_n, ours, raw, None))

    async def journal_conc(url: str) -> float:
        async with open_journal(url) as journal:
            return await _concurrent(journal, sessions, per_session)

    total = SESSIONS * per_session
    _say(f"postgres: {SESSIONS} sessions x {per_session} appends, journal and raw")
    ours, raw = await pair(journal_conc, raw_rows, _rows(sessions, per_session), SESSIONS)
    results.append(_row(f"append, {SESSIONS} sessions concurrently", total, ours, raw, TARGET))

    _say(f"postgres: writing {read_n} records to read back")
    with isolated_schema(dsn, prefix="bench") as url:
        async with open_journal(url) as journal:
            lease = await journal.open_session("big")
            for i in range(0, read_n, 1000):
                drafts = [_draft("big", k) for k in range(i, min(i + 1000, read_n))]
                await journal.append(lease, drafts, expected_seq=i)
        _say(f"postgres: read+decode {read_n} records, journal and raw")
        timings = []
        for _ in range(repeat):
            ours_read, n = await _read(url, "big")
            raw_read, raw_n = await trio.to_thread.run_sync(_raw_read, url, "big")
            checked, _ = await trio.to_thread.run_sync(_raw_read, url, "big", True)
            assert n == raw_n == read_n
            timings.append((ours_read, raw_read, checked))
    ours = min(t[0] for t in timings)
    results.append(_row("read+decode", read_n, ours, min(t[1] for t in timings), TARGET))
    results.append(
        _row(
            "read+decode (raw also checks the chain)",
            read_n,
            ours,
            min(t[2] for t in timings),
            None,
        )
    )
    results += await _restore(dsn, 10_000 if quick else 100_000, repeat)
    return results


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run the PostgreSQL benchmarks; one dict per table row.

    Starts a throwaway server unless ``LOOPRUNTIME_TEST_PG_DSN`` names one
    (raises ``tests.support.pgserver.ServerUnavailable`` when neither works).
    """
    with _server() as dsn:
        return trio.run(_run, dsn, quick, 2 if quick else 5)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgres", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    args = parser.parse_args(argv)
    quiet_logs()
    print(tables.postgres_table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
