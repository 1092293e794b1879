"""Form and URL gates, and a classifier's review, in a real headless Chromium
against a real console process started with ``--principal``: a form rendered
from its JSON Schema, refused for a bad value and then answered; a URL gate's
link (escaped, opened apart) confirmed; markup in a schema or a URL shown as
text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from journal.events import GateResolved
from tests.console.browser import HANG, Stack, browser_context, in_journal, stack
from tests.console.scenario import HOSTILE_URL

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with browser_context() as context:
        yield context


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack(tmp_path_factory.mktemp("console-gates"), principal="pat") as s:
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


def gates_session(s: Stack, said: str, key: str) -> str:
    async def work(client: Any, journal: Any) -> str:
        sid = await client.create("gates", key=f"{key}/c")
        await client.submit(sid, said, key=f"{key}/0", principal="alice")
        return sid

    return in_journal(s.url, work)


def open_session(page: Any, s: Stack, sid: str) -> None:
    page.goto(f"{s.address}/sessions/{sid}")
    page.wait_for_selector("#session[data-ready=true]")


def wait_text(page: Any, text: str) -> None:
    page.wait_for_function(
        "t => document.getElementById('lines').textContent.includes(t)", arg=text, timeout=HANG
    )


def resolutions(s: Stack, sid: str) -> list[GateResolved]:
    async def work(client: Any, journal: Any) -> list[GateResolved]:
        return [r.event async for r in journal.read(sid) if isinstance(r.event, GateResolved)]

    return in_journal(s.url, work)


def test_a_form_is_refused_for_a_bad_value_then_answered(page: Any, shared: Stack) -> None:
    sid = gates_session(shared, "form please", key="form")
    open_session(page, shared, sid)
    assert page.locator("header #principal").inner_text() == "acting as pat"
    wait_text(page, "user [alice]: form please")
    form = page.locator(".gate.form form.schema-form")
    form.wait_for()
    # The schema's markup is shown as text, never run.
    assert (
        "<script>document.title='owned'</script>" in form.locator(".form-description").inner_text()
    )
    city = form.locator('.field[data-field="city"]')
    assert "<script>alert('city')</script> the city" in city.locator(".description").inner_text()
    assert page.locator("#gates script").count() == 0 and page.title() != "owned"
    # Required marks on city and zip only; a checkbox, a select, a JSON box.
    required = form.locator(".field:has(.required)")
    assert [required.nth(i).get_attribute("data-field") for i in range(required.count())] == [
        "city",
        "zip",
    ]
    assert form.locator('.field[data-field="express"] input[type=checkbox]').count() == 1
    assert form.locator('.field[data-field="size"] select option').all_inner_texts() == [
        "",
        "large",
        "small",
    ]
    assert form.locator('.field[data-field="tags"] textarea.json').count() == 1
    city.locator("input").fill("Oslo")
    form.locator('.field[data-field="zip"] input').fill("abc")
    form.locator('.field[data-field="express"] input').check()
    form.locator("button[type=submit]").click()
    refused = page.locator(".gate.form .outcome.problem")
    refused.wait_for()
    assert "$.zip" in refused.inner_text() and "stays open" in refused.inner_text()
    assert resolutions(shared, sid) == []
    # Still answerable: fix the field and send again (a new command, a new key).
    form.locator('.field[data-field="zip"] input').fill("150")
    form.locator("button[type=submit]").click()
    wait_text(page, "Done: shipped lamp to Oslo 150 (small express)")
    wait_text(page, "! answered by pat:")
    [resolved] = resolutions(shared, sid)
    assert resolved.principal == "pat"
    page.locator("#actions").wait_for(state="hidden")


def test_a_url_gate_shows_an_escaped_link_and_is_confirmed(page: Any, shared: Stack) -> None:
    sid = gates_session(shared, "url please", key="url")
    open_session(page, shared, sid)
    link = page.locator(".gate.url a.url")
    link.wait_for()
    assert link.get_attribute("href") == HOSTILE_URL
    assert link.inner_text() == HOSTILE_URL
    assert link.get_attribute("rel") == "noopener noreferrer"
    assert link.get_attribute("target") == "_blank"
    assert page.locator("#gates script").count() == 0 and page.title() != "owned"
    assert page.locator(".gate.url input").count() == 0
    page.locator(".gate.url button[type=submit]").click()
    wait_text(page, "Done: connected CRM (confirmed)")


def test_a_permission_gate_shows_the_classifiers_review(page: Any, shared: Stack) -> None:
    sid = gates_session(shared, "deploy now", key="review")
    open_session(page, shared, sid)
    review = page.locator('.gate.permission .reviews li[data-classifier="rules"]')
    review.wait_for()
    assert review.inner_text() == "classifier rules: ask: deploy to prod needs a person"
    wait_text(page, "~ classifier rules: ask deploy: deploy to prod needs a person")
    page.locator(".gate.permission button.deny").click()
    wait_text(page, "! denied by pat (once)")
    # The tree's gate node says who answered it.
    page.locator("button[data-tab=tree]").click()
    page.wait_for_function(
        "() => document.getElementById('tree-body').textContent.includes('denied by pat')",
        timeout=HANG,
    )
