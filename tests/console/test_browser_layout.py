"""The console's layout in a real headless Chromium: the status badges stay
one short line, an error page says nothing about read-only on a console that
acts, and the session list fits a 420 px wide window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console.browser import HANG, Stack, browser_context, in_journal, stack

pytestmark = pytest.mark.slow

LONG_ID = "ses_" + "7f3a9c2e41d8b605" * 3
"""A session id longer than a narrow window's table cell."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with browser_context() as context:
        yield context


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A console over sessions in three states: idle (a long id), waiting at
    a gate, and on a tool call whose outcome is unknown."""
    with stack(tmp_path_factory.mktemp("layout")) as s:

        async def work(client: Any, journal: Any) -> None:
            for sid, said in (
                (LONG_ID, "hello"),
                ("ses_gate", "book it"),
                ("ses_unk", "charge it"),
            ):
                await client.create("console", session_id=sid, key=f"{sid}/c")
                await client.submit(sid, said, key=f"{sid}/s")

        in_journal(s.url, work)
        yield s


def open_list(browser: Any, shared: Stack, width: int) -> Any:
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": 760})
    page.goto(shared.link)
    page.wait_for_function(
        "() => ['idle', 'waiting', 'unknown'].every("
        "s => document.querySelector(`#sessions .pill.${s}`))",
        timeout=HANG,
    )
    return page


def test_the_unknown_badge_is_one_line_like_the_others(browser: Any, shared: Stack) -> None:
    page = open_list(browser, shared, 1100)
    boxes = {
        status: page.locator(f"#sessions .pill.{status}").first.bounding_box()
        for status in ("idle", "waiting", "unknown")
    }
    heights = {status: round(box["height"]) for status, box in boxes.items()}
    assert len(set(heights.values())) == 1, heights
    assert heights["unknown"] < 24, heights
    page.context.close()


def test_the_session_list_fits_a_narrow_window(browser: Any, shared: Stack) -> None:
    page = open_list(browser, shared, 420)
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the page is {overflow} px wider than a 420 px window"
    # The long id is still there to read and to click.
    link = page.locator(f'#sessions tr[data-session="{LONG_ID}"] a')
    box = link.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 420
    page.context.close()


def test_an_error_page_of_an_acting_console_shows_no_read_only_badge(
    browser: Any, shared: Stack, tmp_path: Path
) -> None:
    page = browser.new_page()
    page.goto(shared.link)
    response = page.goto(shared.link.split("?")[0].rstrip("/") + "/sessions/ses_nope")
    assert response is not None and response.status == 404
    assert "there is no session ses_nope" in page.locator("main").inner_text()
    assert page.locator("header .badge").count() == 0
    assert page.locator("body").get_attribute("data-mode") == "acting"
    page.context.close()
    with stack(tmp_path, read_only=True) as quiet:
        page = browser.new_page()
        page.goto(quiet.link)
        page.goto(quiet.link.split("?")[0].rstrip("/") + "/sessions/ses_nope")
        assert page.locator("header .badge").inner_text() == "read-only"
        page.context.close()
