"""A host taking over a dead host's sessions: how long until every one is
running again, beside reading their checkpoints and tails bare.

Rules: every session is a real agent loop's history (``restore.build_session``)
checkpointed at rest the way a host passivates it, copied under ``count`` ids;
a "dead host" holds each under a lease that has expired, with the definition
recorded beside it (as a host's ``Create`` leaves it).  The heir is a ``Host``
in this process; its clock runs from ``Host.open`` until every session is
restored and served, and the margin a host waits before taking an expired
lease (``Host.lease_margin``, a safety wait, not work) is taken off.  The bare
floor, on the same backend in the same run, selects each session's checkpoint
records and the records after the last one and decodes every body, one
session after another, in one thread: no lease, no chain check, no fold.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import trio

from journal import Draft, Journal, Record, open_journal
from journal.events import Event
from session import Host, Session
from session.embedded.checkpoints import read_restored

from .restore import build_session
from .restore import definition as history_definition
from .rows import target_row as _row

__all__ = ["DEFINITION", "copy_sessions", "run_takeover"]

Progress = Callable[[str], None]
DEFINITION = "bench-restore"
_DEAD_HOST = "dead-host"
_LEASE_TTL = 5.0
"""The heir's lease: long enough that no renewal round falls inside the timed activation."""
_COPY_BATCH = 2_000
_COPIERS = 8

_decode = msgspec.msgpack.Decoder(Event).decode

_SQLITE_CHAIN = (
    "SELECT r.seq, r.body FROM checkpoints AS c JOIN records AS r"
    " ON r.session = c.session AND r.seq = c.seq WHERE c.session = ? ORDER BY c.seq"
)
_SQLITE_TAIL = "SELECT body FROM records WHERE session = ? AND seq > ? ORDER BY seq"
_PG_CHAIN = (
    "SELECT r.seq, r.body FROM loopruntime_checkpoints AS c JOIN loopruntime_records AS r"
    " ON r.session = c.session AND r.seq = c.seq WHERE c.session = %s ORDER BY c.seq"
)
_PG_TAIL = "SELECT body FROM loopruntime_records WHERE session = %s AND seq > %s ORDER BY seq"


async def history(records: int) -> list[Record]:
    """A session of about ``records`` records, checkpointed at rest (what a
    host's passivation leaves), every record of it in order."""
    async with open_journal("memory:") as memory:
        sid, _ = await build_session(memory, records)
        lease = await memory.acquire(sid, "builder", ttl=60)
        async with Session.restore(memory, sid, history_definition(), lease=lease) as s:
            await s._writer.checkpoint_at_rest(1)  # what a host's passivation does
        await memory.release(lease)
        return [r async for r in memory.read(sid)]


async def copy_sessions(journal: Journal, records: Sequence[Record], count: int) -> list[str]:
    """``records`` written as ``count`` sessions of ``journal``, each then held
    by a dead host under an expired lease; their ids."""
    sids = [f"to_{i:05d}" for i in range(count)]

    async def copy(share: Sequence[str]) -> None:
        for sid in share:
            await _copy_one(journal, records, sid)

    async with trio.open_nursery() as nursery:
        for k in range(_COPIERS):
            nursery.start_soon(copy, sids[k::_COPIERS])
    await trio.sleep(0.01)  # past the dead host's last expiry
    return sids


async def _copy_one(journal: Journal, records: Sequence[Record], sid: str) -> None:
    lease = await journal.open_session(sid)
    for i in range(0, len(records), _COPY_BATCH):
        drafts = [
            Draft(id=r.id, loop=r.loop, event=r.event, cause=r.cause)
            for r in records[i : i + _COPY_BATCH]
        ]
        await journal.append(lease, drafts, expected_seq=i)
    await journal.release(lease)
    await journal.acquire(sid, _DEAD_HOST, ttl=0.001, definition=DEFINITION)


async def _heir(journal: Journal, count: int) -> tuple[float, float]:
    """Seconds from ``Host.open`` until all ``count`` sessions are served
    here; the host's lease margin (included in them)."""
    start = time.perf_counter()
    async with Host.open(
        journal,
        {DEFINITION: history_definition()},
        host_id="heir",
        lease_ttl=_LEASE_TTL,
        poll=0.05,
        idle_after=600,
        max_sessions=count,
    ) as host:
        # Polled: a held session's ``session`` is set once its restore is done,
        # and no event says so from outside the host.
        while sum(1 for h in host.sessions.values() if h.session is not None) < count:  # noqa: ASYNC110
            await trio.sleep(0.005)
        seconds = time.perf_counter() - start
        margin = host.lease_margin
        taken = host.statistics().failovers
    if taken != count:
        raise RuntimeError(f"the heir took {taken} sessions over from the dead host, not {count}")
    return seconds, margin


def _bare_sqlite(path: str, sids: Sequence[str]) -> tuple[float, int]:
    conn = sqlite3.connect(path)
    try:
        start = time.perf_counter()
        n = 0
        for sid in sids:
            last = 0
            for seq, body in conn.execute(_SQLITE_CHAIN, (sid,)):
                _decode(body)
                last, n = seq, n + 1
            for (body,) in conn.execute(_SQLITE_TAIL, (sid, last)):
                _decode(body)
                n += 1
        return time.perf_counter() - start, n
    finally:
        conn.close()


def _bare_postgres(url: str, sids: Sequence[str]) -> tuple[float, int]:
    import psycopg

    with psycopg.connect(url) as conn, conn.cursor(binary=True) as cur:
        start = time.perf_counter()
        n = 0
        for sid in sids:
            last = 0
            cur.execute(_PG_CHAIN, (sid,))
            for seq, body in cur.fetchall():
                _decode(body)
                last, n = seq, n + 1
            cur.execute(_PG_TAIL, (sid, last))
            for (body,) in cur.fetchall():
                _decode(body)
                n += 1
        return time.perf_counter() - start, n


async def _journal_read(url: str, sids: Sequence[str]) -> float:
    """Seconds for the journal to read every session's checkpoints and tail
    and fold them (``read_restored``, what a restore starts with), all at
    once as the heir's restores run: the journal's share of the heir's time."""
    async with open_journal(url) as journal:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for sid in sids:
                nursery.start_soon(read_restored, journal, sid)
        return time.perf_counter() - start


async def _dead_again(url: str, sids: Sequence[str]) -> None:
    """Every session held by the dead host again, under an expired lease."""
    async with open_journal(url) as journal:
        for sid in sids:
            await journal.acquire(sid, _DEAD_HOST, ttl=0.001, definition=DEFINITION)
    await trio.sleep(0.01)


async def run_takeover(
    url: str,
    backend: str,
    records: Sequence[Record],
    count: int,
    progress: Progress,
    *,
    repeats: int = 3,
) -> list[dict[str, Any]]:
    """The takeover rows for the (empty) journal at ``url``: ``backend`` is
    ``sqlite`` (``url`` a file's) or ``postgres``; ``repeats`` takeovers,
    each beside a bare read, the median of the ratios."""
    async with open_journal(url) as journal:
        progress(f"takeover ({backend}): writing {count} sessions of {len(records)} records")
        sids = await copy_sessions(journal, records, count)
        checkpoints = len(await journal.checkpoints(sids[0]))
    pairs: list[tuple[float, float]] = []
    for n in range(repeats):
        progress(f"takeover ({backend}): bare read, then an heir takes {count} over, run {n + 1}")
        if backend == "sqlite":
            path = url.removeprefix("sqlite:///")
            bare, read = await trio.to_thread.run_sync(_bare_sqlite, path, sids)
        else:
            bare, read = await trio.to_thread.run_sync(_bare_postgres, url, sids)
        async with open_journal(url) as journal:
            seconds, margin = await _heir(journal, count)
        pairs.append((seconds - margin, bare))
        await _dead_again(url, sids)
    journal_read = await _journal_read(url, sids)
    ratios = sorted(heir / bare for heir, bare in pairs)
    ratio = _median(ratios)
    worked, bare = _median([h for h, _ in pairs]), _median([b for _, b in pairs])
    load = os.getloadavg()[0]
    note = (
        f"{count} sessions of {len(records):,} records ({checkpoints} checkpoint record(s) "
        f"each, checkpointed at rest; the bare read decodes {read:,} rows), {backend}; "
        f"heir timed from Host.open less its lease margin {margin:.2f} s; median of "
        f"{repeats}: heir {worked:.3f} s, bare {bare:.3f} s, ratios "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + f"; load average {load:.1f}"
    )
    per_session = f"{worked / count * 1e3:.2f} ms a session, bare {bare / count * 1e3:.2f} ms"
    return [
        _row(
            f"takeover of {count:,} sessions ({backend}): heir serves all",
            worked,
            "s",
            "",
            None,
            per_session,
        ),
        _row(
            f"takeover of {count:,} sessions ({backend}): heir / bare read",
            ratio,
            "x",
            "<= 2 x",
            ratio <= 2.0,
            note,
        ),
        _row(
            f"takeover of {count:,} sessions ({backend}): journal read (read_restored) / bare read",
            journal_read / bare,
            "x",
            "",
            None,
            f"every session's checkpoints and tail read, verified and folded, all at once: "
            f"{journal_read:.3f} s; the rest of the heir's time is leases and starting sessions",
        ),
    ]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
