"""Every argument is checked before the first write: a bad
number or choice given to a command or a client method is a named error
(exit 2 with one line, or an exception), and the journal -- its sessions,
heads and waiting inbox entries -- is what it was before."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from journal import InboxKeyError, open_blocking
from loopruntime import InvalidAnswerError
from session import (
    Client,
    EmptyInputError,
    InvalidContentError,
    SessionExistsError,
    SyncClient,
    open_client,
)
from session.cli.main import main


def snapshot(url: str) -> list[tuple[str, int, int, str | None]]:
    """What a write would change: every session, its head and its waiting entries."""
    blocking = open_blocking(url)
    try:
        return [(i.session, i.head, i.pending, i.definition) for i in blocking.sessions()]
    finally:
        blocking.close()


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A SQLite journal holding ``s1`` (definition ``counter``), created through the inbox."""
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    with SyncClient.open(url) as client:
        client.create("counter", session_id="s1", key="c1")
    yield url


def run(url: str, *argv: str) -> int:
    try:
        return main([*argv, "--journal", url])
    except SystemExit as exit:  # argparse's refusal
        return int(exit.code or 0)


HOST = ("host", "--definitions", "tests.host.support:counting_definition")

BAD_COMMANDS = [
    # The case: the message was written, then --wait refused.
    ("submit", "s2", "hi", "--key", "k", "--create", "counter", "--wait", "-5"),
    ("submit", "s1", "hi", "--key", "k", "--wait", "-5"),
    ("submit", "s1", "hi", "--key", "k", "--wait", "nan"),
    ("submit", "s1", "hi", "--key", "k", "--wait", "soon"),
    # The input is checked before --create writes the session.
    ("submit", "s2", "", "--key", "k", "--create", "counter"),
    ("submit", "s2", "   ", "--key", "k", "--create", "counter"),
    ("submit", "s2", "hi", "--key", "", "--create", "counter"),
    ("submit", "s2", "hi", "--key", "k" * 201, "--create", "counter"),
    ("submit", "s2", "hi", "--key", "k", "--create", "counter", "--principal", "p" * 201),
    ("submit", "s2", "hi", "--key", "k", "--create", ""),
    ("submit", "s1", "hi", "--key", "k", "--create", "asker"),  # s1 runs 'counter'
    ("submit", "nosuch", "hi", "--key", "k"),
    ("answer", "s1", "gate_1", "yes", "--key", "k", "--wait", "-1"),
    ("decide", "s1", "gate_1", "maybe", "--key", "k"),
    ("decide", "s1", "gate_1", "allow", "--scope", "forever", "--key", "k"),
    ("decide", "s1", "gate_1", "allow", "--key", "k", "--wait", "-inf"),
    ("resolve", "s1", "exe_1", "--result", "done", "--key", "k", "--wait", "-2"),
    ("host", "--definitions", "tests.host.support:counting_definition", "--lease-ttl", "0"),
    ("host", "--definitions", "tests.host.support:counting_definition", "--lease-ttl", "-1"),
    ("host", "--definitions", "tests.host.support:counting_definition", "--idle-after", "nan"),
    ("host", "--definitions", "tests.host.support:counting_definition", "--poll", "inf"),
    ("host", "--definitions", "tests.host.support:counting_definition", "--max-sessions", "0"),
    ("host", "--definitions", "tests.host.support:counting_definition", "--max-sessions", "2.5"),
    (*HOST, "--requests-per-minute", "0"),
    (*HOST, "--requests-per-minute", "-3"),
    (*HOST, "--tokens-per-minute", "1e4"),
    (*HOST, "--tokens-per-minute", "many"),
    (*HOST, "--metrics", "70000"),
    (*HOST, "--metrics", "-1"),
    (*HOST, "--metrics", "localhost:"),
    (*HOST, "--metrics", ":9100"),
    (*HOST, "--metrics", "localhost:http"),
    ("fork", "s1", "--at", "many"),
    ("fork", "s1", "--at", "-1"),
    ("fork", "s1", "--at", "5"),
]


@pytest.mark.parametrize("argv", BAD_COMMANDS, ids=" ".join)
def test_a_bad_argument_exits_2_and_writes_nothing(
    url: str, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(url)
    assert run(url, *argv) == 2
    said = capsys.readouterr().err
    assert len(said.strip().splitlines()) == 1 and "Traceback" not in said
    assert snapshot(url) == before


def test_a_good_submit_with_create_still_writes_both(url: str) -> None:
    before = snapshot(url)
    assert run(url, "submit", "s2", "hi", "--key", "k", "--create", "counter", "--wait", "0") == 2
    # No host: the wait of 0 s times out, after both entries were written.
    assert snapshot(url) == [*before, ("s2", 0, 2, "counter")]


# -- the clients' methods ------------------------------------------------------------------

Call = Callable[[Any], Any]

BAD_CALLS: list[tuple[str, Call, type[Exception]]] = [
    ("wait timeout=-1", lambda c: c.wait("s1", "c1", timeout=-1), ValueError),
    ("wait timeout=nan", lambda c: c.wait("s1", "c1", timeout=math.nan), ValueError),
    ("wait timeout='5'", lambda c: c.wait("s1", "c1", timeout="5"), ValueError),
    ("wait timeout=True", lambda c: c.wait("s1", "c1", timeout=True), ValueError),
    ("subscribe timeout=-1", lambda c: c.subscribe("s1", timeout=-1), ValueError),
    ("subscribe after=-1", lambda c: c.subscribe("s1", -1), ValueError),
    ("subscribe after='3'", lambda c: c.subscribe("s1", "3"), ValueError),
    ("create definition=''", lambda c: c.create("", key="k"), ValueError),
    ("create definition=5", lambda c: c.create(5, key="k"), ValueError),
    ("create session_id=''", lambda c: c.create("counter", session_id="", key="k"), ValueError),
    ("create other definition", lambda c: c.create("asker", session_id="s1", key="k"),
     SessionExistsError),
    ("create key=''", lambda c: c.create("counter", session_id="s2", key=""), ValueError),
    ("submit ''", lambda c: c.submit("s1", "", key="k"), EmptyInputError),
    ("submit 5", lambda c: c.submit("s1", 5, key="k"), InvalidContentError),
    ("submit session ''", lambda c: c.submit("", "hi", key="k"), ValueError),
    ("submit key None", lambda c: c.submit("s1", "hi", key=None), ValueError),
    ("submit key 201", lambda c: c.submit("s1", "hi", key="k" * 201), ValueError),
    ("submit principal 201", lambda c: c.submit("s1", "hi", key="k", principal="p" * 201),
     ValueError),
    ("submit under a used key", lambda c: c.submit("s1", "hi", key="c1"), InboxKeyError),
    ("steer ' '", lambda c: c.steer("s1", " ", key="k"), EmptyInputError),
    ("decide allow='yes'", lambda c: c.decide("s1", "g", "yes", key="k"), InvalidAnswerError),
    ("decide scope", lambda c: c.decide("s1", "g", True, "forever", key="k"), InvalidAnswerError),
    ("resolve is_error='no'", lambda c: c.resolve("s1", "e", "r", "no", key="k"),
     InvalidContentError),
]  # fmt: skip


SYNC_ONLY: list[tuple[str, Call, type[Exception]]] = [
    # A thread cannot be cancelled by its caller: it waits without a bound only
    # when told math.inf.
    ("wait timeout=None", lambda c: c.wait("s1", "c1", timeout=None), ValueError),
]
SYNC_CALLS = BAD_CALLS + SYNC_ONLY


@pytest.mark.parametrize(("name", "call", "error"), SYNC_CALLS, ids=[n for n, _, _ in SYNC_CALLS])
def test_a_sync_client_refuses_a_bad_argument_before_writing(
    url: str, name: str, call: Call, error: type[Exception]
) -> None:
    before = snapshot(url)
    with SyncClient.open(url) as client, pytest.raises(error):
        call(client)
    assert snapshot(url) == before


@pytest.mark.parametrize(("name", "call", "error"), BAD_CALLS, ids=[n for n, _, _ in BAD_CALLS])
def test_an_async_client_refuses_a_bad_argument_before_writing(
    url: str, name: str, call: Call, error: type[Exception]
) -> None:
    async def main() -> None:
        async with open_client(url) as client:
            with pytest.raises(error):
                result = call(client)
                if not hasattr(result, "__aiter__"):
                    await result

    before = snapshot(url)
    anyio.run(main, backend="asyncio")
    assert snapshot(url) == before


@pytest.mark.parametrize("poll", [0, -1, math.nan, math.inf, "fast"])
def test_a_bad_poll_is_refused_when_the_client_is_made(url: str, poll: Any) -> None:
    with pytest.raises(ValueError, match="poll"):
        SyncClient.open(url, poll=poll)
    with pytest.raises(ValueError, match="poll"):
        open_client(url, poll=poll)
    with pytest.raises(ValueError, match="poll"):
        Client(url=url, poll=poll)
