"""Property tests at the web example's edge (examples/web_service): any
request, well-formed or not, gets its outcome or a 4xx with a JSON reason;
never a 5xx, a traceback, or a write before a refusal.

The service runs in the test's trio run over a fresh SQLite journal per
example (a host registered, none running: a command waits in the inbox,
which is an outcome too)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from examples.web_service.app import create_app
from journal import Journal, open_journal
from tests.support.asgi import Answer, request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
fields = st.sampled_from(["definition", "text", "session", "answer", "allow", "scope", "x"])
bodies = st.one_of(
    st.dictionaries(fields, json_values, max_size=4).map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
    st.just(b'{"text": "\\ud800"}'),
)
header_text = st.text(
    st.characters(min_codepoint=32, max_codepoint=126), max_size=12
) | st.sampled_from(["", "k", "x" * 129, "y" * 300])
ids = st.sampled_from(["KNOWN", "ses_missing", "", " ", "a/b", "é", "x" * 300]) | st.text(
    max_size=10
)
web_requests = st.one_of(
    st.tuples(st.just("POST"), st.just("/sessions"), bodies, st.none() | header_text),
    st.tuples(st.just("GET"), st.just("/sessions"), st.just(b""), st.none()),
    st.tuples(
        st.just("POST"),
        ids.map(lambda i: f"/sessions/{i}/messages"),
        bodies,
        st.none() | header_text,
    ),
    st.tuples(
        st.just("GET"),
        ids.map(lambda i: f"/sessions/{i}/events"),
        st.just(b""),
        st.none() | header_text,
    ),
    st.tuples(st.just("POST"), ids.map(lambda i: f"/gates/{i}"), bodies, st.none() | header_text),
)


async def serve_definitions(journal: Journal) -> None:
    """A live host registration serving the example's definitions, with no
    host behind it: the service makes sessions only some live host serves,
    and a command then waits in the inbox."""
    definitions = ["echo", "confirm", "operator"]
    await journal.register_host("web-test", "token", ttl=3600, definitions=definitions)


async def picture(journal: Journal) -> list[tuple[str, int, int]]:
    """What a refused request must not change: sessions, heads, waiting commands."""
    return sorted((i.session, i.head, i.pending) for i in await journal.sessions())


async def one(
    app: Any, journal: Journal, known: str, req: tuple[str, str, bytes, str | None]
) -> Answer:
    method, path, body, key = req
    path = path.replace("KNOWN", known)
    headers = [("content-type", "application/json")]
    if key is not None:
        # The key is also tried as the events stream's Last-Event-ID.
        headers.append(("last-event-id" if path.endswith("/events") else "idempotency-key", key))
    before = await picture(journal)
    answer = await request(app, method, path, headers=headers, body=body)
    assert answer.raised is None, f"{method} {path}: {answer.raised!r}"
    assert 200 <= answer.status < 500, (method, path, body, key, answer.status, answer.text)
    assert "Traceback" not in answer.text
    if answer.status >= 400:
        assert answer.headers["content-type"].startswith("application/json"), answer.text
        assert isinstance(json.loads(answer.body)["error"], str)
        assert await picture(journal) == before, f"{method} {path} was refused but wrote"
    if key is not None and len(key) > 40:
        assert key not in answer.text  # a long key is never echoed
    if path in ("/sessions/ses_missing/events", "/sessions/ses_missing/messages"):
        assert answer.status >= 400, answer.text
    if well_formed_message(path, known, body, key):
        assert answer.status == 202, answer.text
    return answer


def well_formed_message(path: str, known: str, body: bytes, key: str | None) -> bool:
    """A message any client may send: it must be taken."""
    if path != f"/sessions/{known}/messages" or key is None or not 0 < len(key) <= 128:
        return False
    try:
        text = json.loads(body).get("text")
        return isinstance(text, str) and bool(text) and text.encode() is not None
    except (ValueError, AttributeError, UnicodeEncodeError):
        return False


async def scenario(url: str, reqs: list[tuple[str, str, bytes, str | None]]) -> None:
    app = create_app(url)
    async with app.router.lifespan_context(app), open_journal(url) as journal:
        await serve_definitions(journal)
        made = await request(
            app, "POST", "/sessions", body=b'{"definition": "echo"}',
            headers=[("content-type", "application/json")],
        )  # fmt: skip
        assert made.status == 201, made.text
        known = json.loads(made.body)["session"]
        for req in reqs:
            await one(app, journal, known, req)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(web_requests, min_size=1, max_size=5))
def test_any_request_gets_its_outcome_or_a_named_refusal(
    reqs: list[tuple[str, str, bytes, str | None]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(scenario, f"sqlite:///{Path(tmp) / 'service.db'}", reqs)


async def refusals(url: str) -> None:
    app = create_app(url)
    async with app.router.lifespan_context(app), open_journal(url) as journal:
        await serve_definitions(journal)
        json_type = [("content-type", "application/json")]
        long_key = "k" * 300
        before = await picture(journal)
        for path in ("/sessions", "/sessions/ses_x/messages", "/gates/g1"):
            body = b'{"text": "hi", "session": "ses_x", "answer": "yes"}'
            answer = await request(
                app, "POST", path, body=body, headers=[*json_type, ("idempotency-key", long_key)]
            )
            assert answer.status == 400, answer.text
            assert "1 to 128 characters, not 300" in answer.text and long_key not in answer.text
        assert await picture(journal) == before
        nowhere = await request(app, "GET", "/sessions/nope/events")
        assert nowhere.status == 404 and "no session nope" in json.loads(nowhere.body)["error"]
        route = await request(app, "GET", "/nowhere")
        assert route.status == 404 and json.loads(route.body)["error"]


def test_a_long_key_an_unknown_session_and_a_wrong_route_are_clear_refusals(
    tmp_path: Path,
) -> None:
    trio.run(refusals, f"sqlite:///{tmp_path / 'service.db'}")
