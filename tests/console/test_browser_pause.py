"""A paused session in a real headless Chromium against a real console and
host: listed as paused, and resumed from its page's Resume button."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from journal.events import LoopResumed
from tests.console.browser import HANG, Stack, browser_context, in_journal, stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with browser_context() as context:
        yield context


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack(tmp_path_factory.mktemp("console-pause"), principal="pat") as s:
        yield s


def test_a_paused_session_is_listed_and_resumed_from_its_page(browser: Any, shared: Stack) -> None:
    async def paused(client: Any, journal: Any) -> str:
        sid = await client.create("console", key="c")
        await client.pause(sid, key="p")
        await client.wait(sid, "p", timeout=HANG / 1000)
        return sid

    sid = in_journal(shared.url, paused)
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(shared.link)
    page.locator(f"tr:has-text('{sid}') .pill.paused").wait_for(timeout=HANG)
    page.goto(f"{shared.address}/sessions/{sid}")
    page.wait_for_selector("#session[data-ready=true]")
    box = page.locator(".actions .paused[data-loop=main]")
    box.wait_for(timeout=HANG)
    assert "loop main is paused" in box.inner_text()
    box.locator("button.resume").click()
    page.locator(".actions .paused").wait_for(state="detached", timeout=HANG)

    async def resumes(client: Any, journal: Any) -> list[LoopResumed]:
        return [r.event async for r in journal.read(sid) if isinstance(r.event, LoopResumed)]

    [resumed] = in_journal(shared.url, resumes)
    assert resumed.principal == "pat"
    page.context.close()
    assert problems == [], problems
