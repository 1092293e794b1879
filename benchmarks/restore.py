"""Restore: how long a session of N records takes to come back, beside the bare floor.

Run ``python -m benchmarks.restore`` (``--quick`` for a short run).  Rules: the history
is a real agent loop's, cut at a turn boundary so restore has nothing to settle; every
timed restore starts on a fresh copy of the file and a fresh connection (restore may
append); the floor is one thread reading and decoding every row.  Row keys and what each
figure times: ``benchmarks/README.md``; the peers' rows are joined to these by
``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import trio

from journal import Draft, Journal, Record, encode_event, open_journal
from journal.content import ToolResult
from journal.events import CHECKPOINT_STREAM, Event, TurnEnded
from loopruntime import Limits, LoopDefinition, ModelRequest
from loopruntime.models import Reply, ToolCall
from session import Session
from session.embedded.checkpoints import DEFAULT_EVERY, read_restored

from . import tables
from .harness import Progress, forgetful_model, lookup, quiet_logs, sqlite_bytes, stderr_progress

__all__ = [
    "DEFAULT_SIZES",
    "QUICK_SIZES",
    "build_session",
    "main",
    "restore_once",
    "run",
]

DEFAULT_SIZES: tuple[int, ...] = (1_000, 10_000, 100_000)
QUICK_SIZES: tuple[int, ...] = (1_000, 10_000)
_STEPS_PER_TURN = 10
_COPY_BATCH = 2_000


def _history_script(request: ModelRequest) -> Reply:
    """Ten tool calls, then an answer, every turn: O(1), it looks at the turn so far only.

    The turn's progress is the number of messages since the last user text message,
    which the request carries at its end; counting back stops at that message.
    """
    calls = 0
    for message in reversed(request.messages):
        if message.role == "assistant":
            calls += 1
        elif not any(isinstance(block, ToolResult) for block in message.blocks):
            break
        if calls >= _STEPS_PER_TURN:
            return Reply(text="done")
    return Reply(tool_calls=[ToolCall(name="lookup", input={"query": f"step {calls}"})])


def definition() -> LoopDefinition:
    return LoopDefinition(
        name="bench-restore",
        model=forgetful_model(_history_script),
        tools=[lookup],
        limits=Limits(compact_at=None),
    )


async def build_session(journal: Journal, n_records: int) -> tuple[str, list[Record]]:
    """Run turns on a memory journal until it holds ``n_records``; return the id and the
    records up to the last ``turn.ended`` at or below ``n_records``, copied into
    ``journal`` (checkpoint records included, at the same seqs)."""
    async with open_journal("memory:") as memory:
        async with Session.create(memory, definition(), checkpoint_every=DEFAULT_EVERY) as session:
            while True:
                await session.submit("go on")
                await session.wait_idle()
                if await memory.head(session.id) >= n_records:
                    break
        records = [r async for r in memory.read(session.id)]
    ends = [i + 1 for i, r in enumerate(records[:n_records]) if isinstance(r.event, TurnEnded)]
    if not ends:
        raise ValueError(f"{n_records} records do not hold one whole turn; ask for more")
    records = records[: ends[-1]]
    lease = await journal.open_session(session.id)
    for i in range(0, len(records), _COPY_BATCH):
        drafts = [
            Draft(id=r.id, loop=r.loop, event=r.event, cause=r.cause)
            for r in records[i : i + _COPY_BATCH]
        ]
        await journal.append(lease, drafts, expected_seq=i)
    return session.id, records


def _bare_read(path: str, session_id: str) -> tuple[float, int]:
    """Seconds for the floor: select every record column in seq order, decode each body."""
    decode = msgspec.msgpack.Decoder(Event).decode
    conn = sqlite3.connect(path)
    try:
        start = time.perf_counter()
        cursor = conn.execute(
            "SELECT seq, id, loop, at, cause, digest, body FROM records"
            " WHERE session = ? ORDER BY seq",
            (session_id,),
        )
        n = 0
        while rows := cursor.fetchmany(4096):
            for row in rows:
                decode(row[6])
            n += len(rows)
        return time.perf_counter() - start, n
    finally:
        conn.close()


async def restore_once(
    url: str, session_id: str, expect: int, *, use_checkpoints: bool
) -> tuple[float, int]:
    """Seconds for ``Session.restore`` to enter its context, on a fresh connection to the
    journal at ``url``; the number of messages in the restored root loop's state."""
    async with open_journal(url) as journal:
        start = time.perf_counter()
        async with Session.restore(
            journal, session_id, definition(), use_checkpoints=use_checkpoints
        ) as session:
            seconds = time.perf_counter() - start
            state = await session.snapshot()
    if state.last_seq != expect:
        raise RuntimeError(f"restore folded up to seq {state.last_seq}, expected {expect}")
    return seconds, len(state.messages)


async def _fold_once(path: str, session_id: str, *, use_checkpoints: bool) -> tuple[float, int]:
    """Seconds of ``read_restored``, and the seq of the checkpoint it started from."""
    async with open_journal(f"sqlite:///{path}") as journal:
        start = time.perf_counter()
        restored = await read_restored(journal, session_id, use_checkpoints=use_checkpoints)
        return time.perf_counter() - start, restored.checkpoint_seq


async def _checkpoint_figures(path: str, session_id: str, copied: int) -> dict[str, int]:
    """How many checkpoints the file's index holds, their encoded bytes, the last one's seq.

    ``copied`` is how many checkpoint records were copied in: the index must list them
    all, or restore would silently fold everything."""
    async with open_journal(f"sqlite:///{path}") as journal:
        chain = await journal.checkpoints(session_id)
    if len(chain) != copied:
        raise RuntimeError(
            f"the copied file indexes {len(chain)} checkpoints, {copied} were copied in"
        )
    return {
        "checkpoints": len(chain),
        "checkpoint_bytes": sum(len(encode_event(r.event)) for r in chain),
        "last_checkpoint_seq": chain[-1].seq if chain else 0,
    }


def _fresh_copy(source: str, target: str) -> None:
    # Restore may append (loop.stopped on exit, settlement notices): every timed restore
    # starts from the same untouched history.
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(target + suffix):
            os.remove(target + suffix)
    shutil.copyfile(source, target)


async def _measure(directory: str, n: int, repeats: int, progress: Progress) -> dict[str, Any]:
    source = os.path.join(directory, f"restore-{n}.db")
    progress(f"restore: building a session of ~{n} records")
    async with open_journal(f"sqlite:///{source}") as journal:
        session_id, records = await build_session(journal, n)
    # Closing checkpointed the WAL into the file, so copying the file copies everything.
    size = sqlite_bytes(source)
    count = len(records)
    copied = sum(1 for r in records if r.loop == CHECKPOINT_STREAM)
    del records
    cp = await _checkpoint_figures(source, session_id, copied)
    if count >= 10_000 and not cp["checkpoints"]:
        raise RuntimeError(f"a session of {count} records has no checkpoint in its file")
    last_cp = cp["last_checkpoint_seq"]
    target = os.path.join(directory, f"restore-{n}-copy.db")
    restore_s: list[float] = []
    full_s: list[float] = []
    fold_s: list[float] = []
    full_fold_s: list[float] = []
    floor_s: list[float] = []
    messages = 0
    progress(f"restore: {count} records, {cp['checkpoints']} checkpoints, {repeats} repetition(s)")
    # Untimed: the first restore of a process pays for first uses (imports, caches), which
    # a single timed repetition (--quick) would charge to whichever way ran first.
    url = f"sqlite:///{target}"
    _fresh_copy(source, target)
    await restore_once(url, session_id, count, use_checkpoints=True)
    for _ in range(repeats):
        _fresh_copy(source, target)
        seconds, messages = await restore_once(url, session_id, count, use_checkpoints=True)
        restore_s.append(seconds)
        _fresh_copy(source, target)
        seconds, full_messages = await restore_once(url, session_id, count, use_checkpoints=False)
        full_s.append(seconds)
        if full_messages != messages:
            raise RuntimeError(
                f"restore from checkpoints holds {messages} messages, the full fold {full_messages}"
            )
        seconds, started = await _fold_once(source, session_id, use_checkpoints=True)
        if started != last_cp:
            raise RuntimeError(
                f"the fold started from seq {started}, the last checkpoint is at {last_cp}"
            )
        fold_s.append(seconds)
        seconds, _ = await _fold_once(source, session_id, use_checkpoints=False)
        full_fold_s.append(seconds)
        floor, read = await trio.to_thread.run_sync(_bare_read, source, session_id)
        if read != count:
            raise RuntimeError(f"the bare read found {read} records, expected {count}")
        floor_s.append(floor)
    restore, full, floor = min(restore_s), min(full_s), min(floor_s)
    progress(
        f"restore: {count} records in {restore:.3f} s, full fold {full:.3f} s (floor {floor:.3f} s)"
    )
    return {
        "scenario": "restore",
        "system": "loopruntime sqlite",
        "records": count,
        "messages": messages,
        "bytes": size,
        "checkpoint_every": DEFAULT_EVERY,
        "checkpoints": cp["checkpoints"],
        "tail_records": count - last_cp,
        "checkpoint_bytes": cp["checkpoint_bytes"],
        "checkpoint_share": cp["checkpoint_bytes"] / size,
        "seconds": restore,
        "records_per_second": count / restore,
        "full_seconds": full,
        "fold_seconds": min(fold_s),
        "full_fold_seconds": min(full_fold_s),
        "floor_seconds": floor,
        "floor_ratio": floor / restore,
        "full_floor_ratio": floor / full,
    }


async def _run(
    directory: str, sizes: Sequence[int], repeats: int, progress: Progress
) -> list[dict[str, Any]]:
    return [await _measure(directory, n, repeats, progress) for n in sizes]


def run(
    quick: bool = False,
    *,
    sizes: Sequence[int] | None = None,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """Restore figures per size; one dict per row (see the module docstring for keys).

    Uses a temporary directory, removed afterwards.
    """
    directory = tempfile.mkdtemp(prefix="loopruntime-bench-restore-")
    try:
        return trio.run(
            _run,
            directory,
            sizes or (QUICK_SIZES if quick else DEFAULT_SIZES),
            1 if quick else 3,
            progress,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.restore", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (smaller sizes)")
    args = parser.parse_args(argv)
    quiet_logs()
    print(tables.restore_table(run(quick=args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
