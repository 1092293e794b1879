"""The console under load, in a real browser: 50 sessions appending while a
list page and session pages are open (every page ends up to date, the
console's memory stays flat), and the figures: commit to appearance in an
open page over 1,000 records, and the load of a 10,000-record session.

The figures are measured, printed and written to
``benchmarks/results-console.json`` (``$LOOPRUNTIME_CONSOLE_FIGURES`` to
change); nothing here asserts a wall-clock bound."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from journal import open_journal
from session import Session
from tests.console.browser import HANG, browser_context, stack
from tests.console.scenario import definition
from tests.support.processes import ROOT

pytestmark = pytest.mark.slow

FIGURES = Path(
    os.environ.get("LOOPRUNTIME_CONSOLE_FIGURES", ROOT / "benchmarks" / "results-console.json")
)


async def _talk(journal: Any, sid: str, said: list[str], create: bool) -> None:
    opened = (
        Session.create(journal, definition(), session_id=sid)
        if create
        else Session.restore(journal, sid, definition())
    )
    async with opened as s:
        for text in said:
            await s.submit(text)
            await s.wait_idle()


def append(
    url: str, sessions: list[str], rounds: int, *, start: int = 0, create: bool = False
) -> None:
    """Every session in ``sessions`` takes ``rounds`` turns, all at once."""

    async def run() -> None:
        async with open_journal(url) as journal, trio.open_nursery() as nursery:
            for sid in sessions:
                said = [f"round {start + i}" for i in range(rounds)]
                nursery.start_soon(_talk, journal, sid, said, create)

    trio.run(run)


def heads(url: str, sessions: list[str]) -> dict[str, int]:
    async def run() -> dict[str, int]:
        async with open_journal(url) as journal:
            return {sid: await journal.head(sid) for sid in sessions}

    return trio.run(run)


def wait_up_to_date(list_page: Any, pages: dict[str, Any], expected: dict[str, int]) -> None:
    for sid, page in pages.items():
        page.wait_for_selector(f"#session[data-head='{expected[sid]}']", timeout=HANG)
    list_page.wait_for_function(
        """expected => Object.entries(expected).every(([sid, head]) => {
            const cell = document.querySelector(`tr[data-session='${sid}'] td.records`);
            return cell && Number(cell.textContent) === head; })""",
        arg=expected,
        timeout=HANG,
    )


def _record(figures: dict[str, Any]) -> None:
    old = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    old.update(figures)
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps(old, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


def test_fifty_appending_sessions_keep_every_page_current_and_memory_flat(tmp_path: Path) -> None:
    with stack(tmp_path, hosts=()) as s, browser_context() as browser:
        sessions = [f"ses_load{i:02d}" for i in range(50)]
        append(s.url, sessions, 1, create=True)
        list_page = browser.new_page()
        list_page.goto(s.link)
        watched = {sid: browser.new_page() for sid in sessions[:10]}
        for sid, page in watched.items():
            page.goto(f"{s.address}/sessions/{sid}?token={s.token}")
            page.wait_for_selector("#session[data-ready=true]")
        append(s.url, sessions, 3, start=1)
        wait_up_to_date(list_page, watched, heads(s.url, sessions))
        before = s.console_rss()
        append(s.url, sessions, 12, start=4)
        written = time.perf_counter()
        expected = heads(s.url, sessions)
        wait_up_to_date(list_page, watched, expected)
        caught_up = time.perf_counter() - written
        after = s.console_rss()
        records = sum(expected.values())
        _record(
            {
                "load_50_sessions": {
                    "records": records,
                    "rss_kb_before": before,
                    "rss_kb_after": after,
                    "pages_current_s_after_last_commit": round(caught_up, 2),
                }
            }
        )
        # Four times the records, and the console holds about what it held.
        assert after / before < 1.3, (before, after)


def test_figures_commit_to_page_and_a_large_session_loads(tmp_path: Path) -> None:
    with stack(tmp_path, hosts=()) as s, browser_context() as browser:
        append(s.url, ["ses_watched"], 1, create=True)
        page = browser.new_page()
        page.goto(s.link)
        page.goto(f"{s.address}/sessions/ses_watched?token={s.token}")
        page.wait_for_selector("#session[data-ready=true]")
        first = heads(s.url, ["ses_watched"])["ses_watched"]
        # When each record reached the page, in the browser's clock: the page
        # moves data-head once it has shown a record (a line, or streamed text).
        page.evaluate(
            """() => {
            window.seen = {};
            const main = document.getElementById('session');
            new MutationObserver(changes => {
              const now = performance.timeOrigin + performance.now();
              for (const c of changes) {
                for (let seq = Number(c.oldValue) + 1; seq <= Number(main.dataset.head); seq++)
                  if (!(seq in window.seen)) window.seen[seq] = now; } })
            .observe(main, {
              attributes: true, attributeFilter: ['data-head'], attributeOldValue: true}); }"""
        )
        rounds = 0
        writing = time.perf_counter()
        while heads(s.url, ["ses_watched"])["ses_watched"] - first < 1000:
            append(s.url, ["ses_watched"], 25, start=rounds + 1)
            rounds += 25
        last = heads(s.url, ["ses_watched"])["ses_watched"]
        rate = (last - first) / (time.perf_counter() - writing)
        page.wait_for_selector(f"#session[data-head='{last}']", timeout=HANG)
        seen = page.evaluate("window.seen")

        async def stamps() -> dict[int, int]:
            async with open_journal(s.url) as journal:
                return {r.seq: r.at async for r in journal.read("ses_watched", after=first)}

        committed = trio.run(stamps)
        lags = sorted(seen[str(seq)] - at / 1e6 for seq, at in committed.items())
        assert len(lags) == last - first >= 1000
        p50, p99 = statistics.median(lags), lags[int(len(lags) * 0.99) - 1]

        big = "ses_big"
        append(s.url, [big], 1, create=True)
        while heads(s.url, [big])[big] < 10_000:
            append(s.url, [big], 200, start=1)
        size = heads(s.url, [big])[big]
        load = browser.new_page()
        started = time.perf_counter()
        load.goto(f"{s.address}/sessions/{big}?token={s.token}")
        load.wait_for_selector(f"#session[data-ready=true][data-head='{size}']", timeout=HANG)
        loaded = time.perf_counter() - started
        _record(
            {
                "commit_to_page_ms": {
                    "records": len(lags),
                    "p50": round(p50, 1),
                    "p99": round(p99, 1),
                    "journal_poll_s": 0.02,
                    "written_per_s": round(rate),
                },
                "page_load": {"records": size, "seconds": round(loaded, 2)},
            }
        )
