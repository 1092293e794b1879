"""Large records by reference: a session whose tools return 1 MiB each, stored by
reference (the default threshold) and inline (a threshold no unit reaches), in the same run.

Run ``python -m benchmarks.blobs`` (``--quick`` for fewer results).  Rules: the session
is built once on a memory journal (a real loop: each turn one tool call returning
``size`` bytes of its own, then an answer, with a checkpoint every 100 records); its
records are then appended, 200 per append, into a fresh SQLite file per storage (timed:
``append``), and ``Session.restore`` is timed on a fresh connection (``restore``).
``bytes`` is the file and its WAL on disk after a checkpoint of the WAL.  Row keys:
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import trio

from journal import Draft, Record, open_journal
from journal.blobs import DEFAULT_BLOB_THRESHOLD
from journal.events import ToolCompleted
from loopruntime import Limits, LoopDefinition, ModelRequest, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session

from .harness import Progress, quiet_logs, sqlite_bytes, stderr_progress
from .report import blob_rows

__all__ = ["DEFAULT_COUNT", "QUICK_COUNT", "SIZE", "main", "run"]

DEFAULT_COUNT = 100
QUICK_COUNT = 10
SIZE = 2**20
_INLINE = 2**62
"""A threshold no unit reaches: every record stored whole."""
_BATCH = 200


@tool(permission="allow")
async def produce(ctx: ToolContext, *, n: int, size: int) -> str:
    """A result of ``size`` bytes that differs from every other (its number first)."""
    head = f"result {n}: "
    return head + "z" * (size - len(head))


def _script(size: int) -> Any:
    def reply(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="ok")
        n = len(request.messages)
        return Reply(tool_calls=[ToolCall(name="produce", input={"n": n, "size": size})])

    return reply


def definition(size: int = SIZE) -> LoopDefinition:
    return LoopDefinition(
        name="bench-blobs",
        model=ScriptedModel(_script(size)),
        tools=[produce],
        limits=Limits(compact_at=None, max_tool_result_bytes=2 * size),
    )


async def _build(count: int, size: int) -> tuple[str, list[Record]]:
    async with open_journal("memory:") as memory:
        async with Session.create(memory, definition(size), checkpoint_every=100) as session:
            for _ in range(count):
                await session.submit("produce")
                await session.wait_idle()
        return session.id, [r async for r in memory.read(session.id)]


async def _measure(
    path: str, session_id: str, records: list[Record], threshold: int, size: int
) -> dict[str, Any]:
    url = f"sqlite:///{path}"
    async with open_journal(url, blob_threshold=threshold) as journal:
        lease = await journal.open_session(session_id)
        start = time.perf_counter()
        for i in range(0, len(records), _BATCH):
            drafts = [
                Draft(id=r.id, loop=r.loop, event=r.event, cause=r.cause)
                for r in records[i : i + _BATCH]
            ]
            await journal.append(lease, drafts, expected_seq=i)
        append = time.perf_counter() - start
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        blobs = conn.execute(
            "SELECT count(*), coalesce(sum(length(body)), 0) FROM blobs"
        ).fetchone()
    finally:
        conn.close()
    stored = sqlite_bytes(path)
    async with open_journal(url, blob_threshold=threshold) as journal:
        start = time.perf_counter()
        async with Session.restore(journal, session_id, definition(size)) as session:
            restore = time.perf_counter() - start
            state = await session.snapshot()
    if state.last_seq != len(records):
        raise RuntimeError(f"restore folded up to seq {state.last_seq}, not {len(records)}")
    return {
        "storage": "by reference" if threshold < _INLINE else "inline",
        "threshold": threshold if threshold < _INLINE else None,
        "records": len(records),
        "results": sum(isinstance(r.event, ToolCompleted) for r in records),
        "result_bytes": size,
        "append_seconds": append,
        "restore_seconds": restore,
        "bytes": stored,
        "blobs": blobs[0],
        "blob_bytes": blobs[1],
    }


def run(
    *,
    quick: bool = False,
    count: int | None = None,
    size: int = SIZE,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """One row per storage (by reference, inline), the same session in both."""
    count = count if count is not None else QUICK_COUNT if quick else DEFAULT_COUNT
    session_id, records = trio.run(_build, count, size)
    progress(f"built a session of {len(records)} records with {count} results of {size} B")
    rows = []
    with tempfile.TemporaryDirectory(prefix="loopruntime-bench-blobs-") as directory:
        for name, threshold in (("ref", DEFAULT_BLOB_THRESHOLD), ("inline", _INLINE)):
            path = os.path.join(directory, f"{name}.db")
            row = trio.run(_measure, path, session_id, records, threshold, size)
            progress(
                f"{row['storage']}: append {row['append_seconds']:.3f} s, restore "
                f"{row['restore_seconds']:.3f} s, {row['bytes'] / 2**20:.1f} MiB"
            )
            rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.blobs", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_COUNT} results")
    args = parser.parse_args(argv)
    quiet_logs()
    print("\n".join(blob_rows(run(quick=args.quick))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
