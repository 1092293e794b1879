"""Every benchmark in one command: ``python -m benchmarks`` (or ``./dev bench``).

Sections, run in this order (``--only NAME``, repeatable, picks some):

* ``journal``  journal appends and reads beside bare SQLite (``benchmarks.journal``);
* ``loops``    agent-loop steps, many concurrent loops, idle footprint (``benchmarks.loops``);
* ``restore``  restoring sessions of 1k / 10k / 100k records (``benchmarks.restore``);
* ``peers``    LangGraph + SQLite checkpointer and eventsourcing doing the same work
  (``benchmarks.peers``); a peer that is not installed is reported as skipped;
* ``postgres`` the PostgreSQL journal (``benchmarks.postgres``), when that module exists and
  a server can be had (``LOOPRUNTIME_TEST_PG_DSN``, or PostgreSQL binaries to start one).

Progress goes to stderr, the tables (markdown) to stdout, and everything measured, with
the machine it ran on, to ``benchmarks/results.json`` (``--output`` to change).  A section
that fails is reported as such, the others still run, and the exit status is 1.
``--quick`` runs small sizes and finishes in about a minute.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import importlib
import multiprocessing
import os
import platform
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec

from . import journal as journal_bench
from . import loops, peers, restore

SECTIONS = ("journal", "loops", "restore", "peers", "postgres")
INFO = "info"
"""The verdict of a row printed beside the targets for information, not as a target."""
Targets = list[tuple[str, str, bool | str | None]]
"""(what the issue asks, what was measured, met / missed / no figure to tell / INFO)."""
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results.json"


def _progress(section: str) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(f"[{section}] {line}", file=sys.stderr, flush=True)

    return say


def machine() -> dict[str, Any]:
    """What the figures depend on: CPU, cores, memory, OS, Python, SQLite."""
    cpu = platform.processor() or platform.machine()
    memory = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                cpu,
            )
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
            memory = kib * 1024
    except (OSError, StopIteration, ValueError):
        pass
    try:
        version = metadata.version("loopruntime")
    except metadata.PackageNotFoundError:
        version = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "msgspec": metadata.version("msgspec"),
        "trio": metadata.version("trio"),
        "loopruntime": version,
    }


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
    if name == "peers":
        return {"status": "ok", **_run_peers(quick, peer_budget, results, say)}
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
    raise ValueError(f"unknown section {name!r}")


# -- the report -----------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    if n >= 2**30:
        # Two decimals: the idle target sits near 2 GiB, where one would hide the answer.
        return f"{n / 2**30:.2f} GiB"
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _peer_missing(section: dict[str, Any] | None) -> str:
    if section is None:
        return "not run (--only)"
    if section["status"] != "ok":
        return str(section.get("reason", section["status"]))
    return ""


def _figure(row: dict[str, Any] | None, key: str) -> float | None:
    """A peer row's figure, None when there is no row or the peer was skipped."""
    if row is None or row["skipped"]:
        return None
    value: float | None = row[key]
    return value


def _why_not(row: dict[str, Any] | None, missing: str) -> str:
    """What to print where a peer figure is missing."""
    return str(row["reason"]) if row is not None else missing


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _step_section(results: dict[str, Any], targets: Targets) -> list[str]:
    ours = results["loops"]["rows"]
    peer = results.get("peers")
    lg = {s["size"]: s for s in peer["steps"]} if peer and peer["status"] == "ok" else {}
    by = {(r["synchronous"], r["steps"]): r for r in ours if r["scenario"] == "steps"}
    sizes = sorted({n for _, n in by})
    rows = []
    for n in sizes:
        full, normal = by.get(("FULL", n)), by.get(("NORMAL", n))
        g = lg.get(n)
        g_step, g_bytes = _figure(g, "per_step_seconds"), _figure(g, "bytes")
        ours_step = full["per_step_seconds"] if full else None
        ours_bytes = full["bytes"] if full else None
        rows.append(
            [
                str(n),
                _ms(ours_step),
                _ms(normal["per_step_seconds"] if normal else None),
                _ms(g_step) if g_step is not None else _why_not(g, _peer_missing(peer) or "-"),
                _ratio(_div(g_step, ours_step)),
                _bytes(ours_bytes),
                _bytes(full["bytes_open"] if full else None),
                _bytes(g_bytes),
                _ratio(_div(g_bytes, ours_bytes)),
            ]
        )
        if n == 1000:
            r = _div(g_step, ours_step)
            targets.append(
                ("per-step cost at 1000 steps >= 10x lower than LangGraph", _ratio(r), _met(r, 10))
            )
            r = _div(g_bytes, ours_bytes)
            targets.append(("storage after 1000 steps >= 100x smaller", _ratio(r), _met(r, 100)))
    for sync in ("FULL", "NORMAL"):
        small, large = by.get((sync, min(sizes))), by.get((sync, max(sizes)))
        if small and large and large is not small:
            r = large["per_step_seconds"] / small["per_step_seconds"]
            targets.append(
                (
                    f"per-step cost at {large['steps']} steps <= 1.3x the cost at "
                    f"{small['steps']} ({sync})",
                    f"{r:.2f}x",
                    r <= 1.3,
                )
            )
    lines = [
        "### 1. Per-step persistence vs history length",
        "",
        "One turn of N steps (a model reply with one tool call + its result), zero-latency "
        "scripted model. ms/step = mean over the last 10% of steps. Storage at rest = database "
        "file after the journal is closed (its WAL checkpointed); open = database + WAL right "
        "after the run, connection open (how the LangGraph figure is taken). Ratios: LangGraph "
        "/ loopruntime FULL (LangGraph's checkpointer runs SQLite at its default, FULL).",
        "",
    ]
    return lines + _table(
        [
            "steps",
            "ours FULL ms/step",
            "ours NORMAL ms/step",
            "LangGraph ms/step",
            "LG / ours",
            "ours storage (at rest)",
            "ours (open, +WAL)",
            "LangGraph storage",
            "LG / ours",
        ],
        rows,
    )


def _met(value: float | None, at_least: float) -> bool | None:
    return None if value is None else value >= at_least


def _restore_section(results: dict[str, Any], targets: Targets) -> list[str]:
    ours = results["restore"]["rows"]
    peer = results.get("peers")
    ok = peer is not None and peer["status"] == "ok"
    lg = {r["size"]: r for r in peer["restores"]} if peer is not None and ok else {}
    es = {r["size"]: r for r in peer["replays"]} if peer is not None and ok else {}
    rows = []
    for r in ours:
        g, e = lg.get(r["messages"]), es.get(r["records"])
        g_s, e_s = _figure(g, "seconds"), _figure(e, "seconds")
        # Results written before checkpoints have no full-fold or checkpoint figures.
        full = r.get("full_seconds")
        missing = _peer_missing(peer) or "skipped"
        rows.append(
            [
                f"{r['records']:,}",
                f"{r['messages']:,}",
                _checkpoints(r),
                _checkpoint_storage(r),
                _ms(r["seconds"]),
                _ms(full),
                _ms(r["fold_seconds"]),
                _ms(r.get("full_fold_seconds")),
                _ms(r["floor_seconds"]),
                _ratio(r["floor_ratio"]),
                _ratio(r.get("full_floor_ratio")),
                _ms(g_s) if g_s is not None else _why_not(g, missing),
                _ms(_figure(g, "resume_seconds")),
                _ms(e_s) if e_s is not None else _why_not(e, missing),
                _ratio(_div(e_s, r["seconds"])),
                _ratio(_div(e_s, full)),
            ]
        )
    if ours:
        big = max(ours, key=lambda r: r["records"])
        name = "restore (from checkpoints)" if "checkpoints" in big else "restore"
        e_s = _figure(es.get(big["records"]), "seconds")
        targets.append(
            (
                f"{name} {big['records']:,} records >= 0.7x the bare read+decode floor",
                _ratio(big["floor_ratio"]),
                big["floor_ratio"] >= 0.7,
            )
        )
        r = _div(e_s, big["seconds"])
        targets.append(
            (
                f"{name} {big['records']:,} records >= 10x faster than eventsourcing",
                _ratio(r),
                _met(r, 10),
            )
        )
        full = big.get("full_seconds")
        if full is not None:
            targets.append(
                (
                    f"restore, full fold, {big['records']:,} records: bare floor / restore",
                    _ratio(big.get("full_floor_ratio")),
                    INFO,
                )
            )
            targets.append(
                (
                    f"restore, full fold, {big['records']:,} records: eventsourcing / ours",
                    _ratio(_div(e_s, full)),
                    INFO,
                )
            )
    every = ours[0].get("checkpoint_every") if ours else None
    written = (
        f"the session writes a checkpoint every {every:,} records (the default)"
        if every
        else "these results predate checkpoints: restore folded every record"
    )
    lines = [
        "### 2. Restore",
        "",
        f"Times in ms, best of 3, fresh connection each (OS page cache warm); {written}. "
        "restore = `Session.restore` "
        "until its context is entered: read the checkpoint chain, rebuild the states from "
        "it, verify and fold the records after the last checkpoint, start the loop; full "
        "fold = the same with `use_checkpoints=False`, folding every record (what restore "
        "cost before checkpoints); fold / full fold = `read_restored` alone, the same two "
        "ways. checkpoints / tail = checkpoint records in the file / records folded after "
        "the last one; checkpoint storage = encoded size of the checkpoint records' events "
        "(share of the file). floor = one thread selecting every row and msgpack-decoding "
        "every body; floor / ours: 1.0 = restore costs no more than the floor (above 1.0, "
        "restore reads less than every row). LangGraph: `get_state` on a thread of the same "
        "number of messages (resume = one more turn on it); eventsourcing: `repository.get` "
        "of an aggregate with as many events as we have records (SQLite), which replays "
        "every event without snapshots while our restore starts from a checkpoint: its "
        "ratio is given against both our restore and our full-fold restore.",
        "",
    ]
    return lines + _table(
        [
            "records",
            "messages",
            "checkpoints / tail",
            "checkpoint storage",
            "ours restore ms",
            "ours full-fold restore ms",
            "ours fold ms",
            "ours full fold ms",
            "bare floor ms",
            "floor / restore",
            "floor / full-fold restore",
            "LangGraph get_state ms",
            "LangGraph resume ms",
            "eventsourcing replay ms",
            "eventsourcing / ours restore",
            "eventsourcing / ours full-fold restore",
        ],
        rows,
    )


def _checkpoints(row: dict[str, Any]) -> str:
    """Checkpoint records / records folded after the last one, '-' in older results."""
    if "checkpoints" not in row:
        return "-"
    return f"{row['checkpoints']:,} / {row['tail_records']:,}"


def _checkpoint_storage(row: dict[str, Any]) -> str:
    if "checkpoint_bytes" not in row:
        return "-"
    return f"{_bytes(row['checkpoint_bytes'])} ({row['checkpoint_share']:.1%})"


def _loops_section(results: dict[str, Any], targets: Targets) -> list[str]:
    rows, idle = [], []
    for r in results["loops"]["rows"]:
        if r["scenario"] == "loops":
            rows.append(
                [
                    f"{r['loops']:,}",
                    f"{r['turns']:,}",
                    f"{r['turns_per_second']:,.0f}",
                    f"{r['records_per_second']:,.0f}",
                    _ms(r["commit_p50_seconds"]),
                    _ms(r["commit_p99_seconds"]),
                    f"{r['bare_records_per_second']:,.0f}",
                    _ratio(r["ratio"]),
                    f"{r['gc_seconds']:.2f} / {r['seconds']:.2f}",
                ]
            )
            if r["loops"] == 100:
                targets.append(
                    (
                        "100 concurrent loops >= 0.5x bare group-commit records/s",
                        _ratio(r["ratio"]),
                        r["ratio"] >= 0.5,
                    )
                )
        elif r["scenario"] == "idle":
            idle.append(
                [
                    f"{r['loops']:,}",
                    f"{r['bytes_per_loop']:,.0f}",
                    _bytes(r["rss_after_bytes"] - r["rss_before_bytes"]),
                    _bytes(r["rss_after_bytes"]),
                    f"{r['setup_seconds']:.1f} (gc {r['gc_seconds']:.1f})",
                ]
            )
            total = r["rss_after_bytes"] - r["rss_before_bytes"]
            if r["loops"] in (10_000, 100_000):
                limit = 200 * 2**20 if r["loops"] == 10_000 else 2 * 2**30
                targets.append(
                    (
                        f"{r['loops']:,} idle loops under {_bytes(limit)}",
                        _bytes(total),
                        total < limit,
                    )
                )
    lines = [
        "### 3. Many loops",
        "",
        "N independent sessions (one loop each) on one SQLite journal (synchronous=NORMAL), "
        "every loop running turns back to back (a turn: one tool step and an answer). Commit "
        "latency = each `journal.append` the sessions' writers made. Bare = the same journal, "
        "N tasks appending one record per call (the same event bodies), same run. gc = seconds "
        "of Python's cyclic garbage collector inside the measured window.",
        "",
        *_table(
            [
                "loops",
                "turns",
                "turns/s",
                "records/s",
                "commit p50 ms",
                "commit p99 ms",
                "bare records/s",
                "ours / bare",
                "gc s / total s",
            ],
            rows,
        ),
        "",
        "### 4. Idle footprint",
        "",
        "N sessions, each after one turn, idle in one process: growth of resident memory "
        "(RSS) / N. Setup = seconds to create them all (of which cyclic GC).",
        "",
        *_table(["loops", "bytes per idle loop", "RSS growth", "RSS total", "setup s"], idle),
    ]
    return lines


def _journal_targets(rows: Sequence[dict[str, Any]], targets: Targets) -> None:
    """Issue 2's two ratios, each with the ceiling measured beside it: what a
    journal doing none of its own work would reach under the same obligation."""
    ratio = {(r["benchmark"].strip(), r["backend"]): r["ratio"] for r in rows}
    for sync in ("FULL", "NORMAL"):
        backend = f"sqlite {sync}"
        r = ratio.get(("append 1/call, 100 concurrent", backend))
        if r is None:
            continue
        targets.append(
            (f"SQLite {sync}, 100 concurrent appenders >= 0.8x a bare thread", _ratio(r), r >= 0.8)
        )
        ceiling = ratio.get(("trio harness (bare: thread)", backend))
        targets.append(
            (
                f"ceiling ({sync}): trio tasks on a bare thread / bare thread",
                _ratio(ceiling),
                INFO,
            )
        )
        harness = ratio.get(("(bare: trio harness)", backend))
        targets.append((f"journal / trio tasks on a bare thread ({sync})", _ratio(harness), INFO))
    read = next(
        (r for r in rows if (r["benchmark"], r["backend"]) == ("read+decode", "sqlite")), None
    )
    if read is not None:
        r = read["ratio"]
        targets.append(
            (f"SQLite read+decode {read['n']:,} records >= 0.8x the bare loop", _ratio(r), r >= 0.8)
        )
        ceiling = ratio.get(("chain check (bare: read+decode)", "sqlite"))
        targets.append(("ceiling: bare loop + chain check / bare loop", _ratio(ceiling), INFO))
        checked = ratio.get(("read+decode (bare: + chain check)", "sqlite"))
        targets.append(("journal / bare loop + chain check", _ratio(checked), INFO))


def _rate_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Rows in the shape ``benchmarks.journal`` and ``benchmarks.postgres`` return."""
    return _table(
        ["benchmark", "backend", "n", "rate/s", "bare/s", "ours / bare"],
        [
            [
                r["benchmark"],
                r["backend"],
                f"{r['n']:,}",
                f"{r['rate']:,.0f}",
                "-" if r["bare_rate"] is None else f"{r['bare_rate']:,.0f}",
                _ratio(r["ratio"]),
            ]
            for r in rows
        ],
    )


def report(results: dict[str, Any]) -> str:
    """The markdown report: machine, one table per scenario, then the targets."""
    m = results["machine"]
    memory = _bytes(m["memory_bytes"]) if m["memory_bytes"] else "?"
    lines = [
        f"## Benchmarks ({'quick' if results['quick'] else 'full'} run, {results['date']})",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {memory} RAM, {m['os']}; Python "
        f"{m['python']}, SQLite {m['sqlite']}, trio {m['trio']}, msgspec {m['msgspec']}.",
    ]
    peer = results.get("peers")
    if peer and peer["status"] == "ok":
        versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in peer["versions"].items())
        lines.append(f"Peers: {versions}.")
    targets: Targets = []
    loops_ok = results.get("loops", {}).get("status") == "ok"
    if loops_ok:
        lines += ["", *_step_section(results, targets)]
    if results.get("restore", {}).get("status") == "ok":
        lines += ["", *_restore_section(results, targets)]
    if loops_ok:
        lines += ["", *_loops_section(results, targets)]
    if results.get("journal", {}).get("status") == "ok":
        lines += [
            "",
            "### Journal",
            "",
            "Journal operations beside a bare loop doing the same storage work "
            "(`benchmarks/journal.py`).",
            "",
            *_rate_rows(results["journal"]["rows"]),
        ]
        _journal_targets(results["journal"]["rows"], targets)
    pg = results.get("postgres")
    if pg is not None:
        lines += ["", "### PostgreSQL journal", ""]
        if pg["status"] == "ok":
            lines += [
                "Beside raw psycopg doing the same storage work (`benchmarks/postgres.py`).",
                "",
                *_rate_rows(pg["rows"]),
            ]
        else:
            lines.append(f"{pg['status']}: {pg.get('reason', '')}")
    for name in SECTIONS:
        section = results.get(name)
        if section is not None and section["status"] == "error":
            lines += ["", f"**{name} failed:** {section['reason']}"]
    if targets:
        verdict: dict[bool | str | None, str] = {
            True: "met",
            False: "**missed**",
            None: "no peer figure",
            INFO: "information, not a target",
        }
        lines += ["", "### Targets", ""]
        lines += _table(
            ["target", "measured", ""], [[t, value, verdict[ok]] for t, value, ok in targets]
        )
    return "\n".join(lines)


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
        print(report(msgspec.json.decode(args.from_json.read_bytes())))
        return 0
    loops.quiet_logs()
    chosen = args.only or list(SECTIONS)
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "machine": machine(),
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
    print(report(results))
    print(f"results written to {args.output}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
