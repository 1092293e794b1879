"""The console in a real headless Chromium against a real console process, on
a SQLite journal where host processes run the scenario (``scenario.py``):
the list, a session, a reply streaming in without a reload, a gate approved,
an unknown effect resolved after a SIGKILLed host, time travel, the tree,
and markup in a tool result shown as text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from journal.events import GateResolved, ToolAbandoned, ToolStarted, TurnEnded
from tests.console.browser import HANG, Stack, browser_context, in_journal, stack
from tests.console.scenario import HOSTILE, STREAMED

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with browser_context() as context:
        yield context


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack(tmp_path_factory.mktemp("console")) as s:
        yield s


@pytest.fixture
def page(browser: Any, shared: Stack) -> Iterator[Any]:
    p = browser.new_page()
    problems: list[str] = []
    p.on("pageerror", lambda e: problems.append(str(e)))
    p.goto(shared.link)
    yield p
    p.context.close()
    assert problems == [], problems


def new_session(s: Stack, *said: str, key: str) -> str:
    async def work(client: Any, journal: Any) -> str:
        sid = await client.create("console", key=f"{key}/c")
        for i, text in enumerate(said):
            await client.submit(sid, text, key=f"{key}/{i}")
        return sid

    return in_journal(s.url, work)


def submit(s: Stack, sid: str, text: str, key: str) -> None:
    async def work(client: Any, journal: Any) -> None:
        await client.submit(sid, text, key=key)

    in_journal(s.url, work)


def open_session(page: Any, sid: str) -> None:
    page.goto(page.url.split("/sessions/")[0].rstrip("/") + "/")
    page.locator(f'#sessions tr[data-session="{sid}"] a').click()
    page.wait_for_selector("#session[data-ready=true]")


def lines_text(page: Any) -> str:
    return str(page.locator("#lines").inner_text())


def wait_text(page: Any, text: str) -> None:
    page.wait_for_function(
        "t => document.getElementById('lines').textContent.includes(t)", arg=text, timeout=HANG
    )


def test_the_list_shows_sessions_and_opens_one(page: Any, shared: Stack) -> None:
    sid = new_session(shared, "hello there", key="list")
    row = page.locator(f'#sessions tr[data-session="{sid}"]')
    row.wait_for()
    page.wait_for_function(
        "sid => document.querySelector(`tr[data-session='${sid}'] td.records`).textContent > 5",
        arg=sid,
    )
    assert row.get_attribute("data-status") in ("idle", "running")
    page.locator('#filters button[data-status="waiting"]').click()
    assert page.locator(f'#sessions tr[data-session="{sid}"]').count() == 0
    page.locator('#filters button[data-status="all"]').click()
    row.locator("a").click()
    page.wait_for_selector("#session[data-ready=true]")
    wait_text(page, "echo: hello there")
    assert page.locator("#session h1 code").inner_text() == sid


def test_a_streaming_reply_appears_without_a_reload(page: Any, shared: Stack) -> None:
    sid = new_session(shared, key="stream")
    open_session(page, sid)
    page.evaluate("window.notReloaded = true")
    submit(shared, sid, "stream it", key="stream/1")
    page.wait_for_function(
        "() => { const s = document.querySelector('li.stream .streaming');"
        " return s && s.textContent.length > 0; }"
    )
    partial = page.locator("li.stream .streaming").inner_text()
    assert STREAMED.startswith(partial) and len(partial) < len(STREAMED)
    wait_text(page, f"assistant: {STREAMED}")
    assert page.locator("li.stream").count() == 0
    assert page.evaluate("window.notReloaded") is True


def test_approving_a_gate_shows_the_tools_result(page: Any, shared: Stack) -> None:
    sid = new_session(shared, "book a table", key="gate")
    open_session(page, sid)
    gate = page.locator(".gate.permission")
    gate.wait_for()
    assert "book_table" in gate.inner_text()
    gate.locator("button.allow_once").click()
    wait_text(page, "Table booked at Chez Loop.")
    wait_text(page, "! allowed (once)")
    page.locator("#actions").wait_for(state="hidden")
    # The record the decision made is named, marked, and opens.
    done = page.locator("#outcomes li.done")
    done.wait_for()
    assert "Allow once (book_table" in done.inner_text()
    assert "(gate.resolved)" in done.inner_text()
    landed = page.locator("#lines li.landed")
    assert landed.get_attribute("data-tag") == "gate.resolved"
    done.locator("button").click()
    page.wait_for_function("() => document.getElementById('record-json').textContent.length > 0")
    assert json.loads(page.locator("#record-json").inner_text())["event"]["type"] == "gate.resolved"


def test_a_question_is_answered_with_a_choice(page: Any, shared: Stack) -> None:
    sid = new_session(shared, "ask me", key="ask")
    open_session(page, sid)
    page.locator(".gate.user_input button", has_text="blue").click()
    wait_text(page, "Done: picked blue")
    assert 'answered "blue"' in page.locator("#outcomes li.done").inner_text()


def test_markup_in_a_tool_result_is_shown_as_text(page: Any, shared: Stack) -> None:
    sid = new_session(shared, "page please", key="markup")
    open_session(page, sid)
    wait_text(page, "Done: ")
    assert HOSTILE in lines_text(page)
    assert page.title() != "owned"
    assert page.locator("#lines #bold").count() == 0
    assert page.locator("#lines script").count() == 0


def test_the_time_slider_shows_an_earlier_state_and_a_record_opens(
    page: Any, shared: Stack
) -> None:
    sid = new_session(shared, "first words", "second words", key="travel")
    open_session(page, sid)
    wait_text(page, "echo: second words")
    page.locator("button[data-tab=travel]").click()
    page.wait_for_function("() => document.getElementById('states').textContent.length > 0")
    assert "echo: second words" in page.locator("#states").inner_text()
    page.locator("#slider").fill("5")
    page.wait_for_selector("#states[data-seq='5']")
    early = page.locator("#states").inner_text()
    assert early.startswith("state as of seq 5")
    assert "second words" not in early and "first words" in early
    page.locator("#seq").fill("999999")
    page.locator("#seq").press("Enter")
    page.wait_for_selector("#states.problem")
    assert "out of range" in page.locator("#states").inner_text()
    page.locator("button[data-tab=transcript]").click()
    # seq 3 is the submit's command.keyed record, seq 4 the input it queued.
    page.locator('#lines li[data-seq="4"] button.seq').click()
    page.locator("#record").wait_for()
    page.wait_for_function("() => document.getElementById('record-json').textContent.length > 0")
    record = json.loads(page.locator("#record-json").inner_text())
    assert record["seq"] == 4 and record["event"]["type"] == "input.queued"


def test_the_tree_is_collapsible(page: Any, shared: Stack) -> None:
    sid = new_session(shared, "hello tree", key="tree")
    open_session(page, sid)
    wait_text(page, "echo: hello tree")
    page.locator("button[data-tab=tree]").click()
    stream = page.locator("#tree-body > details").first
    stream.wait_for()
    assert "stream main (console, scripted:console)" in stream.locator("summary").first.inner_text()
    assert "echo: hello tree" in page.locator("#tree-body").inner_text()
    stream.locator("summary").first.click()
    assert stream.get_attribute("open") is None
    assert not page.locator("#tree-body details details").first.is_visible()


def test_an_unknown_effect_after_a_sigkilled_host_is_resolved_from_the_page(
    browser: Any, tmp_path: Path
) -> None:
    with stack(tmp_path, hosts=("a",)) as s:
        sid = new_session(s, "invoice ACME", key="kill")

        async def started(client: Any, journal: Any) -> bool:
            return any([isinstance(r.event, ToolStarted) async for r in journal.read(sid)])

        page = browser.new_page()
        page.goto(s.link)
        open_session(page, sid)
        wait_text(page, "→ send_invoice")
        assert in_journal(s.url, started)
        s.kill_host("a")
        s.start_host("b")  # takes the session once a's lease expires, and restores it
        box = page.locator(".unknown")
        box.wait_for()
        assert "send_invoice" in box.inner_text()
        box.locator("textarea").fill("sent, the ledger shows it")
        box.locator("button[type=submit]").click()
        wait_text(page, "resolved by")
        wait_text(page, "Done: sent, the ledger shows it")

        async def abandoned(client: Any, journal: Any) -> int:
            return len([r async for r in journal.read(sid) if isinstance(r.event, ToolAbandoned)])

        assert in_journal(s.url, abandoned) == 1
        page.close()


def test_a_read_only_console_shows_no_action(browser: Any, tmp_path: Path) -> None:
    with stack(tmp_path, read_only=True) as s:
        sid = new_session(s, "book a table", key="ro")
        page = browser.new_page()
        page.goto(s.link)
        open_session(page, sid)
        page.locator(".gate.permission").wait_for()
        assert page.locator(".gate button").count() == 0
        assert page.locator("header .badge").inner_text() == "read-only"
        page.close()


def test_a_gate_answered_elsewhere_is_shown_as_answered_and_nothing_is_sent_twice(
    browser: Any, shared: Stack
) -> None:
    sid = new_session(shared, "book a table", key="twice")
    fresh = browser.new_page()
    fresh.goto(f"{shared.address}/sessions/{sid}?token={shared.token}")
    fresh.locator(".gate.permission").wait_for()
    # A second page that stays as it was when the gate opened: its stream is
    # replayed from a copy taken now, so it never learns the gate closed.
    events = f"{shared.address}/api/sessions/{sid}/events"
    snapshot = b""
    with httpx.stream("GET", events, headers={"x-console-token": shared.token}) as r:
        for chunk in r.iter_bytes():
            snapshot += chunk
            if b"event: ready" in snapshot:
                break
    stale = browser.new_page()
    stale.route(
        "**/events*",
        lambda route: route.fulfill(
            status=200, headers={"content-type": "text/event-stream"}, body=snapshot
        ),
    )
    stale.goto(f"{shared.address}/sessions/{sid}?token={shared.token}")
    stale.locator(".gate.permission").wait_for()
    fresh.locator(".gate.permission button.allow_once").click()
    fresh.locator("#outcomes li.done").wait_for()
    stale.locator(".gate.permission button.deny").click()
    refused = stale.locator("#outcomes li.problem")
    refused.wait_for()
    assert "was already answered at seq" in refused.inner_text()
    assert "(allowed)" in refused.inner_text()

    async def resolutions(client: Any, journal: Any) -> int:
        return len([r async for r in journal.read(sid) if isinstance(r.event, GateResolved)])

    assert in_journal(shared.url, resolutions) == 1
    fresh.context.close()
    stale.context.close()


def test_long_text_is_drawn_folded_and_unfolds_on_request(page: Any, shared: Stack) -> None:
    long = "long " + "".join(f"{i:06d} " for i in range(10_000))  # 70,005 characters
    sid = new_session(shared, long, key="fold")
    open_session(page, sid)
    # The person's message and the echo of it: each drawn as its first 4,096
    # characters and a button, not as 70,000.
    page.wait_for_function(
        "() => document.querySelectorAll('#lines .folded').length >= 2", timeout=HANG
    )
    assert page.evaluate("document.getElementById('lines').textContent.length") < 20_000
    first = page.locator(f'#lines [data-length="{len(long)}"]').first
    assert "folded" in (first.get_attribute("class") or "")
    assert "65,909 of 70,005 characters hidden" in first.locator("button.unfold").inner_text()
    first.locator("button.unfold").click()  # 65,536 more: all but the last 373
    assert "373 of 70,005" in first.locator("button.unfold").inner_text()
    first.locator("button.unfold").click()
    assert first.locator("button.unfold").count() == 0
    assert "folded" not in (first.get_attribute("class") or "")
    assert first.text_content() == long
    # The record's JSON is folded alike.
    first.locator("xpath=ancestor::li").locator("button.seq").click()
    page.locator("#record-json .folded button.unfold").wait_for()


def test_the_tree_names_the_call_that_starts_a_child(page: Any, shared: Stack) -> None:
    from journal import Draft
    from tests.replay.test_unified import (
        child_result,
        child_run,
        delegating,
        resume,
        started,
        tool_done,
    )

    sid = "ses_delegated"
    parts = [
        ("main", [*delegating("x1", "tu1"), started("kid")]),
        ("kid", child_run("kid")),
        ("main", [*child_result("kid", exact=True), tool_done("x1", "tu1", "Chez Nous")]),
        ("main", [TurnEnded(turn=1, outcome="completed"), *resume(2, "res-kid")]),
    ]

    async def work(client: Any, journal: Any) -> None:
        lease = await journal.open_session(sid)
        seq = 0
        for loop, events in parts:
            for event in events:
                await journal.append(
                    lease, [Draft(id=f"r{seq}", loop=loop, event=event)], expected_seq=seq
                )
                seq += 1

    in_journal(shared.url, work)
    open_session(page, sid)
    page.locator("button[data-tab=tree]").click()
    page.wait_for_function(
        "t => document.getElementById('tree-body').textContent.includes(t)",
        arg="stream kid (helper, m) — idle; started by step:main:tu1",
        timeout=HANG,
    )
    # The parent's stream is started by nothing.
    main = page.locator("#tree-body > details > summary").first.inner_text()
    assert main.startswith("stream main") and "started by" not in main
