"""Scale-out overhead: what a turn costs when two host processes share one
PostgreSQL instead of one, under the same load.

Rules: the load is ``sessions`` sessions of ``turns`` turns each (the
``w20`` definition of ``benchmarks.hosts``: a model that waits 20 ms), every
turn submitted once the one before it ended, driven by this process; the
figures are counted over that window only, so each host's start-up is left
out.  Per turn:

* **host CPU**: user + system seconds of every host process, summed, read
  from ``/proc/PID/stat`` before and after the window;
* **statements**: ``pg_stat_statements`` calls made by the hosts' role.  The
  hosts connect as a role of their own (``bench_host``), so the driving
  client's reads and submits, which are the same load for one host or two,
  are not counted; ``pg_stat_database`` counters cannot tell the two apart;
* **server CPU** (information): the CPU of the server backends serving that
  role, from ``/proc`` too (a backend that ended inside the window is lost;
  hosts keep theirs open);
* **a bystander** (information): beside one host, a second one started once
  the first holds every session, connected as a role of its own: its CPU
  (every thread's, from ``/proc/PID/task/*/schedstat``), its ``claimable``
  passes and its wake-ups (context switches) are all a second host costs for
  sessions another host holds.

Runs of one and two hosts alternate, each on a fresh schema, and the report
gives the median of the per-pair ratios with the machine's load average.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import trio

from journal import open_journal
from session import Client

from .hosts import _registered, _start_host, _wait, drive_turns
from .loops import _percentile
from .rows import target_row as _row

__all__ = ["BYSTANDER_ROLE", "HOST_ROLE", "run_scaleout", "server"]

Progress = Callable[[str], None]
HOST_ROLE = "bench_host"
BYSTANDER_ROLE = "bench_bystander"
_TICK = os.sysconf("SC_CLK_TCK")
_POLL = 1.0
"""The hosts' poll: ``Host``'s default; on PostgreSQL LISTEN/NOTIFY wakes them sooner."""
_LEASE_TTL = 10.0


@contextmanager
def server() -> Iterator[str]:
    """A PostgreSQL server that loads ``pg_stat_statements``: the one
    ``LOOPRUNTIME_TEST_PG_DSN`` names (which must load it already), else a
    throwaway one started with it."""
    given = os.environ.get("LOOPRUNTIME_TEST_PG_DSN")
    if given:
        yield given
        return
    from tests.support.pgserver import _cluster

    with _cluster(
        durable=True, settings={"shared_preload_libraries": "pg_stat_statements"}
    ) as cluster:
        yield cluster.dsn


def _prepare(dsn: str) -> bool:
    """The hosts' role made; True when ``pg_stat_statements`` can be read."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT count(*) FROM pg_stat_statements")
            counted = True
        except psycopg.Error:
            counted = False  # not in shared_preload_libraries: the statements go uncounted
        for role in (HOST_ROLE, BYSTANDER_ROLE):
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
            if exists is None:
                # A superuser: the hosts create their tables in the schema the run made.
                conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
    return counted


def _as_role(url: str, role: str = HOST_ROLE) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _thread_cpu(pid: int) -> float:
    """CPU seconds of every thread of process ``pid`` now (nanoseconds, not clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended: its time is lost, as for a backend
    return total / 1e9


def _wakeups(pid: int) -> int:
    """Context switches of every thread of process ``pid``, voluntary or not."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                total += sum(int(line.split(":")[1]) for line in f if "ctxt_switches" in line)
        except OSError:
            pass
    return total


def _backends(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s", (HOST_ROLE,)
        ).fetchall()
    return [pid for (pid,) in rows]


def _reset_statements(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def _statements(dsn: str, role: str = HOST_ROLE) -> dict[str, int]:
    """Calls per statement text made by ``role`` since the last reset."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            # By queryid: a statement psycopg prepared can be kept under another text.
            "SELECT min(s.query), sum(s.calls)::bigint FROM pg_stat_statements AS s"
            " JOIN pg_roles AS r ON r.oid = s.userid WHERE r.rolname = %s GROUP BY s.queryid",
            (role,),
        ).fetchall()
    return {query: calls for query, calls in rows}


def _passes(statements: dict[str, int]) -> int:
    """The ``claimable`` passes among ``statements`` (the query's own CTE names it)."""
    return sum(calls for query, calls in statements.items() if "candidates AS" in query)


class Run:
    """What one run of ``hosts`` host processes measured."""

    def __init__(self, hosts: int, turns: int) -> None:
        self.hosts, self.turns = hosts, turns
        self.seconds = self.host_cpu = self.server_cpu = 0.0
        self.statements: dict[str, int] = {}
        self.bystander_cpu = 0.0
        self.bystander_wakeups = self.bystander_passes = 0

    def per_turn(self, value: float) -> float:
        return value / self.turns


async def one_run(
    dsn: str,
    url: str,
    hosts: int,
    sessions: int,
    turns: int,
    *,
    counted: bool = True,
    bystander: bool = False,
) -> Run:
    """``hosts`` host processes on the journal at ``url`` (a schema of the
    server at ``dsn``) serving ``sessions`` x ``turns`` turns; their
    statements only when ``counted``; with ``bystander``, one more host
    started once they hold every session."""
    run = Run(hosts, sessions * turns)
    procs = [
        await _start_host(_as_role(url), f"s{i}", "w20", _LEASE_TTL, _POLL) for i in range(hosts)
    ]
    try:
        async with open_journal(url) as journal:
            await _wait(partial(_registered, journal, hosts), poll=0.05)
            client = Client(journal)
            sids = [await client.create("w20", key="c") for _ in range(sessions)]
            for sid in sids:
                await client.wait(sid, "c", timeout=120)
            if bystander:
                url_by = _as_role(url, BYSTANDER_ROLE)
                procs.append(await _start_host(url_by, "by", "w20", _LEASE_TTL, _POLL))
                await _wait(partial(_registered, journal, hosts + 1), poll=0.05)
                await trio.sleep(2 * _POLL)  # its first passes are behind it
            by = procs[hosts] if bystander else None
            backends = await trio.to_thread.run_sync(_backends, dsn)
            if counted:
                await trio.to_thread.run_sync(_reset_statements, dsn)
            host_before = sum(_cpu(p.pid) for p in procs[:hosts])
            by_before = (_thread_cpu(by.pid), _wakeups(by.pid)) if by else (0.0, 0)
            server_before = {pid: _cpu(pid) for pid in backends}
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for sid in sids:
                    nursery.start_soon(drive_turns, client, journal, sid, turns)
            run.seconds = time.perf_counter() - start
            run.host_cpu = sum(_cpu(p.pid) for p in procs[:hosts]) - host_before
            if by is not None:
                run.bystander_cpu = _thread_cpu(by.pid) - by_before[0]
                run.bystander_wakeups = _wakeups(by.pid) - by_before[1]
            after = await trio.to_thread.run_sync(_backends, dsn)
            run.server_cpu = sum(_cpu(pid) - server_before.get(pid, 0.0) for pid in after)
            if counted:
                run.statements = await trio.to_thread.run_sync(_statements, dsn)
                if by is not None:
                    made = await trio.to_thread.run_sync(_statements, dsn, BYSTANDER_ROLE)
                    run.bystander_passes = _passes(made)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await proc.wait()
    return run


def _largest_differences(one: list[Run], two: list[Run], count: int = 3) -> str:
    """The statements whose calls per turn grew most from one host to two (summed over runs)."""
    turns1, turns2 = sum(r.turns for r in one), sum(r.turns for r in two)
    texts = {q for r in one + two for q in r.statements}
    grown = []
    for text in texts:
        a = sum(r.statements.get(text, 0) for r in one) / turns1
        b = sum(r.statements.get(text, 0) for r in two) / turns2
        grown.append((b - a, a, b, " ".join(text.split())[:60]))
    grown.sort(reverse=True)
    return "; ".join(f"`{t}` {a:.2f} -> {b:.2f}" for _, a, b, t in grown[:count])


async def run_scaleout(
    dsn: str, sessions: int, turns: int, rounds: int, progress: Progress
) -> list[dict[str, Any]]:
    """The scale-out rows on the server at ``dsn`` (``server()`` gives one
    that counts statements): ``rounds`` interleaved runs of one and of two hosts."""
    from tests.support.pgserver import isolated_schema

    # The third: two hosts each as busy as the one, whose group commits are
    # as full as its (with the same sessions, each host's are half as full).
    configurations = ((1, sessions), (2, sessions), (2, 2 * sessions))
    found: dict[tuple[int, int], list[Run]] = {c: [] for c in configurations}
    beside: list[Run] = []
    loads: list[float] = []
    counted = await trio.to_thread.run_sync(_prepare, dsn)
    for n in range(rounds):
        for hosts, count in configurations:
            progress(f"scale-out: {hosts} host(s), {count} x {turns} turns, run {n + 1}")
            with isolated_schema(dsn, prefix="scale") as url:
                run = await one_run(dsn, url, hosts, count, turns, counted=counted)
            found[hosts, count].append(run)
            loads.append(os.getloadavg()[0])
        progress(f"scale-out: 1 host and a bystander, {sessions} x {turns} turns, run {n + 1}")
        with isolated_schema(dsn, prefix="scale") as url:
            beside.append(
                await one_run(dsn, url, 1, sessions, turns, counted=counted, bystander=True)
            )
    load = f"load average {min(loads):.1f}-{max(loads):.1f}"
    base = (
        f"{sessions} sessions x {turns} turns (model waits 20 ms), host poll {_POLL:g} s, "
        f"lease_ttl {_LEASE_TTL:g} s, PostgreSQL; median of {rounds} interleaved pairs; {load}"
    )
    one, two, busy = (found[c] for c in configurations)
    rows = _rows(one, two, base, counted)
    cpu_ratio, cpu_ratios = _median_ratio(one, busy, _host_cpu)
    rows.append(
        _row(
            "scale-out: host CPU per turn, 2 hosts with twice the sessions / 1 host",
            cpu_ratio,
            "x",
            "",
            None,
            f"each host as busy as the one: {2 * sessions} sessions; ratios {cpu_ratios}",
        )
    )
    if counted:
        ratio, ratios = _median_ratio(one, busy, _statements_made)
        rows.append(
            _row(
                "scale-out: statements per turn, 2 hosts with twice the sessions / 1 host",
                ratio,
                "x",
                "",
                None,
                f"{_median(busy, _statements_made):.1f} per turn; ratios {ratios}",
            )
        )
    rows.append(_bystander_row(beside, counted))
    return rows


def _bystander_row(runs: list[Run], counted: bool) -> dict[str, Any]:
    passes = (
        f"{_median(runs, lambda r: r.per_turn(r.bystander_passes)):.3f} claimable passes"
        if counted
        else "passes not counted"
    )
    return _row(
        "scale-out: a bystander host's CPU per turn (it holds no session)",
        _median(runs, lambda r: r.per_turn(r.bystander_cpu)) * 1e3,
        "ms",
        "",
        None,
        f"beside one host holding every session; per turn {passes} and "
        f"{_median(runs, lambda r: r.per_turn(r.bystander_wakeups)):.2f} wake-ups "
        "(context switches); what a second host costs for sessions another holds",
    )


def _median(runs: list[Run], value: Callable[[Run], float]) -> float:
    return _percentile(sorted(value(r) for r in runs), 0.5)


def _median_ratio(
    one: list[Run], two: list[Run], value: Callable[[Run], float]
) -> tuple[float, str]:
    """The median of the pairs' ratios (two hosts / one), and every ratio."""
    ratios = sorted(
        value(b) / value(a) if value(a) else math.inf for a, b in zip(one, two, strict=True)
    )
    return _percentile(ratios, 0.5), ", ".join(f"{r:.2f}" for r in ratios)


def _host_cpu(run: Run) -> float:
    return run.per_turn(run.host_cpu)


def _server_cpu(run: Run) -> float:
    return run.per_turn(run.server_cpu)


def _statements_made(run: Run) -> float:
    return run.per_turn(sum(run.statements.values()))


def _rows(one: list[Run], two: list[Run], base: str, counted: bool) -> list[dict[str, Any]]:
    cpu_ratio, cpu_ratios = _median_ratio(one, two, _host_cpu)
    server_ratio, _ = _median_ratio(one, two, _server_cpu)
    c1, c2 = _median(one, _host_cpu), _median(two, _host_cpu)
    s1, s2 = _median(one, _server_cpu), _median(two, _server_cpu)
    # With a core per host and the server's cores to spare, each host runs
    # as fast as its CPU per turn allows: two hosts do 2 / (their CPU per
    # turn relative to one host's) times the turns, until the server's cores fill.
    # A run too short for one clock tick on either side has no ratio to divide by.
    speedup = 2 / cpu_ratio if cpu_ratio else math.inf
    server_ceiling = f"{1 / s2:,.0f}" if s2 > 0 else "(not measured)"
    rows = [
        _row("scale-out: host CPU per turn, 1 host", c1 * 1e3, "ms", "", None, base),
        _row("scale-out: host CPU per turn, 2 hosts", c2 * 1e3, "ms", "", None, base),
        _row(
            "scale-out: host CPU per turn, 2 hosts / 1 host",
            cpu_ratio,
            "x",
            "<= 1.15 x",
            cpu_ratio <= 1.15,
            f"{base}; ratios {cpu_ratios}",
        ),
    ]
    if counted:
        ratio, ratios = _median_ratio(one, two, _statements_made)
        rows.append(
            _row(
                "scale-out: statements per turn, 2 hosts / 1 host",
                ratio,
                "x",
                "<= 1.10 x",
                ratio <= 1.10,
                f"{_median(one, _statements_made):.1f} and {_median(two, _statements_made):.1f} "
                f"per turn (pg_stat_statements, the hosts' role only); ratios {ratios}; "
                "grew most: " + _largest_differences(one, two),
            )
        )
    else:
        rows.append(
            _row(
                "scale-out: statements per turn, 2 hosts / 1 host",
                0.0,
                "x",
                "<= 1.10 x",
                None,
                "not counted: the server does not load pg_stat_statements",
            )
        )
    rows += [
        _row(
            "scale-out: server CPU per turn, 2 hosts / 1 host",
            server_ratio,
            "x",
            "",
            None,
            f"{s1 * 1e3:.2f} and {s2 * 1e3:.2f} ms per turn in the hosts' backends",
        ),
        _row(
            "scale-out: projected speed-up of 2 hosts with cores to spare",
            speedup,
            "x",
            "",
            None,
            "2 / the CPU ratio: each host CPU-bound on a core of its own, sessions split "
            f"evenly, the server not the bottleneck (its backends' {s2 * 1e3:.2f} ms a turn "
            f"cap it near {server_ceiling} turns/s a core)",
        ),
    ]
    return rows
