"""What a host's metrics cost a turn, with and without them, in one run.

A host on a memory journal runs one session's turns (the scripted counting
loop: a model call asking for a tool, the tool, a model call answering), fed
straight to the hosted session so no inbox poll is timed.  ``with metrics``
runs the same under ``open_host_metrics`` (its record projection subscribed
to the session) and scrapes the registry once at the end of each round; the
scrape is timed on its own.  Variants run interleaved, round after round,
each round starting with the next one; each reports its median round.

``python -m benchmarks.metrics [--quick]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import trio

from journal.memory import MemoryJournal
from session import Client, Host, open_host_metrics
from tests.host.support import wait_for
from tests.support.loops import counting_definition

from .harness import Progress, quiet_logs, stderr_progress

__all__ = ["run"]

DEFAULT_TURNS, QUICK_TURNS = 400, 60
ROUNDS = 6
VARIANTS = ("without metrics", "with metrics")


async def _round(variant: str, turns: int) -> tuple[float, float | None]:
    """Seconds per turn, and seconds for one scrape (None: no metrics)."""
    from prometheus_client import CollectorRegistry, generate_latest

    journal = MemoryJournal()
    definitions = {"counter": counting_definition()}
    async with Host.open(journal, definitions, host_id="bench", poll=0.01) as host:
        client = Client(journal)
        sid = await client.create("counter", key="c")
        await client.wait(sid, "c", timeout=60)
        await wait_for(lambda: sid in host.sessions and host.sessions[sid].session is not None)
        session = host.sessions[sid].session
        assert session is not None
        registry = CollectorRegistry()
        async with (
            open_host_metrics(host, registry) if variant == VARIANTS[1] else _nothing()
        ) as metrics:
            await trio.sleep(0.05)  # the projection finds the session before the timing
            start = time.perf_counter()
            for index in range(turns):
                await session.submit(f"count {index}")
                await session.wait_idle()
            # Timed until the projection has counted every turn: its work is the cost.
            if metrics is not None:
                tally = metrics.tally
                await wait_for(lambda: sum(tally.turns_ended.values()) >= turns, poll=0.0005)
            per_turn = (time.perf_counter() - start) / turns
            if variant == VARIANTS[0]:
                return per_turn, None
            start = time.perf_counter()
            generate_latest(registry)
            return per_turn, time.perf_counter() - start


class _nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def run(
    *, quick: bool = False, turns: int | None = None, rounds: int = ROUNDS,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:  # fmt: skip
    """One row per variant; ``overhead_seconds`` is against ``without metrics``."""
    turns = turns or (QUICK_TURNS if quick else DEFAULT_TURNS)
    per_turn: dict[str, list[float]] = {name: [] for name in VARIANTS}
    scrapes: list[float] = []
    for index in range(rounds):
        shift = index % len(VARIANTS)
        for name in VARIANTS[shift:] + VARIANTS[:shift]:
            seconds, scrape = trio.run(_round, name, turns)
            per_turn[name].append(seconds)
            if scrape is not None:
                scrapes.append(scrape)
        progress(f"round {index + 1}/{rounds}")
    base = statistics.median(per_turn[VARIANTS[0]])
    return [
        {
            "variant": name,
            "turns": turns,
            "rounds": rounds,
            "seconds_per_turn": statistics.median(values),
            "overhead_seconds": statistics.median(values) - base,
            "best_seconds_per_turn": min(values),
            "scrape_seconds": statistics.median(scrapes) if name == VARIANTS[1] else None,
        }
        for name, values in per_turn.items()
    ]


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| variant | turns a round | µs per turn | overhead µs | best µs | one scrape µs |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        scrape = "-" if r["scrape_seconds"] is None else f"{r['scrape_seconds'] * 1e6:.0f}"
        lines.append(
            f"| {r['variant']} | {r['turns']} x {r['rounds']} | {r['seconds_per_turn'] * 1e6:.0f} "
            f"| {r['overhead_seconds'] * 1e6:+.0f} | {r['best_seconds_per_turn'] * 1e6:.0f} "
            f"| {scrape} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.metrics", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer turns a round")
    args = parser.parse_args(argv)
    quiet_logs()
    print("\n".join(table(run(quick=args.quick))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
