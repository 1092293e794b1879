"""Property tests over the client's methods: any arguments end in the stored
entry or a named error (``ClientError``, the journal's, the loop's or a
``ValueError``) raised before anything is written.  ``SyncClient`` runs
these same methods (``test_twins`` pins that it is the same API)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import JournalError, open_journal
from journal.content import Message, Text
from journal.inbox import InboxEntry
from loopruntime import LoopError
from session import Client, ClientError

_TEXT = st.text(max_size=12)
_ANY: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=True),
    _TEXT,
    st.sampled_from(["", " ", "\udcff", "x" * 201]),
    st.lists(_TEXT | st.builds(Text, text=_TEXT), max_size=2),
    st.builds(
        Message, role=st.just("user"), blocks=st.lists(st.builds(Text, text=_TEXT)).map(tuple)
    ),
)
"""Anything a caller might pass by mistake."""

GOOD: dict[str, Any] = {
    "session_id": "s1",
    "content": "hello",
    "text": "hello",
    "gate_id": "gate_1",
    "allow": True,
    "scope": "once",
    "execution_id": "exe_1",
    "result": "done",
    "is_error": False,
    "input_id": "in_1",
    "mode": None,
    "loop": None,
    "principal": None,
    "definition_name": "counter",
}

METHODS = {
    "create": ["definition_name", "session_id", "principal"],
    "submit": ["session_id", "content", "loop", "principal"],
    "steer": ["session_id", "text", "loop", "principal"],
    "answer": ["session_id", "gate_id", "text", "principal"],
    "decide": ["session_id", "gate_id", "allow", "scope", "principal"],
    "resolve": ["session_id", "execution_id", "result", "is_error", "principal"],
    "interrupt": ["session_id", "loop", "principal"],
    "pause": ["session_id", "loop", "principal"],
    "resume": ["session_id", "loop", "principal"],
    "cancel_queued": ["session_id", "input_id", "loop", "principal"],
    "compact": ["session_id", "loop", "principal"],
    "change_mode": ["session_id", "mode", "loop", "principal"],
}

REFUSALS = (ClientError, JournalError, LoopError, ValueError, TypeError)
"""TypeError: a value of the wrong type, named by the check that refused it."""


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_any_call_stores_its_command_or_is_refused_writing_nothing(
    data: st.DataObject,
) -> None:
    name = data.draw(st.sampled_from(sorted(METHODS)), label="method")
    wild = data.draw(st.sampled_from(["", *METHODS[name], "key"]), label="wild argument")
    arguments = {
        field: data.draw(_ANY, label=field) if field == wild else GOOD[field]
        for field in METHODS[name]
    }
    key = data.draw(_ANY, label="key") if wild == "key" else "k1"
    async with open_journal("memory:") as journal:
        client = Client(journal)
        await client.create("counter", session_id="s1", key="c1")
        before = await journal.inbox("s1")
        try:
            result = await getattr(client, name)(key=key, **arguments)
        except REFUSALS as exc:
            assert str(exc)
            assert await journal.inbox("s1") == before
            return
        if isinstance(result, InboxEntry):
            assert (result.key, result.number) == (key, 2)
        else:
            assert name == "create" and isinstance(result, str)


def test_every_command_method_is_drawn() -> None:
    assert set(METHODS) == {
        n
        for n in dir(Client)
        if not n.startswith("_")
        and n not in {"open", "aclose", "wait", "subscribe", "sessions", "hosts", "url"}
    }


@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_good_arguments_fit_each_method(name: str) -> None:
    import inspect

    parameters = inspect.signature(getattr(Client, name)).parameters
    assert set(METHODS[name]) | {"self", "key"} == set(parameters)
