"""Every table the benchmarks print, and the targets the figures are read against.

Rules: rendering only. Each function takes the results data (the dicts and lists the
sections return, as ``benchmarks/results.json`` holds them) and returns text; nothing
here measures, runs or writes. Older results files lack some keys: a missing figure
prints as ``-``, never as an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

SECTIONS = (
    "journal",
    "loops",
    "restore",
    "blobs",
    "peers",
    "clients",
    "console",
    "postgres",
    "hosts",
    "limiter",
    "agents",
    "floor",
)
"""The sections of a run, in the order they run and their failures are listed."""
INFO = "info"
"""The verdict of a row printed beside the targets for information, not as a target."""
Targets = list[tuple[str, str, bool | str | None]]
"""(the target, what was measured, met / missed / no figure to tell / INFO)."""

# -- cells --------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def format_bytes(n: float | None) -> str:
    """A size in B, KiB, MiB or GiB; ``-`` for no figure."""
    if n is None:
        return "-"
    if n >= 2**30:
        # Two decimals: the idle target sits near 2 GiB, where one would hide the answer.
        return f"{n / 2**30:.2f} GiB"
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def format_number(value: float | None, fmt: str, scale: float = 1.0) -> str:
    """``value * scale`` in ``fmt``; ``-`` for no figure."""
    return "-" if value is None else format(value * scale, fmt)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _met(value: float | None, at_least: float) -> bool | None:
    return None if value is None else value >= at_least


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


def _ok(results: dict[str, Any], name: str) -> bool:
    return bool(results.get(name, {}).get("status") == "ok")


def _peers_ok(results: dict[str, Any]) -> dict[str, Any] | None:
    """The peers section when it ran to the end, else None."""
    peer = results.get("peers")
    return peer if peer is not None and peer["status"] == "ok" else None


# -- 1. per-step persistence ----------------------------------------------------------------


def _steps(
    results: dict[str, Any],
) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[int, dict[str, Any]]]:
    """Our step rows by (synchronous, steps) and LangGraph's by size."""
    peer = _peers_ok(results)
    lg = {s["size"]: s for s in peer["steps"]} if peer else {}
    ours = results["loops"]["rows"]
    by = {(r["synchronous"], r["steps"]): r for r in ours if r["scenario"] == "steps"}
    return by, lg


def _step_section(results: dict[str, Any]) -> list[str]:
    by, lg = _steps(results)
    peer = results.get("peers")
    rows = []
    for n in sorted({n for _, n in by}):
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
                format_bytes(ours_bytes),
                format_bytes(full["bytes_open"] if full else None),
                format_bytes(g_bytes),
                _ratio(_div(g_bytes, ours_bytes)),
            ]
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


def _step_targets(results: dict[str, Any], targets: Targets) -> None:
    by, lg = _steps(results)
    sizes = sorted({n for _, n in by})
    full = by.get(("FULL", 1000))
    if 1000 in sizes:
        g = lg.get(1000)
        r = _div(_figure(g, "per_step_seconds"), full["per_step_seconds"] if full else None)
        targets.append(
            ("per-step cost at 1000 steps >= 10x lower than LangGraph", _ratio(r), _met(r, 10))
        )
        r = _div(_figure(g, "bytes"), full["bytes"] if full else None)
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


# -- 2. restore ---------------------------------------------------------------------------


def _peer_restores(
    results: dict[str, Any],
) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """LangGraph's restores by messages and eventsourcing's replays by events."""
    peer = _peers_ok(results)
    lg = {r["size"]: r for r in peer["restores"]} if peer else {}
    es = {r["size"]: r for r in peer["replays"]} if peer else {}
    return lg, es


def _checkpoints(row: dict[str, Any]) -> str:
    """Checkpoint records / records folded after the last one, '-' in older results."""
    if "checkpoints" not in row:
        return "-"
    return f"{row['checkpoints']:,} / {row['tail_records']:,}"


def _checkpoint_storage(row: dict[str, Any]) -> str:
    if "checkpoint_bytes" not in row:
        return "-"
    return f"{format_bytes(row['checkpoint_bytes'])} ({row['checkpoint_share']:.1%})"


def _restore_section(results: dict[str, Any]) -> list[str]:
    ours = results["restore"]["rows"]
    peer = results.get("peers")
    lg, es = _peer_restores(results)
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


def _restore_targets(results: dict[str, Any], targets: Targets) -> None:
    ours = results["restore"]["rows"]
    if not ours:
        return
    _, es = _peer_restores(results)
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


# -- 3. many loops, 4. idle footprint -------------------------------------------------------


def _permits_note(rows: list[dict[str, Any]]) -> str:
    limits = sorted({r["working_loops_limit"] for r in rows if "working_loops_limit" in r})
    if not limits:
        return ""
    return (
        "The loops ran under the runtime's limit of "
        + ", ".join(str(n) for n in limits)
        + " loops working at once (`limit_working_loops`)."
    )


def _loops_section(results: dict[str, Any]) -> list[str]:
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
        elif r["scenario"] == "idle":
            idle.append(
                [
                    f"{r['loops']:,}",
                    f"{r['bytes_per_loop']:,.0f}",
                    format_bytes(r["rss_after_bytes"] - r["rss_before_bytes"]),
                    format_bytes(r["rss_after_bytes"]),
                    f"{r['setup_seconds']:.1f} ({_setup_cpu(r)}gc {r['gc_seconds']:.1f})",
                ]
            )
    return [
        "### 3. Many loops",
        "",
        "N independent sessions (one loop each) on one SQLite journal (synchronous=NORMAL), "
        "every loop running turns back to back (a turn: one tool step and an answer). Commit "
        "latency = each `journal.append` the sessions' writers made. Bare = the same journal, "
        "N tasks appending one record per call (the same event bodies), same run. gc = seconds "
        "of Python's cyclic garbage collector inside the measured window. " + _permits_note(rows),
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
        "(RSS) / N. Setup = seconds to create them all (the process's CPU meanwhile, of "
        "which the trio thread's, the rest being the journal's writer thread, and cyclic "
        "GC), made inside "
        "`session.collector_paused()` as an application making many sessions at once would "
        "(no automatic collection meanwhile; one collection and `gc.freeze()` at its end, "
        "inside the window).",
        "",
        *_table(["loops", "bytes per idle loop", "RSS growth", "RSS total", "setup s"], idle),
    ]


def _setup_cpu(row: dict[str, Any]) -> str:
    # Results written before the idle rows carried the process's CPU have none.
    cpu = row.get("setup_cpu_seconds")
    if cpu is None:
        return ""
    trio_cpu = row.get("setup_trio_cpu_seconds")
    if trio_cpu is None:  # results written before the trio thread's was taken apart
        return f"CPU {cpu:.1f}, "
    return f"CPU {cpu:.1f}, trio thread {trio_cpu:.1f}, "


def _loops_targets(results: dict[str, Any], targets: Targets) -> None:
    for r in results["loops"]["rows"]:
        if r["scenario"] == "loops" and r["loops"] == 100:
            targets.append(
                (
                    "100 concurrent loops >= 0.5x bare group-commit records/s",
                    _ratio(r["ratio"]),
                    r["ratio"] >= 0.5,
                )
            )
        elif r["scenario"] == "idle" and r["loops"] in (10_000, 100_000):
            total = r["rss_after_bytes"] - r["rss_before_bytes"]
            limit = 200 * 2**20 if r["loops"] == 10_000 else 2 * 2**30
            targets.append(
                (
                    f"{r['loops']:,} idle loops under {format_bytes(limit)}",
                    format_bytes(total),
                    total < limit,
                )
            )


# -- journal and PostgreSQL ---------------------------------------------------------------


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


def journal_targets(rows: Sequence[dict[str, Any]], targets: Targets) -> None:
    """The journal's two target ratios, each with the ceiling measured beside it: what a
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


# -- clients ------------------------------------------------------------------------------


def clients_section(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The clients section's rows: one per client kind, the in-process ``Session`` first."""
    return [
        "### Clients",
        "",
        "A command sent from outside the host (`submit` to its `input.queued` record) and a "
        "record streamed back (its commit to a `subscribe` consumer), one turn at a time, "
        "against a `loopruntime host` process on SQLite (`benchmarks/clients.py`); the host "
        "looks at its inbox every 10 ms, the clients at the journal every 50 ms (their default "
        "`poll`), sooner right after records came.",
        "",
        *_table(
            ["client", "turns", "submit p50 ms", "submit p99 ms", "stream p50 ms", "stream p99 ms"],
            [
                [
                    r["client"],
                    str(r["turns"]),
                    _ms(r["submit_p50_seconds"]),
                    _ms(r["submit_p99_seconds"]),
                    _ms(r["stream_p50_seconds"]),
                    _ms(r["stream_p99_seconds"]),
                ]
                for r in rows
            ],
        ),
    ]


# -- the console --------------------------------------------------------------------------


def console_section(rows: Sequence[dict[str, Any]], browser: dict[str, Any] | None) -> list[str]:
    """The console section: its data endpoints over HTTP, then what Chromium
    measured (``tests/console/test_load.py``) when those figures exist."""
    poll = rows[0]["poll_seconds"] if rows else 0.02
    lines = [
        "### Console",
        "",
        "A `loopruntime console` process on SQLite (its tails look at the file every "
        f"{poll * 1e3:g} ms), read by an HTTP client, no browser (`benchmarks/console.py`): "
        "a session page's initial data (its live stream from the request to `ready`, every "
        "record's item and the actions sent), and each record's commit to the stream message "
        "holding it while turns run.",
        "",
        *_table(
            ["measure", "records", "runs", "sent", "p50 ms", "p99 ms", "max ms"],
            [
                [
                    r["measure"],
                    f"{r['records']:,}",
                    str(r["runs"]),
                    format_bytes(r["bytes"]) if r["bytes"] else "-",
                    _ms(r["p50_seconds"]),
                    _ms(r.get("p99_seconds")),
                    _ms(r["max_seconds"]),
                ]
                for r in rows
            ],
        ),
    ]
    if not browser:
        return [
            *lines,
            "",
            "No browser figures: `./dev test tests/console/test_load.py` writes them "
            "(`benchmarks/results-console.json`).",
        ]
    found: list[list[str]] = []
    lag = browser.get("commit_to_page_ms")
    if isinstance(lag, dict):
        found.append(
            [
                "commit -> shown on the page",
                f"{lag.get('records', 0):,} records",
                f"p50 {lag.get('p50')} ms, p99 {lag.get('p99')} ms",
            ]
        )
    load = browser.get("page_load")
    if isinstance(load, dict):
        found.append(
            [
                "a session page loads",
                f"{load.get('records', 0):,} records",
                f"{load.get('seconds')} s to live",
            ]
        )
    many = browser.get("load_50_sessions")
    if isinstance(many, dict):
        found.append(
            [
                "50 appending sessions, 10 pages open",
                f"{many.get('records', 0):,} records",
                f"pages current {many.get('pages_current_s_after_last_commit')} s after the "
                f"last commit; console RSS {many.get('rss_kb_before')} -> "
                f"{many.get('rss_kb_after')} kB",
            ]
        )
    return [
        *lines,
        "",
        "In Chromium (`tests/console/test_load.py`, `benchmarks/results-console.json`, "
        "written when those tests last ran):",
        "",
        *_table(["measure", "size", "figure"], found),
    ]


# -- large records by reference ----------------------------------------------------------


def blob_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The blobs section: the same session stored by reference and inline."""
    return _table(
        ["storage", "records", "results", "append s", "restore s", "on disk", "blobs"],
        [
            [
                r["storage"],
                f"{r['records']:,}",
                f"{r['results']} x {format_bytes(r['result_bytes'])}",
                f"{r['append_seconds']:.3f}",
                f"{r['restore_seconds']:.3f}",
                format_bytes(r["bytes"]),
                f"{r['blobs']} ({format_bytes(r['blob_bytes'])})",
            ]
            for r in rows
        ],
    )


def _us(seconds: float | None, *, signed: bool = False) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:+.1f}" if signed else f"{seconds * 1e6:.1f}"


def limiter_section(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The shared rate limiter's overhead per call, against no limiter in the same run."""
    return [
        "### Shared rate limiter",
        "",
        "A model call with no limiter, with a requests limit, and with requests and tokens "
        "limits, all so high that nothing waits, rounds interleaved, median and fastest "
        "round (`benchmarks/limiter.py`): `retries` is the adapters' shared retry path "
        "around an attempt doing no I/O, `anthropic` whole `AnthropicModel` calls to a "
        "local server.",
        "",
        *_table(
            [
                "level",
                "limiter",
                "calls a round",
                "µs per call",
                "overhead µs",
                "best µs",
                "best overhead µs",
            ],
            [
                [
                    r["level"],
                    r["limiter"],
                    f"{r['calls']:,} x {r.get('rounds', '-')}",
                    f"{r['seconds_per_call'] * 1e6:.1f}",
                    f"{r['overhead_seconds'] * 1e6:+.1f}",
                    _us(r.get("best_seconds_per_call")),
                    _us(r.get("best_overhead_seconds"), signed=True),
                ]
                for r in rows
            ],
        ),
    ]


# -- the performance targets -------------------------------------------------------------


def _verdict(ok: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "no figure"}[ok]


_PHASES_SHOWN = 12


def _phase_rows(profile: dict[str, Any]) -> list[str]:
    """A turn's CPU by phase, largest first, in ms a turn and share of the whole."""
    phases = profile.get("phases") or {}
    turns = profile.get("turns") or 0
    total = sum(phases.values())
    if not phases or not turns or not total:
        return ["No profile figures."]
    ordered = sorted(phases.items(), key=lambda item: -item[1])
    if len(ordered) > _PHASES_SHOWN:
        rest = sum(cpu for _, cpu in ordered[_PHASES_SHOWN:])
        count = len(ordered) - _PHASES_SHOWN
        ordered = [*ordered[:_PHASES_SHOWN], (f"the {count} other phases", rest)]
    return _table(
        ["phase", "CPU a turn (ms)", "share"],
        [[name, _ms(cpu / turns), f"{cpu / total:.0%}"] for name, cpu in ordered],
    )


def agents_section(section: dict[str, Any]) -> list[str]:
    """Agents per core (issue 39, target 1): both searches, the ratio, the profile."""
    budgets = section["budgets"]
    lines = [
        "### Agents per core",
        "",
        f"Sessions in one process held to one core, each turn a reply streamed in 40 pieces "
        f"that asks for a 0.5 s tool, then a reply in 20 pieces, then 3 s to the next "
        f"message (scripted {section['scripted_turn_seconds']:.2f} s a turn). N passes when, "
        f"at p99, a piece reaches its subscriber within {budgets['piece_p99'] * 1e3:g} ms, a "
        f"commit takes at most {budgets['commit_p99'] * 1e3:g} ms, the scheduler lags under "
        f"{budgets['lag_p99'] * 1e3:g} ms and a turn takes at most {budgets['turn_ratio_p99']:g} x "
        "its scripted time (`benchmarks/agents.py`). Every run, with the load average "
        "before it (times in ms):",
        "",
    ]
    rows = []
    for side in ("ours", "langgraph"):
        for run in section[side].get("runs", []):
            rows.append(
                [
                    side,
                    str(run["sessions"]),
                    "pass" if run["passed"] else "fail: " + ", ".join(run["failed"]),
                    _ms(run["piece_p99"]),
                    _ms(run["commit_p99"]),
                    _ms(run["lag_p99"]),
                    format_number(run["turn_ratio_p99"], ".2f"),
                    _ms(run["cpu_per_turn"]),
                    f"{run['core_share']:.0%}",
                    f"{run['load']:.1f}",
                ]
            )
    header = ["side", "N", "verdict", "piece p99", "commit p99", "lag p99", "turn p99 / scripted"]
    lines += _table([*header, "CPU a turn", "of the core", "load"], rows)
    for side in ("ours", "langgraph"):
        verdicts = section[side].get("verdicts")
        if verdicts:
            decided = ", ".join(f"{n} {'pass' if ok else 'fail'}" for n, ok in verdicts)
            lines += ["", f"Decided, {side} (the majority of an N's runs): {decided}."]
    ours, peer = section["ours"]["n"], section["langgraph"].get("n")
    ratio = ours / peer if peer else None
    skipped = section["langgraph"].get("skipped")
    lines += [
        "",
        f"N per core: ours {ours}, LangGraph {peer if peer is not None else skipped}; "
        f"ratio {_ratio(ratio)} (target at least 5 x): "
        f"{_verdict(None if ratio is None else ratio >= 5)}.",
        "",
    ]
    lines += _wakeup_rows(section.get("wakeups"))
    profile = section["profile"]
    if "skipped" in profile:
        return [*lines, f"Where a turn's CPU goes: skipped, {profile['skipped']}."]
    return [
        *lines,
        f"Where a turn's CPU goes, ours at N={profile['sessions']} ({profile['turns']} turns; "
        "the trio thread's CPU shared out by py-spy's samples of it holding the GIL, each "
        "charged to the innermost module of the project, trio or the harness; the writer "
        "thread's CPU from its own clock):",
        "",
        *_phase_rows(profile),
    ]


def _wakeup_rows(counted: dict[str, Any] | None) -> list[str]:
    """Scheduler steps a streamed turn costs, by task (``agents.count_wakeups``)."""
    if not counted:
        return []
    rows = [[task, f"{steps:.1f}"] for task, steps in counted["by_task"].items() if steps >= 0.05]
    return [
        f"Scheduler steps a streamed turn, by task ({counted['sessions']} sessions, the "
        "memory journal, trio's clock jumping ahead; trio orders each batch at random, "
        f"so the figures move by about 1 %): {counted['steps']:.1f} a turn for "
        f"{counted['pieces']:.0f} streamed pieces and {counted['appends']:.1f} appends; the "
        f"floor, one wake of the model's stream and one of its subscriber a piece, is "
        f"{counted['floor']:.0f}.",
        "",
        *_table(["task", "steps a turn"], rows),
        "",
    ]


def floor_section(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A durable tool step beside one bare commit (issue 39, target 2)."""
    table = [
        [
            row["backend"],
            _ms(row["per_step_seconds"]),
            _ms(row["bare_commit_seconds"]),
            f"{row['ratio']:.2f}",
            " / ".join(f"{r:.2f}" for r in row["round_ratios"]),
            f"{row['waits_per_step']:.2f} / {row['appends_per_step']:.2f}",
            f"{row['load']:.1f}",
            _verdict(row["ratio"] <= 2.0),
        ]
        for row in rows
    ]
    return [
        "### A durable step beside its floor",
        "",
        "One turn of tool steps through the public API beside a bare connection committing "
        "one ~300-byte row per transaction on the same storage, in rounds (ours, then bare); "
        "the median round (`benchmarks/floor.py`). Target: a step at most 2 x the commit.",
        "",
        *_table(
            [
                "backend",
                "step (ms)",
                "bare commit (ms)",
                "ratio",
                "every round",
                "durable waits / appends a step",
                "load",
                "",
            ],
            table,
        ),
    ]


def _rows(results: dict[str, Any], section: str, scenario: str | None = None) -> list[Any]:
    if not _ok(results, section):
        return []
    rows = results[section]["rows"]
    return [r for r in rows if scenario is None or r.get("scenario") == scenario]


def _at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def _not_run(what: str) -> tuple[str, None]:
    return f"not measured ({what})", None


def _waits_target(results: dict[str, Any]) -> tuple[str, bool | None]:
    waits = {r["steps"]: r for r in _rows(results, "loops", "waits")}
    one = waits.get(1)
    if one is None:
        return _not_run("no waits rows: loops section not run, or results predate them")
    measured = f"{one['waits']} (appends {one['appends']}, pipelined {one['pipelined']})"
    ten = waits.get(10)
    if ten is not None:
        measured += f"; 10 steps: {ten['waits'] / 10:.1f} per step"
    return measured, one["waits"] <= 3


def _lg_ratio(results: dict[str, Any], n: int, limit: float) -> tuple[str, bool | None]:
    if not _ok(results, "loops"):
        return _not_run("loops section not run")
    by, lg = _steps(results)
    full = by.get(("FULL", n))
    if full is None:
        return _not_run(f"no run of {n} steps (--quick)")
    g = lg.get(n)
    r = _div(_figure(g, "per_step_seconds"), full["per_step_seconds"])
    if r is None:
        return _not_run(_why_not(g, _peer_missing(results.get("peers")) or "no peer figure"))
    return _ratio(r), r >= limit


def _growth(results: dict[str, Any]) -> tuple[str, bool | None]:
    if not _ok(results, "loops"):
        return _not_run("loops section not run")
    by, _ = _steps(results)
    found = []
    for sync in ("FULL", "NORMAL"):
        small, large = by.get((sync, 10)), by.get((sync, 3000))
        if small is None or large is None:
            return _not_run("no runs of 10 and 3,000 steps (--quick)")
        found.append((sync, large["per_step_seconds"] / small["per_step_seconds"]))
    measured = ", ".join(f"{sync} {r:.2f}x" for sync, r in found)
    return measured, all(r <= 1.2 for _, r in found)


def _loops_ratio(results: dict[str, Any], n: int, limit: float) -> tuple[str, bool | None]:
    row = next((r for r in _rows(results, "loops", "loops") if r["loops"] == n), None)
    if row is None:
        return _not_run(f"no run of {n:,} loops (--quick or loops section not run)")
    measured = _ratio(row["ratio"])
    if n < 1000:
        return measured, row["ratio"] >= limit
    p99 = row["commit_p99_seconds"]
    return f"{measured}; p99 {p99 * 1e3:.1f} ms", row["ratio"] >= limit and p99 <= 0.050


def _harness_ratio(results: dict[str, Any]) -> tuple[str, bool | None]:
    rows = _rows(results, "journal")
    ratio = {(r["benchmark"].strip(), r["backend"]): r["ratio"] for r in rows}
    found = [
        (sync, ratio.get(("(bare: trio harness)", f"sqlite {sync}"))) for sync in ("FULL", "NORMAL")
    ]
    if any(r is None for _, r in found):
        return _not_run("journal section not run")
    return ", ".join(f"{sync} {_ratio(r)}" for sync, r in found), all(
        r is not None and r >= 0.9 for _, r in found
    )


def _read_ratio(results: dict[str, Any]) -> tuple[str, bool | None]:
    rows = _rows(results, "journal")
    r = next(
        (x["ratio"] for x in rows if x["benchmark"] == "read+decode (bare: + chain check)"), None
    )
    if r is None:
        return _not_run("journal section not run")
    return _ratio(r), r >= 0.9


def _full_fold_ratio(results: dict[str, Any]) -> tuple[str, bool | None]:
    rows = _rows(results, "restore")
    big = next((r for r in rows if r["records"] >= 90_000), None)
    if big is None or big.get("full_floor_ratio") is None:
        return _not_run("no restore of 100k records (--quick or restore not run)")
    r = big["full_floor_ratio"]
    return _ratio(r), r >= 0.7


def _idle(results: dict[str, Any]) -> tuple[str, bool | None]:
    row = next((r for r in _rows(results, "loops", "idle") if r["loops"] == 100_000), None)
    if row is None:
        return _not_run("no run of 100,000 idle sessions (--quick)")
    per = row["bytes_per_loop"]
    seconds = row["setup_seconds"]
    return (
        f"{seconds:.0f} s ({_setup_cpu(row)}gc {row['gc_seconds']:.0f} s), "
        f"{format_bytes(per)} each",
        seconds <= 60 and per <= 8 * 1024,
    )


BARE_LOOP_RATIOS: tuple[tuple[str, str, Any], ...] = (
    ("durable waits per tool step (a turn of one tool step, counted)", "<= 3", _waits_target),
    (
        "LangGraph / ours per step, at 10 steps (FULL)",
        ">= 5x",
        lambda res: _lg_ratio(res, 10, 5),
    ),
    (
        "LangGraph / ours per step, at 1,000 steps (FULL)",
        ">= 25x",
        lambda res: _lg_ratio(res, 1000, 25),
    ),
    ("per-step cost at 3,000 steps / at 10, FULL and NORMAL", "<= 1.2x both", _growth),
    ("100 loops / bare records/s", ">= 0.7x", lambda res: _loops_ratio(res, 100, 0.7)),
    (
        "1,000 loops / bare records/s; commit p99",
        ">= 0.6x; <= 50 ms",
        lambda res: _loops_ratio(res, 1000, 0.6),
    ),
    (
        "journal, 100 concurrent appenders / the trio-harness ceiling (FULL and NORMAL)",
        ">= 0.9x",
        _harness_ratio,
    ),
    ("read+decode / bare loop with chain check", ">= 0.9x", _read_ratio),
    ("full-fold restore / bare read+decode floor, 100k records", ">= 0.7x", _full_fold_ratio),
    ("creating 100,000 idle sessions", "<= 60 s, <= 8 KB each", _idle),
)
"""Issue 22's rows, the runtime beside bare loops that do none of its work: (figure, the
bound issue 22 set, how to read it from the results).  Issue 39 keeps them as information."""


def bare_loop_ratios(results: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """Every row of issue 22's table: (figure, bound, measured, within / outside the bound /
    None: not measured in this run)."""
    return [(name, bound, *read(results)) for name, bound, read in BARE_LOOP_RATIOS]


# -- the performance targets (issue 39) --------------------------------------------------

Verdict = bool | str
"""True: met; False: missed; a string: why this run has no verdict ("not run: ...")."""
TargetRow = tuple[str, str, str, Verdict]
"""(figure, target, measured, verdict): one row of the performance targets' table."""

_NO_POSTGRES = (
    "no figure: no PostgreSQL server (set LOOPRUNTIME_TEST_PG_DSN or run scripts/ensure-postgres)"
)


def _not_ran(results: dict[str, Any], name: str) -> str | None:
    """Why section ``name`` has no figures in this run, with the flag that runs it; None
    when it ran to the end."""
    section = results.get(name)
    if section is None:
        return f"not run: `./dev bench --only {name}` runs it"
    if section["status"] == "error":
        return f"not run: the {name} section failed (above)"
    if section["status"] != "ok":
        return f"not run: {section.get('reason', section['status'])}"
    return None


def _cpu_at_n(side: dict[str, Any]) -> float | None:
    """A side's CPU a turn at the N it reached: the median over its runs at that N."""
    found = sorted(
        run["cpu_per_turn"]
        for run in side.get("runs", [])
        if run["sessions"] == side.get("n") and run.get("cpu_per_turn") is not None
    )
    return found[len(found) // 2] if found else None


def _agents_target(results: dict[str, Any]) -> list[TargetRow]:
    """Target 1: agents per core, from ``benchmarks.agents`` (one process on one core)."""
    figure, target = "agents per core, ours / LangGraph (N per core; CPU a turn, ms)", ">= 5x"
    why = _not_ran(results, "agents")
    if why is not None:
        return [(figure, target, "-", why)]
    ours, peer = results["agents"]["ours"], results["agents"]["langgraph"]
    measured = f"ours N {ours['n']} (CPU {_ms(_cpu_at_n(ours))})"
    if "skipped" in peer:
        return [(figure, target, measured, f"no figure: LangGraph {peer['skipped']}")]
    measured += f", LangGraph N {peer['n']} (CPU {_ms(_cpu_at_n(peer))})"
    if not peer["n"]:
        return [(figure, target, measured, "no ratio: LangGraph passed at no N it tried")]
    ratio = ours["n"] / peer["n"]
    return [(figure, target, f"{_ratio(ratio)}: {measured}", ratio >= 5)]


def _floor_targets(results: dict[str, Any]) -> list[TargetRow]:
    """Target 2: a durable tool step beside one bare commit, from ``benchmarks.floor``."""
    why = _not_ran(results, "floor")
    by = {row["backend"]: row for row in _rows(results, "floor")}
    found: list[TargetRow] = []
    for backend, name in (
        ("sqlite FULL", "SQLite FULL"),
        ("sqlite NORMAL", "SQLite NORMAL"),
        ("postgres", "PostgreSQL"),
    ):
        figure, target = f"a durable tool step / one bare commit, {name}", "<= 2x"
        row = by.get(backend)
        if row is None:
            missing = _NO_POSTGRES if backend == "postgres" else f"no figure: no {backend} row"
            found.append((figure, target, "-", why or missing))
            continue
        step, bare = _ms(row["per_step_seconds"]), _ms(row["bare_commit_seconds"])
        measured = f"{_ratio(row['ratio'])} ({step} / {bare} ms)"
        found.append((figure, target, measured, row["ratio"] <= 2.0))
    return found


_SCALE_OUT = "scale-out: {} per turn, 2 hosts / 1 host"


def _scaleout_targets(results: dict[str, Any]) -> list[TargetRow]:
    """Target 3: two hosts beside one on PostgreSQL, from the hosts section's scale-out
    rows (``benchmarks.scaleout``)."""
    why = _not_ran(results, "hosts")
    by = {row["benchmark"]: row for row in _rows(results, "hosts")}
    cpu_one = by.get("scale-out: host CPU per turn, 1 host")
    cpu_two = by.get("scale-out: host CPU per turn, 2 hosts")
    cpu_detail = (
        f" ({cpu_one['value']:.2f} -> {cpu_two['value']:.2f} ms)" if cpu_one and cpu_two else ""
    )
    found: list[TargetRow] = []
    for figure, measure, limit, detail in (
        ("two hosts / one host, host CPU per turn", "host CPU", 1.15, cpu_detail),
        ("two hosts / one host, PostgreSQL statements per turn", "statements", 1.10, ""),
    ):
        target = f"<= {limit:.2f}x"
        row = by.get(_SCALE_OUT.format(measure))
        if row is None:
            found.append((figure, target, "-", why or _NO_POSTGRES))
        elif row["met"] is None:
            found.append((figure, target, "-", f"no figure: {row['note']}"))
        else:
            value = row["value"]
            found.append((figure, target, _ratio(value) + detail, value <= limit))
    return found


_TAKEOVER = re.compile(r"takeover of ([\d,]+) sessions \((\w+)\): heir / bare read")
_TAKEN_OVER = 1_000


def _takeover_targets(results: dict[str, Any]) -> list[TargetRow]:
    """Target 4: a takeover of 1,000 sessions beside a bare read of them, from the hosts
    section's takeover rows (``benchmarks.takeover``)."""
    why = _not_ran(results, "hosts")
    by: dict[str, tuple[int, dict[str, Any]]] = {}
    for row in _rows(results, "hosts"):
        match = _TAKEOVER.fullmatch(row["benchmark"])
        if match:
            by[match[2]] = (int(match[1].replace(",", "")), row)
    found: list[TargetRow] = []
    for backend, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        figure, target = f"a takeover of {_TAKEN_OVER:,} sessions / the bare read, {name}", "<= 2x"
        if backend not in by:
            found.append((figure, target, "-", why or _NO_POSTGRES))
            continue
        count, row = by[backend]
        if count != _TAKEN_OVER:
            measured = f"{_ratio(row['value'])} at {count:,} sessions"
            found.append((figure, target, measured, "not run at 1,000 sessions: drop --quick"))
        else:
            found.append((figure, target, _ratio(row["value"]), row["value"] <= 2.0))
    return found


def _issue39_row(benchmark: str) -> bool:
    """A hosts row that the performance targets' table reads (so not listed twice)."""
    return benchmark.startswith("scale-out: ") or _TAKEOVER.fullmatch(benchmark) is not None


def performance_targets(results: dict[str, Any]) -> list[TargetRow]:
    """Issue 39's four targets, one row per measured figure, in the issue's order."""
    return [
        *_agents_target(results),
        *_floor_targets(results),
        *_scaleout_targets(results),
        *_takeover_targets(results),
    ]


def _verdict_cell(verdict: Verdict) -> str:
    if verdict is True:
        return "met"
    if verdict is False:
        return "**missed**"
    return verdict


def performance_targets_table(results: dict[str, Any]) -> list[str]:
    """The performance targets' section of the report: its heading, a line, the table."""
    return [
        "### Performance targets (issue 39)",
        "",
        "What a user of a host feels, each a ratio measured in one run: agents per core "
        "beside LangGraph, a durable tool step beside one bare commit, two hosts beside one, "
        "a takeover beside a bare read of the same sessions.",
        "",
        *_table(
            ["figure", "target", "measured", ""],
            [[f, t, m, _verdict_cell(v)] for f, t, m, v in performance_targets(results)],
        ),
    ]


# -- the report ---------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> Targets:
    """Every target the sections that ran can tell, in the order the report lists them."""
    found: Targets = []
    if _ok(results, "loops"):
        _step_targets(results, found)
    if _ok(results, "restore"):
        _restore_targets(results, found)
    if _ok(results, "loops"):
        _loops_targets(results, found)
    if _ok(results, "journal"):
        journal_targets(results["journal"]["rows"], found)
    if _ok(results, "hosts"):
        hosts_targets(results["hosts"]["rows"], found)
    return found


def hosts_section(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every hosts figure with its target and verdict (``benchmarks/hosts.py``)."""
    verdict = {True: "met", False: "**missed**", None: ""}
    return [
        "### Hosts",
        "",
        "Failover, activation, passivated sessions, throughput and the inbox "
        "(`benchmarks/hosts.py`).",
        "",
        *_table(
            ["figure", "measured", "target", "", "conditions"],
            [
                [
                    r["benchmark"],
                    format_number(r["value"], ".2f") + f" {r['unit']}",
                    r["target"] or "-",
                    verdict[r["met"]],
                    r["note"],
                ]
                for r in rows
            ],
        ),
    ]


def hosts_targets(rows: Sequence[dict[str, Any]], targets: Targets) -> None:
    for r in rows:
        if r["met"] is not None and not _issue39_row(r["benchmark"]):
            value = format_number(r["value"], ".2f") + f" {r['unit']}"
            targets.append((f"{r['benchmark']} {r['target']}", value, r["met"]))


def render(results: dict[str, Any]) -> str:
    """The markdown report: machine, one table per scenario, issue 22's ratios and the
    earlier targets as information, and last issue 39's performance targets."""
    m = results["machine"]
    memory = format_bytes(m["memory_bytes"]) if m["memory_bytes"] else "?"
    lines = [
        f"## Benchmarks ({'quick' if results['quick'] else 'full'} run, {results['date']})",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {memory} RAM, {m['os']}; Python "
        f"{m['python']}, SQLite {m['sqlite']}, trio {m['trio']}, msgspec {m['msgspec']}.",
    ]
    peer = _peers_ok(results)
    if peer:
        versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in peer["versions"].items())
        lines.append(f"Peers: {versions}.")
    if _ok(results, "loops"):
        lines += ["", *_step_section(results)]
    if _ok(results, "restore"):
        lines += ["", *_restore_section(results)]
    if _ok(results, "loops"):
        lines += ["", *_loops_section(results)]
    if _ok(results, "blobs"):
        lines += [
            "",
            "### Large records by reference",
            "",
            "A session whose tool calls return 1 MiB each, appended into SQLite and "
            "restored, stored by reference (the default 256 KiB threshold) and inline, "
            "in the same run (`benchmarks/blobs.py`).",
            "",
            *blob_rows(results["blobs"]["rows"]),
        ]
    if _ok(results, "journal"):
        lines += [
            "",
            "### Journal",
            "",
            "Journal operations beside a bare loop doing the same storage work "
            "(`benchmarks/journal.py`).",
            "",
            *_rate_rows(results["journal"]["rows"]),
        ]
    if _ok(results, "clients"):
        lines += ["", *clients_section(results["clients"]["rows"])]
    if _ok(results, "console"):
        console = results["console"]
        lines += ["", *console_section(console["rows"], console.get("browser"))]
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
    if _ok(results, "hosts"):
        lines += ["", *hosts_section(results["hosts"]["rows"])]
    if _ok(results, "limiter"):
        lines += ["", *limiter_section(results["limiter"]["rows"])]
    if _ok(results, "agents"):
        lines += ["", *agents_section(results["agents"])]
    if _ok(results, "floor"):
        lines += ["", *floor_section(results["floor"]["rows"])]
    for name in SECTIONS:
        section = results.get(name)
        if section is not None and section["status"] == "error":
            lines += ["", f"**{name} failed:** {section['reason']}"]
    against = {True: "within", False: "outside", None: "not measured"}
    lines += [
        "",
        "### Issue 22's ratios against bare loops (information, not targets)",
        "",
        "The runtime beside bare loops that do none of its work, read against the bounds "
        "issue 22 set; issue 39 keeps them as information.",
        "",
    ]
    lines += _table(
        ["figure", "issue 22's bound", "measured", ""],
        [[n, b, m, against[ok]] for n, b, m, ok in bare_loop_ratios(results)],
    )
    found = targets(results)
    if found:
        verdict: dict[bool | str | None, str] = {
            True: "met",
            False: "**missed**",
            None: "no peer figure",
            INFO: "information, not a target",
        }
        lines += ["", "### Earlier targets and ceilings", ""]
        lines += _table(
            ["target", "measured", ""], [[t, value, verdict[ok]] for t, value, ok in found]
        )
    # Last, so a run's output ends with the four targets.
    lines += ["", *performance_targets_table(results)]
    return "\n".join(lines)
