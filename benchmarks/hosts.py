"""The hosts section: failover, activation, passivated sessions' memory,
throughput of one and two hosts, the inbox round trip, and issue 39's two
host figures (a takeover of many sessions, ``benchmarks.takeover``; the
scale-out overhead of two hosts, ``benchmarks.scaleout``; a SyncClient's
put beside a Client's, ``benchmarks.hops``).

Rules: each scenario returns one row per figure, ``{"benchmark", "value",
"unit", "target", "met", "note", ...}`` (``met`` None when no target applies),
which ``report`` prints beside its target.  Hosts that must die or run on
their own cores are child processes of this module (``python -m
benchmarks.hosts host URL HOST_ID KIND LEASE_TTL``); everything else runs in
this process.  Real SQLite files and, for the throughput, a real PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel

from journal import Journal, Record, open_journal
from journal.content import ToolResult
from journal.events import InputQueued, ToolStarted, TurnEnded
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Client, Host, Session

from . import hops, takeover
from .harness import quiet_logs
from .loops import _percentile, _rss
from .restore import build_session
from .restore import definition as history_definition
from .rows import target_row as _row

__all__ = ["run"]

Progress = Callable[[str], None]
MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]


async def drive_turns(client: Client, journal: Journal, sid: str, turns: int) -> None:
    """Submit ``turns`` messages one after another, each once the last turn ended.

    Reads on from the last record seen, never the whole session again: the
    driver's own load stays small beside the hosts'."""
    seen = await journal.head(sid)
    for turn in range(1, turns + 1):
        await client.submit(sid, f"turn {turn}", key=f"s{turn}")
        ended = False
        while not ended:
            await trio.sleep(0.02)
            async for record in journal.read(sid, after=seen):
                seen = record.seq
                ended = ended or isinstance(record.event, TurnEnded)


# -- definitions (the child hosts and this process share them) ---------------------------


def definitions(kind: str) -> dict[str, LoopDefinition]:
    """``fo``: each turn calls the replay-safe ``fetch`` once (which never
    returns when ``kind`` is ``hang``: the host to be killed); ``w20``: a
    model that waits 20 ms per reply and answers."""

    @tool(permission="allow", replay_safe=True)
    async def fetch(ctx: ToolContext) -> str:
        """Fetch (safe to run again)."""
        if kind == "hang":
            await trio.sleep_forever()
        return "fetched"

    def fo_script(request: ModelRequest) -> Reply:
        if any(isinstance(b, ToolResult) for b in request.messages[-1].blocks):
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="fetch")])

    def w20_script(request: ModelRequest) -> Reply:
        return Reply(text="answered after a wait", chunk_size=64, chunk_delay=0.02)

    return {
        "fo": LoopDefinition(name="fo", model=ScriptedModel(fo_script), tools=[fetch]),
        "w20": LoopDefinition(name="w20", model=ScriptedModel(w20_script)),
    }


async def _child_host(url: str, host_id: str, kind: str, lease_ttl: str, poll: str) -> None:
    quiet_logs()
    async with open_journal(url) as journal:
        async with Host.open(
            journal,
            definitions(kind),
            host_id=host_id,
            lease_ttl=float(lease_ttl),
            poll=float(poll),
            idle_after=30,
        ):
            await trio.sleep_forever()


async def _start_host(
    url: str, host_id: str, kind: str, lease_ttl: float, poll: float = 0.05
) -> trio.Process:
    return await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "benchmarks.hosts",
            "host",
            url,
            host_id,
            kind,
            str(lease_ttl),
            str(poll),
        ],
        cwd=ROOT,
    )


async def _wait(predicate: Callable[[], Any], poll: float = 0.01) -> None:
    # Polled: the state is in a journal other processes write.
    while not await predicate():  # noqa: ASYNC110 - no event crosses processes
        await trio.sleep(poll)


async def _count(journal: Journal, session: str, kind: type) -> int:
    return len([r async for r in journal.read(session) if isinstance(r.event, kind)])


# -- failover -----------------------------------------------------------------------------


async def failover(directory: Path, sessions: int, lease_ttl: float) -> list[dict[str, Any]]:
    """A host holding ``sessions`` sessions, each with a tool call running, is
    SIGKILLed; a second host (running already) takes them once the leases
    expire.  Per session: from the kill to the first record the new owner wrote."""
    url = f"sqlite:///{directory / 'failover.db'}"
    async with open_journal(url) as journal:
        client = Client(journal)
        sids = [await client.create("fo", key="c") for _ in range(sessions)]
        for sid in sids:
            await client.submit(sid, "go", key="s")
        victim = await _start_host(url, "victim", "hang", lease_ttl)
        try:
            for sid in sids:
                await _wait(partial(_count, journal, sid, ToolStarted))
            async with Host.open(
                journal, definitions("heir"), host_id="heir", lease_ttl=lease_ttl, poll=0.05
            ):
                heads = {sid: await journal.head(sid) for sid in sids}
                os.kill(victim.pid, signal.SIGKILL)
                killed = time.time_ns()
                await victim.wait()
                samples: list[float] = []
                for sid in sids:
                    await _wait(partial(_moved, journal, sid, heads[sid]))
                    [first, *_] = [r async for r in journal.read(sid, after=heads[sid])]
                    samples.append((first.at - killed) / 1e9)
        finally:
            if victim.returncode is None:
                victim.kill()
                await victim.wait()
    p50, p99 = _percentile(samples, 0.5), _percentile(samples, 0.99)
    bound = 1.5 * lease_ttl
    note = f"{sessions} sessions, lease_ttl {lease_ttl:g} s, poll 0.05 s, SQLite"
    return [
        _row(
            "failover: kill to first record of the new owner, p50", p50 * 1e3, "ms", "", None, note
        ),
        _row(
            "failover: kill to first record of the new owner, p99",
            p99 * 1e3,
            "ms",
            f"<= 1.5 x lease_ttl ({bound * 1e3:.0f} ms)",
            p99 <= bound,
            note,
        ),
    ]


async def _moved(journal: Journal, session: str, head: int) -> bool:
    return await journal.head(session) > head


# -- activation ---------------------------------------------------------------------------


async def activation(
    directory: Path, sizes: Sequence[int], repeats: int, progress: Progress
) -> list[dict[str, Any]]:
    """A passivated session of ``n`` records activated as a host does it: the
    lease taken, the session restored from its checkpoints, ready for its
    inbox; then shut down and released again.  Twice: as the session was
    written (the writer's checkpoint every 1,000 records, up to a thousand
    records after the last to fold), then once a host has passivated it
    (which checkpoints a session at rest: nothing after it to fold)."""
    rows: list[dict[str, Any]] = []
    for n in sizes:
        progress(f"activation: building a session of ~{n} records")
        url = f"sqlite:///{directory / f'activation-{n}.db'}"
        async with open_journal(url) as journal:
            sid, records = await build_session(journal, n)
            count = len(records)
            del records
            chain = await journal.checkpoints(sid)
            tail = await journal.head(sid) - (chain[-1].seq if chain else 0)
            as_written = await _activations(journal, sid, repeats)
            lease = await journal.acquire(sid, "bench", ttl=30)
            async with Session.restore(journal, sid, history_definition(), lease=lease) as s:
                await s._writer.checkpoint_at_rest(1)  # what Host's passivation does
            await journal.release(lease)
            passivated = await _activations(journal, sid, repeats)
        at_target = n >= 10_000
        for times, how in (
            (as_written, f"as written ({tail} after its last checkpoint)"),
            (passivated, "by a host (checkpointed at rest)"),
        ):
            p50 = _percentile(times, 0.5)
            target = at_target and times is passivated
            rows.append(
                _row(
                    f"activation of a passivated session of {count:,} records, {how}, p50",
                    p50 * 1e3,
                    "ms",
                    "<= 20 ms (10,000 records, SQLite)" if target else "",
                    p50 <= 0.020 if target else None,
                    f"{repeats} activations, from checkpoints",
                )
            )
    return rows


async def _activations(journal: Journal, sid: str, repeats: int) -> list[float]:
    times: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        lease = await journal.acquire(sid, "bench", ttl=30)
        async with Session.restore(journal, sid, history_definition(), lease=lease):
            times.append(time.perf_counter() - start)
        await journal.release(lease)
    return times


# -- memory of passivated sessions ------------------------------------------------------------


async def _make_passivated(url: str, count: int, progress: Progress) -> None:
    async with open_journal(url) as journal:
        done = 0

        async def make(start: int) -> None:
            nonlocal done
            for i in range(start, min(start + 500, count)):
                lease = await journal.acquire(f"p_{i:06d}", "builder", ttl=60, create=True)
                await journal.release(lease)
                done += 1

        async with trio.open_nursery() as nursery:
            for start in range(0, count, 500):
                nursery.start_soon(make, start)
        progress(f"memory: {done} passivated sessions written")


async def _child_memory(url: str) -> None:
    quiet_logs()
    before = _rss()
    async with open_journal(url) as journal:
        async with Host.open(journal, definitions("fo"), host_id="mem", poll=0.05) as host:
            await trio.sleep(1.0)  # twenty looks for work over every session
            after = _rss()
            loaded = len(host.sessions)
    print(json.dumps({"before": before, "after": after, "loaded": loaded}))


async def passivated_memory(
    directory: Path, count: int, progress: Progress
) -> list[dict[str, Any]]:
    """What a host holds with ``count`` passivated sessions in its journal:
    the resident memory of a host process, from before it opened the journal
    to after a second of looking for work."""
    progress(f"memory: writing {count} passivated sessions")
    url = f"sqlite:///{directory / 'passivated.db'}"
    await _make_passivated(url, count, progress)
    done = await trio.run_process(
        [sys.executable, "-m", "benchmarks.hosts", "memory", url], cwd=ROOT, capture_stdout=True
    )
    figures = json.loads(done.stdout)
    grown = (figures["after"] - figures["before"]) / MiB
    return [
        _row(
            f"memory held by {count:,} passivated sessions in a host",
            grown,
            "MiB",
            "< 50 MiB" + ("" if count >= 100_000 else " (at 100,000)"),
            grown < 50 if count >= 100_000 else None,
            f"host process RSS growth, journal opened and polled; {figures['loaded']} loaded",
        )
    ]


# -- throughput of one and two hosts on PostgreSQL --------------------------------------------


async def _throughput(url: str, hosts: int, sessions: int) -> tuple[float, float]:
    """Turns per second of ``hosts`` host processes serving ``_TURNS`` turns in
    each of ``sessions`` sessions (a model that waits 20 ms), each turn
    submitted once the one before ended, every session at once; and how busy
    the machine's cores were meanwhile (0 to 1, every process on it).

    The client watches each session from the last record it read (never the
    whole session again): its polling is load on the cores the hosts need."""
    procs = [await _start_host(url, f"t{i}", "w20", 10.0) for i in range(hosts)]
    try:
        async with open_journal(url) as journal:
            await _wait(partial(_registered, journal, hosts), poll=0.05)
            client = Client(journal)
            sids = [await client.create("w20", key="c") for _ in range(sessions)]
            for sid in sids:
                await client.wait(sid, "c", timeout=120)
            busy = _cpu_busy()
            start = time.perf_counter()

            async with trio.open_nursery() as nursery:
                for sid in sids:
                    nursery.start_soon(drive_turns, client, journal, sid, _TURNS)
            return sessions * _TURNS / (time.perf_counter() - start), busy()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await proc.wait()


_TURNS = 5


def _cpu_busy() -> Callable[[], float]:
    """A clock of the machine's busy share from now (``/proc/stat``; 0 where
    there is none)."""

    def ticks() -> tuple[int, int]:
        try:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:]]
        except OSError:
            return 0, 0
        return sum(values), values[3] + values[4]

    total, idle = ticks()

    def busy() -> float:
        total2, idle2 = ticks()
        spent = total2 - total
        return (spent - (idle2 - idle)) / spent if spent else 0.0

    return busy


async def _registered(journal: Journal, hosts: int) -> bool:
    return sum(1 for h in await journal.hosts() if h.live) >= hosts


async def on_postgres(
    sessions: int, repeats: int, progress: Progress, *, rounds: int = 3
) -> list[dict[str, Any]]:
    """The throughput of one and two hosts (``rounds`` runs of each,
    interleaved, each on a fresh schema: the median of each and of the
    ratios), and the round trip woken by LISTEN/NOTIFY."""
    from benchmarks.postgres import _server
    from tests.support.pgserver import isolated_schema

    found: dict[int, list[float]] = {1: [], 2: []}
    busy: list[float] = []
    with _server() as dsn:
        for n in range(rounds):
            for hosts in (1, 2):
                progress(f"throughput: {hosts} host(s), {sessions} sessions, run {n + 1}")
                with isolated_schema(dsn, prefix="hosts") as url:
                    rate, share = await _throughput(url, hosts, sessions)
                found[hosts].append(rate)
                busy.append(share)
        progress("round trip on PostgreSQL")
        with isolated_schema(dsn, prefix="hosts") as url:
            trips = await round_trip(url, repeats, poll=1.0, label="PostgreSQL, LISTEN/NOTIFY")
    ratios = sorted(two / one for one, two in zip(found[1], found[2], strict=True))
    ratio = _percentile(ratios, 0.5)
    note = (
        f"{sessions} sessions, {_TURNS} turns each, a model that waits 20 ms; host "
        f"processes on PostgreSQL, {os.cpu_count()} cores {min(busy):.0%}-{max(busy):.0%} "
        f"busy during the runs; median of {rounds} interleaved runs, ratios "
        + ", ".join(f"{r:.2f}" for r in ratios)
    )
    return [
        _row("throughput, 1 host", _percentile(sorted(found[1]), 0.5), "turns/s", "", None, note),
        _row("throughput, 2 hosts", _percentile(sorted(found[2]), 0.5), "turns/s", "", None, note),
        _row("throughput, 2 hosts / 1 host", ratio, "x", ">= 1.6 x", ratio >= 1.6, note),
        *trips,
    ]


# -- issue 39: scale-out overhead and a takeover of many sessions --------------------------


async def scale_out(quick: bool, progress: Progress) -> list[dict[str, Any]]:
    """CPU and statements per turn of two host processes beside one (``benchmarks.scaleout``)."""
    from . import scaleout  # it starts this module's child hosts

    sessions, turns, rounds = (10, 3, 1) if quick else (50, 10, 3)
    with scaleout.server() as dsn:
        return await scaleout.run_scaleout(dsn, sessions, turns, rounds, progress)


async def takeover_on_postgres(
    history: Sequence[Record], count: int, repeats: int, progress: Progress
) -> list[dict[str, Any]]:
    """The takeover of ``count`` sessions on a throwaway PostgreSQL (``benchmarks.takeover``)."""
    from benchmarks.postgres import _server
    from tests.support.pgserver import isolated_schema

    with _server() as dsn, isolated_schema(dsn, prefix="takeover") as url:
        return await takeover.run_takeover(
            url, "postgres", history, count, progress, repeats=repeats
        )


# -- the inbox round trip -----------------------------------------------------------------------


async def round_trip(
    url: str, repeats: int, *, poll: float = 0.01, label: str = "SQLite"
) -> list[dict[str, Any]]:
    """From a client's submit to the input's record, through a host (woken by
    the journal where it can, else polling every ``poll`` s), beside a direct
    ``Session.submit`` (call to durable record) on the same journal."""
    defs = definitions("fo")
    inbox: list[float] = []
    direct: list[float] = []
    async with open_journal(url) as journal:
        client = Client(journal)
        async with Host.open(journal, defs, host_id="rt", poll=poll, idle_after=600):
            sid = await client.create("w20", key="c")
            await client.wait(sid, "c", timeout=30)
            for i in range(repeats):
                head = await journal.head(sid)
                start = time.perf_counter()
                await client.submit(sid, f"round {i}", key=f"s{i}")
                await _wait(partial(_queued_after, journal, sid, head), poll=0.0005)
                inbox.append(time.perf_counter() - start)
                await _wait(partial(_ended, journal, sid, i + 1), poll=0.005)
        async with Session.create(journal, defs["w20"]) as session:
            for i in range(repeats):
                start = time.perf_counter()
                await session.submit(f"round {i}")
                direct.append(time.perf_counter() - start)
                await session.wait_idle()
    note = f"{repeats} submits, {label}, host poll {poll * 1e3:g} ms"
    rows = []
    for name, values in (
        (f"inbox ({label}): client submit to input record", inbox),
        (f"direct Session.submit ({label})", direct),
    ):
        for q in (0.5, 0.99):
            rows.append(
                _row(f"{name}, p{int(q * 100)}", _percentile(values, q) * 1e3, "ms", "", None, note)
            )
    return rows


async def _queued_after(journal: Journal, session: str, head: int) -> bool:
    return any([isinstance(r.event, InputQueued) async for r in journal.read(session, after=head)])


async def _ended(journal: Journal, session: str, n: int) -> bool:
    return await _count(journal, session, TurnEnded) >= n


# -- the section -----------------------------------------------------------------------------


def run(
    quick: bool = False,
    progress: Progress = lambda _line: None,
    *,
    postgres: bool = True,
) -> list[dict[str, Any]]:
    """Every hosts figure (the throughput only with ``postgres``)."""

    async def main() -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="bench-hosts-") as work:
            directory = Path(work)
            rows: list[dict[str, Any]] = []
            progress("failover")
            rows += await failover(directory, sessions=5 if quick else 20, lease_ttl=1.0)
            rows += await activation(
                directory, (1_000, 10_000), repeats=3 if quick else 10, progress=progress
            )
            rows += await passivated_memory(directory, 2_000 if quick else 100_000, progress)
            rows += await round_trip(
                f"sqlite:///{directory / 'round-trip.db'}", repeats=20 if quick else 100
            )
            history = await takeover.history(1_000)
            count, repeats = (100, 1) if quick else (1_000, 3)
            rows += await takeover.run_takeover(
                f"sqlite:///{directory / 'takeover.db'}",
                "sqlite",
                history,
                count,
                progress,
                repeats=repeats,
            )
            if postgres:
                rows += await on_postgres(
                    20 if quick else 200, 20 if quick else 100, progress, rounds=1 if quick else 3
                )
                rows += await takeover_on_postgres(history, count, repeats, progress)
                rows += await scale_out(quick, progress)
            return rows

    rows = trio.run(main)
    # Outside the run above: a SyncClient's caller is a thread without a trio run.
    with tempfile.TemporaryDirectory(prefix="bench-hops-") as work:
        rows += hops.run_hops(Path(work), 50 if quick else 300, 1 if quick else 3, progress)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "host":
        url, host_id, kind, lease_ttl, poll = args[1:6]
        trio.run(_child_host, url, host_id, kind, lease_ttl, poll)
        return 0
    if args and args[0] == "memory":
        trio.run(_child_memory, args[1])
        return 0
    for row in run(quick="--quick" in args, progress=lambda line: print(line, file=sys.stderr)):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
