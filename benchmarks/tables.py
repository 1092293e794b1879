"""Plain-text tables of one section run alone (``python -m benchmarks.NAME``).

Rules: rendering only, from the rows a section's ``run`` returns; the full run's markdown
report and its targets are ``benchmarks.report``.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from typing import Any

from .report import format_bytes, format_number


def journal_table(rows: Sequence[dict[str, Any]]) -> str:
    header = (
        f"{'benchmark':<36} {'backend':<14} {'n':>7} {'rate/s':>11} {'bare/s':>11} {'ratio':>6}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        bare = f"{r['bare_rate']:>11,.0f}" if r["bare_rate"] else f"{'-':>11}"
        ratio = f"{r['ratio']:>6.2f}" if r["ratio"] else f"{'-':>6}"
        name, backend = r["benchmark"], r["backend"]
        lines.append(f"{name:<36} {backend:<14} {r['n']:>7} {r['rate']:>11,.0f} {bare} {ratio}")
    return "\n".join(lines)


def loops_table(rows: Sequence[dict[str, Any]]) -> str:
    """The loops section's rows, one line each (no peers: see ``benchmarks.report``)."""
    lines: list[str] = []
    for r in rows:
        if r["scenario"] == "steps":
            lines.append(
                f"steps  {r['system']:<26} {r['steps']:>6} steps  "
                f"{r['per_step_seconds'] * 1e3:8.3f} ms/step  {r['bytes']:>12,} bytes"
            )
        elif r["scenario"] == "loops":
            lines.append(
                f"loops  {r['system']:<26} {r['loops']:>6} loops  "
                f"{r['turns_per_second']:9,.0f} turns/s {r['records_per_second']:9,.0f} rec/s "
                f"bare {r['bare_records_per_second']:9,.0f} rec/s  ratio {r['ratio']:.2f}  "
                f"p50 {r['commit_p50_seconds'] * 1e3:.2f} ms p99 "
                f"{r['commit_p99_seconds'] * 1e3:.2f} ms"
            )
        elif r["scenario"] == "idle":
            lines.append(
                f"idle   {r['system']:<26} {r['loops']:>6} loops  "
                f"{r['bytes_per_loop']:9,.0f} bytes/loop  "
                f"{r['rss_after_bytes'] / 2**20:8.1f} MiB RSS"
            )
    return "\n".join(lines)


def restore_table(rows: Sequence[dict[str, Any]]) -> str:
    header = (
        f"{'records':>8} {'messages':>9} {'ckpts':>6} {'tail':>5} {'ckpt KiB':>9} {'share':>6} "
        f"{'restore s':>10} {'full s':>8} {'fold s':>8} {'full fold s':>12} "
        f"{'floor s':>8} {'floor/restore':>14} {'floor/full':>11}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        share = f"{r['checkpoint_share']:.1%}"
        lines.append(
            f"{r['records']:>8} {r['messages']:>9} {r['checkpoints']:>6} "
            f"{r['tail_records']:>5} {r['checkpoint_bytes'] / 1024:>9.0f} {share:>6} "
            f"{r['seconds']:>10.4f} {r['full_seconds']:>8.4f} {r['fold_seconds']:>8.4f} "
            f"{r['full_fold_seconds']:>12.4f} {r['floor_seconds']:>8.4f} "
            f"{r['floor_ratio']:>14.2f} {r['full_floor_ratio']:>11.2f}"
        )
    return "\n".join(lines)


def peers_table(figures: dict[str, Any]) -> str:
    """The peer figures (``versions``, ``steps``, ``restores``, ``replays``), one table per
    scenario, with the Python and SQLite of this process."""
    versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in figures["versions"].items())
    lines = [
        f"peers: {versions}",
        f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}",
        "",
        "agent-loop steps (one model message with a tool call + one tool result per step)",
        f"{'system':<18}{'steps':>7}{'total s':>10}{'ms/step (last 10%)':>20}{'storage':>12}",
    ]
    for s in figures["steps"]:
        if s["skipped"]:
            lines.append(f"{s['system']:<18}{s['size']:>7}  skipped: {s['reason']}")
            continue
        lines.append(
            f"{s['system']:<18}{s['size']:>7}{format_number(s['seconds'], '.3f'):>10}"
            f"{format_number(s['per_step_seconds'], '.3f', 1e3):>20}"
            f"{format_bytes(s['bytes']):>12}"
        )
    for title, rows, unit in (
        ("restore: LangGraph get_state on a thread of N messages", figures["restores"], "msgs"),
        (
            "replay: eventsourcing repository.get of an aggregate of N events",
            figures["replays"],
            "ev",
        ),
    ):
        lines += [
            "",
            title,
            f"{'system':<18}{'N':>8}{'seconds':>10}{unit + '/s':>12}{'resume s':>10}"
            f"{'storage':>12}  note",
        ]
        for r in rows:
            if r["skipped"]:
                lines.append(f"{r['system']:<18}{r['size']:>8}  skipped: {r['reason']}")
                continue
            lines.append(
                f"{r['system']:<18}{r['size']:>8}{format_number(r['seconds'], '.4f'):>10}"
                f"{format_number(r['records_per_second'], ',.0f'):>12}"
                f"{format_number(r['resume_seconds'], '.3f'):>10}"
                f"{format_bytes(r['bytes']):>12}  {r['note']}"
            )
    return "\n".join(lines)


def postgres_table(rows: Sequence[dict[str, Any]]) -> str:
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
