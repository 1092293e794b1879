"""Property tests at the console's API (hypothesis): any request, from any
origin, with or without the token, to any path, with any body, gets its
outcome or a 4xx with a JSON reason; never a 5xx, a traceback, or a command
put before a refusal.

Each example runs the console and a host over a memory journal on trio's
clock, with one session waiting at a permission gate and one on a tool call
whose outcome is unknown."""

from __future__ import annotations

import json

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import Journal
from session.embedded.restore import read_states
from tests.console.support import BASE, TOKEN, running, wait_for
from tests.support.asgi import Answer, request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=5,
)
actions = st.sampled_from(
    ["allow_once", "allow_session", "deny", "answer", "confirm", "maybe", None]
)
keys = st.none() | st.sampled_from(["k1", "k2", "", "k" * 201]) | st.integers()
action_bodies = st.one_of(
    st.fixed_dictionaries(
        {"action": actions, "key": keys},
        optional={"text": json_values, "value": json_values, "data": json_values},
    ).map(lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries(
        {"result": st.none() | st.text(max_size=12), "key": keys},
        optional={"is_error": json_values},
    ).map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=30),
    json_values.map(lambda v: json.dumps(v).encode()),
)
ids = st.sampled_from(
    ["GATE", "EXEC", "BOOK", "CHARGE", "nope", "", "x" * 300, "é", "%"]
) | st.text(max_size=8)
seqs = st.sampled_from(["1", "0", "-1", "99999", "x", "", "1.5", "9" * 40]) | st.integers().map(str)
tokens = st.sampled_from(["good", "none", "wrong"])
origins = st.sampled_from([None, BASE, "http://evil.example"])

reads = st.one_of(
    st.tuples(st.just("/api/sessions"), st.sampled_from(["", "status=idle", "status=zzz"])),
    st.tuples(ids.map(lambda i: f"/api/sessions/{i}/tree"), st.just("")),
    st.tuples(ids.map(lambda i: f"/api/sessions/{i}/states"), seqs.map(lambda s: f"seq={s}")),
    st.tuples(
        st.tuples(ids, seqs).map(lambda t: f"/api/sessions/{t[0]}/records/{t[1]}"), st.just("")
    ),
    st.tuples(ids.map(lambda i: f"/api/sessions/{i}/events"), seqs.map(lambda s: f"after={s}")),
    st.tuples(ids.map(lambda i: f"/sessions/{i}"), st.just("")),
    st.tuples(st.just("/api/nowhere"), st.just("")),
).map(lambda r: ("GET", r[0], r[1], b""))
writes = st.one_of(
    st.tuples(
        st.tuples(ids, ids).map(lambda t: f"/api/sessions/{t[0]}/gates/{t[1]}"), action_bodies
    ),
    st.tuples(
        st.tuples(ids, ids).map(lambda t: f"/api/sessions/{t[0]}/effects/{t[1]}"), action_bodies
    ),
).map(lambda r: ("POST", r[0], "", r[1]))
console_requests = st.tuples(reads | writes, tokens, origins)


async def picture(journal: Journal) -> list[tuple[str, int, int]]:
    return sorted((i.session, i.head, i.pending) for i in await journal.sessions())


async def scenario(reqs: list[tuple[tuple[str, str, str, bytes], str, str | None]]) -> None:
    async with running(wait=1.0) as env:
        book = await env.session("book it", key="b")
        charge = await env.session("charge it", key="c")

        async def waiting() -> bool:
            b, c = await read_states(env.journal, book), await read_states(env.journal, charge)
            return any(s.open_gates for s in b.values()) and any(s.unknown for s in c.values())

        await wait_for(waiting)
        [gate] = [
            g.gate_id for s in (await read_states(env.journal, book)).values() for g in s.open_gates
        ]
        [execution] = [
            u for s in (await read_states(env.journal, charge)).values() for u in s.unknown
        ]
        names = {"BOOK": book, "CHARGE": charge, "GATE": gate, "EXEC": execution}
        for (method, path, query, body), token, origin in reqs:
            for name, value in names.items():
                path = path.replace(name, value)
            headers = [("content-type", "application/json")]
            if token != "none":
                headers.append(("x-console-token", TOKEN if token == "good" else "wrong"))
            if origin is not None:
                headers.append(("origin", origin))
            await trio.testing.wait_all_tasks_blocked()
            before = await picture(env.journal)
            answer = await request(env.app, method, path, headers=headers, body=body, query=query)
            check(method, path, answer)
            if answer.status >= 400:
                await trio.testing.wait_all_tasks_blocked()
                assert await picture(env.journal) == before, f"{method} {path} refused but wrote"
            if method == "POST" and (token != "good" or origin == "http://evil.example"):
                # Refused for who sent it (or no such route: nothing to write).
                assert answer.status in (401, 403, 404, 405), answer.text


def check(method: str, path: str, answer: Answer) -> None:
    assert answer.raised is None, f"{method} {path}: {answer.raised!r}"
    assert 200 <= answer.status < 500 or answer.status == 303, (
        method,
        path,
        answer.status,
        answer.text,
    )
    assert "Traceback" not in answer.text
    if answer.status >= 400:
        assert answer.headers["content-type"].startswith("application/json"), answer.text
        error = json.loads(answer.body)["error"]
        assert isinstance(error, str) and error
        assert "k" * 201 not in error  # a long key is never echoed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(console_requests, min_size=1, max_size=6))
def test_any_console_request_gets_its_outcome_or_a_named_refusal(
    reqs: list[tuple[tuple[str, str, str, bytes], str, str | None]],
) -> None:
    trio.run(scenario, reqs, clock=trio.testing.MockClock(autojump_threshold=0))
