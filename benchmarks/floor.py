"""A durable tool step beside its floor: one bare commit of one row on the same storage.

Run ``python -m benchmarks.floor`` (``--quick`` for a short run).  A tool step must wait
on one durable commit it cannot avoid (``tool.started`` before the effect runs), so its
floor is one commit of one row: a bare ``sqlite3`` connection committing a ~300-byte row
per transaction in WAL mode on the same file system, at the same ``synchronous``; on
PostgreSQL a bare psycopg connection committing the same row per transaction on the same
server.  Ours is one turn of N tool steps through the public API (``Session.create``,
``submit``, ``wait_idle``) with the zero-latency scripted model and the trivial tool; a
step is the gap between two model calls.  Both sides run in rounds, ours then bare on
fresh files, and the row shows the median round's ratio (every round's ratio is in the
data).  Beside each figure: the commits a step waited on for durability, pipelined, and
the appends it made (``Session.commit_statistics``), which say where a step's time goes.
Nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import trio

from journal import open_journal
from session import Session

from . import journal as journal_bench
from .harness import Progress, quiet_logs, stderr_progress
from .loops import StepScript, step_definition

__all__ = ["TARGET", "main", "run", "step_beside_floor"]

TARGET = 2.0
"""Issue 39: a tool step should cost at most this many bare commits."""

_FULL_STEPS, _QUICK_STEPS = 300, 30
_FULL_ROUNDS, _QUICK_ROUNDS = 3, 1
# The first steps pay for warming caches and the writer's first transactions.
_SKIP_STEPS = 5
# WAL bytes a one-row commit writes, with room to spare (a leaf, an index page or two).
_ROOM_PER_COMMIT = 24 * 1024
_INSERT = (
    "INSERT INTO records (session, seq, id, loop, at, cause, digest, body)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


async def _our_steps(url: str, n: int) -> tuple[float, dict[str, float]]:
    """Mean seconds per tool step over one turn of ``n`` steps, and the commits each
    step met (durable waits, pipelined commits, appends) per step."""
    script = StepScript(n)
    async with open_journal(url) as journal:
        async with Session.create(journal, step_definition(script, n)) as session:
            before = session.commit_statistics()
            await session.submit("begin")
            await session.wait_idle()
            after = session.commit_statistics()
    stamps = script.stamps[_SKIP_STEPS:]
    per_step = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    counts = {
        "waits_per_step": (after.waits - before.waits) / n,
        "pipelined_per_step": (after.pipelined - before.pipelined) / n,
        "appends_per_step": (after.appends - before.appends) / n,
    }
    return per_step, counts


def _row_bytes(row: tuple[Any, ...]) -> int:
    return sum(len(v) if isinstance(v, str | bytes) else 8 for v in row)


def _sqlite_bare(directory: str, synchronous: str, commits: int, *, grown: bool) -> float:
    """Seconds per bare commit of one ~300-byte row at ``synchronous`` in WAL mode.

    ``grown``: the WAL already holds the room the commits need, as a WAL in steady
    state does (and as our journal keeps it, ``journal/sqlite/wal.py``): a commit then
    overwrites blocks instead of extending the file, which at ``FULL`` saves syncing
    the file's size with every commit.  Otherwise every commit extends a fresh WAL.
    """
    path = os.path.join(directory, f"bare-{time.perf_counter_ns()}.db")
    trio.run(_new_journal_file, path)
    rows = journal_bench.stored_rows(["bare"], commits)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {synchronous}")
        connection.execute(
            "INSERT INTO sessions (session, incarnation, created_at) VALUES (?, 1, 0)", ("bare",)
        )
        if grown:
            # Frames for the room, then a checkpoint that lets the next commit
            # restart the WAL from its start, over the room's blocks.
            connection.execute("CREATE TABLE room (data BLOB)")
            connection.execute(
                "INSERT INTO room VALUES (zeroblob(?))", (_ROOM_PER_COMMIT * commits,)
            )
            connection.execute("PRAGMA wal_checkpoint(RESTART)")
        start = time.perf_counter()
        for row in rows:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(_INSERT, row)
            connection.execute("COMMIT")
        return (time.perf_counter() - start) / commits
    finally:
        connection.close()


async def _new_journal_file(path: str) -> None:
    # The journal's own schema and indexes, so a bare row costs what a journal row does.
    async with open_journal(f"sqlite:///{path}"):
        pass


def _rounds(
    ours: Callable[[], tuple[float, dict[str, float]]],
    bare: Callable[[], dict[str, float]],
    rounds: int,
) -> dict[str, Any]:
    """Ours then bare, ``rounds`` times; the round with the median ratio, and every
    round's ratio (a drift of the disk's speed falls on both sides of a round)."""
    measured = []
    for _ in range(rounds):
        step, counts = ours()
        floor = bare()
        measured.append((step / floor["bare_commit_seconds"], step, floor, counts))
    ratio, step, floor, counts = sorted(measured, key=lambda m: m[0])[len(measured) // 2]
    return {
        "per_step_seconds": step,
        **floor,
        "ratio": ratio,
        "round_ratios": [m[0] for m in measured],
        **counts,
    }


def step_beside_floor(
    synchronous: str, *, steps: int, rounds: int, directory: str, progress: Progress
) -> dict[str, Any]:
    """A SQLite tool step at ``synchronous`` beside a bare commit, median of ``rounds``."""

    def ours() -> tuple[float, dict[str, float]]:
        path = os.path.join(directory, f"ours-{time.perf_counter_ns()}.db")
        return trio.run(_our_steps, f"sqlite:///{path}?synchronous={synchronous}", steps)

    progress(f"floor: sqlite {synchronous}, {rounds} round(s) of {steps} steps and commits")

    def bare() -> dict[str, float]:
        # The floor is the cheaper of the two: at FULL the grown WAL, at NORMAL (no
        # sync per commit) the difference is noise and the restart's one sync shows.
        grown = _sqlite_bare(directory, synchronous, steps, grown=True)
        fresh = _sqlite_bare(directory, synchronous, steps, grown=False)
        return {
            "bare_commit_seconds": min(grown, fresh),
            "bare_grown_wal_seconds": grown,
            "bare_fresh_wal_seconds": fresh,
        }

    row = _rounds(ours, bare, rounds)
    row.update(backend=f"sqlite {synchronous}", steps=steps, load=os.getloadavg()[0])
    row["row_bytes"] = _row_bytes(journal_bench.stored_rows(["bare"], 1)[0])
    return row


def _postgres_server(dsn: str | None) -> AbstractContextManager[str]:
    given = dsn or os.environ.get("LOOPRUNTIME_TEST_PG_DSN")
    if given:
        return nullcontext(given)
    from tests.support.pgserver import temporary_server

    return temporary_server(durable=True)


def _postgres_rows(
    steps: int, rounds: int, dsn: str | None, progress: Progress
) -> Iterator[dict[str, Any]]:
    from journal.postgres import init_schema
    from tests.support.pgserver import isolated_schema

    from .postgres import _raw_insert

    with _postgres_server(dsn) as server:

        def ours() -> tuple[float, dict[str, float]]:
            with isolated_schema(server, prefix="floor") as url:
                return trio.run(_our_steps, url, steps)

        def bare() -> dict[str, float]:
            with isolated_schema(server, prefix="floor") as url:
                trio.run(init_schema, url)
                rows = journal_bench.stored_rows(["bare"], steps)
                return {"bare_commit_seconds": _raw_insert(url, rows, 1) / steps}

        progress(f"floor: postgres, {rounds} round(s) of {steps} steps and commits")
        row = _rounds(ours, bare, rounds)
        row.update(backend="postgres", steps=steps, load=os.getloadavg()[0])
        yield row


def run(
    quick: bool = False,
    *,
    postgres: bool = False,
    dsn: str | None = None,
    steps: int | None = None,
    rounds: int | None = None,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """SQLite at FULL and NORMAL, and PostgreSQL with ``postgres`` (on the server at
    ``dsn``, else ``LOOPRUNTIME_TEST_PG_DSN``'s, else a throwaway one with fsync on);
    one dict per row.  ``steps`` and ``rounds`` override the run's sizes."""
    steps = steps or (_QUICK_STEPS if quick else _FULL_STEPS)
    rounds = rounds or (_QUICK_ROUNDS if quick else _FULL_ROUNDS)
    directory = tempfile.mkdtemp(prefix="loopruntime-bench-floor-")
    try:
        rows = [
            step_beside_floor(
                sync, steps=steps, rounds=rounds, directory=directory, progress=progress
            )
            for sync in ("FULL", "NORMAL")
        ]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if postgres:
        rows += _postgres_rows(steps, rounds, dsn, progress)
    for row in rows:
        progress(
            f"floor: {row['backend']}: step {row['per_step_seconds'] * 1e3:.3f} ms, bare "
            f"commit {row['bare_commit_seconds'] * 1e3:.3f} ms, {row['ratio']:.2f}x; "
            f"{row['waits_per_step']:.2f} durable waits a step"
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short run, one round")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL too")
    args = parser.parse_args(argv)
    quiet_logs()
    for row in run(quick=args.quick, postgres=args.postgres):
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
