"""PostgreSQL journal throughput beside raw psycopg doing the same storage work.

Run ``python -m benchmarks.postgres`` (``--quick`` for a short run).  It uses
the server named by ``LOOPRUNTIME_TEST_PG_DSN``, or starts a throwaway one
from the installed binaries (``tests/support/pgserver.py``, fsync on, so
commits cost what they cost in production).  Every journal figure has a raw
psycopg peer measured in the same run, on the same server, writing or
reading the same bytes into tables with the same indexes (each benchmark in
a schema of its own), reported as a ratio (journal / raw; 1.0 = no overhead):

* **append, sequential**: one record per ``append``, each awaited before the
  next.  Raw: one thread, one INSERT and one COMMIT per row.
* **append, 16 sessions**: 16 trio tasks, one session each, each appending
  one record at a time and waiting for it; the writer commits whatever is
  waiting together.  Raw: one thread inserting the same rows with
  ``executemany`` in transactions of 16 (one row per session) -- what a
  perfect group commit with no checks would do.  Target: >= 0.7.
* **read+decode**: ``journal.read`` of one session of 100k records (chain
  verified, a ``Record`` built for each).  Raw: one thread selecting the same
  columns (binary), and msgpack-decoding every body.  Target: >= 0.7.  A
  second raw figure also verifies the digest chain, as the journal must.

Benchmarks are not tests: nothing here asserts a number.
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

from benchmarks import journal as journal_bench
from journal import Journal, open_journal
from journal.codec import GENESIS, chain
from journal.events import Event
from journal.postgres import init_schema
from tests.support.pgserver import isolated_schema, temporary_server

__all__ = ["main", "run"]

SESSIONS = 16
TARGET = 0.7

_INSERT = (
    "INSERT INTO loopruntime_records (session, seq, id, loop, at, cause, digest, body) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
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
                        if chain(previous, row[6]) != row[5]:
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
    return results


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run the PostgreSQL benchmarks; one dict per table row.

    Starts a throwaway server unless ``LOOPRUNTIME_TEST_PG_DSN`` names one
    (raises ``tests.support.pgserver.ServerUnavailable`` when neither works).
    """
    with _server() as dsn:
        return trio.run(_run, dsn, quick, 2 if quick else 5)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| benchmark | n | journal records/s | raw psycopg records/s | journal / raw | target |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = "-" if r["target"] is None else f">= {r['target']:.1f}"
        lines.append(
            f"| {r['benchmark']} | {r['n']:,} | {r['rate']:,.0f} | {r['bare_rate']:,.0f} "
            f"| {r['ratio']:.2f} | {target} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgres", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    args = parser.parse_args(argv)
    print(format_table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
