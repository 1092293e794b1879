"""Every benchmark in one command: ``python -m benchmarks`` (or ``./dev bench``).

Sections, run in this order (``--only NAME``, repeatable, picks some):

* ``journal``  journal appends and reads beside bare SQLite (``benchmarks.journal``);
* ``loops``    agent-loop steps, many concurrent loops, idle footprint (``benchmarks.loops``);
* ``restore``  restoring sessions of 1k / 10k / 100k records (``benchmarks.restore``);
* ``blobs``    a session of 100 results of 1 MiB, stored by reference and inline
  (``benchmarks.blobs``);
* ``peers``    LangGraph + SQLite checkpointer and eventsourcing doing the same work
  (``benchmarks.peers``); a peer that is not installed is reported as skipped;
* ``clients``  a command from outside the host and a record streamed back, for ``Client``
  under trio and asyncio and ``SyncClient``, beside the in-process ``Session``
  (``benchmarks.clients``);
* ``console``  the console's data endpoints over HTTP, no browser: a 10,000-record session
  page's initial data and commit -> Server-Sent Event lags (``benchmarks.console``), beside
  the browser's figures from ``tests/console/test_load.py`` when they were written;
* ``postgres`` the PostgreSQL journal (``benchmarks.postgres``), when that module exists and
  a server can be had (``LOOPRUNTIME_TEST_PG_DSN``, or PostgreSQL binaries to start one);
* ``hosts``    failover, activation, passivated sessions' memory, 1 vs 2 hosts on PostgreSQL
  (when a server can be had), the inbox round trip (``benchmarks.hosts``); a takeover of
  1,000 sessions beside a bare read (``benchmarks.takeover``) and two hosts' CPU and
  statements per turn beside one's (``benchmarks.scaleout``); a ``SyncClient``'s put
  beside a ``Client``'s (``benchmarks.hops``);
* ``limiter``  the shared rate limiter's overhead per model call, with and without it
  (``benchmarks.limiter``);
* ``agents``   agent sessions per core with real-paced streaming and tools, beside LangGraph,
  and where a turn's CPU goes (``benchmarks.agents``, issue 39);
* ``floor``    a durable tool step beside one bare commit of one row, SQLite FULL and
  NORMAL and PostgreSQL when a server can be had (``benchmarks.floor``, issue 39).

Progress goes to stderr, the markdown report (``benchmarks.report``) to stdout, ending
with issue 39's performance targets (again on stderr when stdout is not a terminal, so a
run written to a file still shows them at its end), and everything measured, with the
machine it ran on (``benchmarks.machine``), to ``benchmarks/results.json`` (``--output``
to change).  A section that fails is reported as such, the others still run, and the
exit status is 1.  ``--quick`` runs small sizes and finishes in about a minute.  This
module only parses arguments and runs the sections.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import importlib
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from session.replay.terminal import note

from . import (
    agents,
    blobs,
    clients,
    floor,
    harness,
    hosts,
    limiter,
    loops,
    machine,
    peers,
    report,
    restore,
)
from . import journal as journal_bench
from .report import SECTIONS

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results.json"


def _progress(section: str) -> Callable[[str], None]:
    def say(line: str) -> None:
        note(f"[{section}] {line}")

    return say


def _show_report(results: dict[str, Any]) -> None:
    """The report on stdout; the performance targets once more on stderr when stdout goes
    elsewhere than the terminal, so whoever ran it sees them without opening the file."""
    print(report.render(results))
    if not sys.stdout.isatty():
        print("\n".join(report.performance_targets_table(results)), file=sys.stderr)


# -- sections -----------------------------------------------------------------------------


def _run_peers(
    quick: bool, budget: float | None, results: dict[str, Any], say: Callable[[str], None]
) -> dict[str, Any]:
    """The peer figures at the sizes our own sections used, so every row has its pair."""
    step_sizes = loops.QUICK_STEP_SIZES if quick else loops.DEFAULT_STEP_SIZES
    restored = results.get("restore", {}).get("rows") or []
    if restored:
        # The same history: LangGraph gets the messages our session held, eventsourcing
        # as many events as our journal had records.
        pairs = [(r["records"], r["messages"]) for r in restored]
    else:
        sizes = restore.QUICK_SIZES if quick else restore.DEFAULT_SIZES
        pairs = [(n, n) for n in sizes]
    if budget is None:
        budget = 10.0 if quick else peers.DEFAULT_MAX_SECONDS
    repeats = 1 if quick else 3
    steps = peers.langgraph_steps(step_sizes, max_seconds=budget, progress=say)
    langgraph = [peers.langgraph_restore(m, repeats=repeats, progress=say) for _, m in pairs]
    replays = [peers.eventsourcing_replay(n, repeats=repeats, progress=say) for n, _ in pairs]
    return {
        "versions": peers.peer_versions(),
        "steps": msgspec.to_builtins(steps),
        "restores": msgspec.to_builtins(langgraph),
        "replays": msgspec.to_builtins(replays),
    }


def _postgres_unavailable() -> str | None:
    """Why no PostgreSQL server can be had here, or None when one can."""
    if os.environ.get("LOOPRUNTIME_TEST_PG_DSN"):
        return None
    try:
        from tests.support.pgserver import find_bindir
    except ImportError as exc:
        return f"cannot look for PostgreSQL binaries ({exc}); set LOOPRUNTIME_TEST_PG_DSN"
    if find_bindir() is None:
        return (
            "no PostgreSQL server: LOOPRUNTIME_TEST_PG_DSN is unset and scripts/ensure-postgres "
            "--find found no binaries (run scripts/ensure-postgres to install them)"
        )
    return None


def _run_section(
    name: str,
    quick: bool,
    peer_budget: float | None,
    results: dict[str, Any],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """One section's outcome: {"status": "ok", ...figures} or {"status": "skipped", "reason"}."""
    if name == "journal":
        return {"status": "ok", "rows": journal_bench.run(quick=quick)}
    if name == "loops":
        # In a process of its own: after holding 100k idle loops a process keeps a
        # large, fragmented heap, which would slow whatever this one measures next.
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")
        ) as child:
            rows = child.submit(loops.run_in_child, quick).result()
        return {"status": "ok", "rows": rows}
    if name == "restore":
        return {"status": "ok", "rows": restore.run(quick=quick, progress=say)}
    if name == "blobs":
        return {"status": "ok", "rows": blobs.run(quick=quick, progress=say)}
    if name == "peers":
        return {"status": "ok", **_run_peers(quick, peer_budget, results, say)}
    if name == "clients":
        return {"status": "ok", "rows": clients.run(quick=quick, progress=say)}
    if name == "console":
        try:
            import hypercorn  # noqa: F401
            import starlette  # noqa: F401
        except ImportError as exc:
            return {
                "status": "skipped",
                "reason": f"the console's packages are not installed ({exc.name}): "
                "pip install 'loopruntime[console]'",
            }
        from . import console

        return {
            "status": "ok",
            "rows": console.run(quick=quick, progress=say),
            "browser": console.browser_figures(),
        }
    if name == "postgres":
        try:
            module = importlib.import_module("benchmarks.postgres")
        except ModuleNotFoundError as exc:
            if exc.name not in ("benchmarks.postgres", "psycopg"):
                raise
            return {"status": "skipped", "reason": f"cannot import benchmarks.postgres ({exc})"}
        run = getattr(module, "run", None)
        if run is None:
            return {"status": "skipped", "reason": "benchmarks.postgres has no run(quick)"}
        why = _postgres_unavailable()
        if why is not None:
            return {"status": "skipped", "reason": why}
        return {"status": "ok", "rows": run(quick=quick)}
    if name == "hosts":
        rows = hosts.run(quick=quick, progress=say, postgres=_postgres_unavailable() is None)
        return {"status": "ok", "rows": rows}
    if name == "limiter":
        return {"status": "ok", "rows": limiter.run(quick=quick, progress=say)}
    if name == "agents":
        return {"status": "ok", **agents.run(quick=quick, progress=say)}
    if name == "floor":
        rows = floor.run(quick=quick, progress=say, postgres=_postgres_unavailable() is None)
        return {"status": "ok", "rows": rows}
    raise ValueError(f"unknown section {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, about a minute")
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, metavar="NAME", help="run only this section"
    )
    parser.add_argument(
        "--peer-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"time budget of each LangGraph step run (default {peers.DEFAULT_MAX_SECONDS:g}, "
        "quick 10); a run over it is reported as skipped with how far it got",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="PATH",
        help="run nothing: print the report of a results file written earlier",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results JSON path")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        _show_report(msgspec.json.decode(args.from_json.read_bytes()))
        return 0
    harness.quiet_logs()
    chosen = args.only or list(SECTIONS)
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "machine": machine.probe(),
    }
    failed = False
    for name in SECTIONS:
        if name not in chosen:
            continue
        say = _progress(name)
        say("starting")
        start = time.perf_counter()
        try:
            section = _run_section(name, args.quick, args.peer_budget, results, say)
        except Exception as exc:
            # Report and go on: one broken section must not cost the others' figures.
            failed = True
            traceback.print_exc(file=sys.stderr)
            section = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
        section["seconds"] = time.perf_counter() - start
        results[name] = section
        say(f"{section['status']} in {section['seconds']:.1f} s")
    args.output.write_bytes(msgspec.json.format(msgspec.json.encode(results)) + b"\n")
    print(f"results written to {args.output}", file=sys.stderr)
    _show_report(results)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
