"""What ``wait``'s timeout says, for each state the session's lease can be in:
no host took it, its host stopped renewing, its host holds it and is busy."""

from __future__ import annotations

import time

from journal import HostInfo, SessionInfo
from session import WaitTimeoutError
from session.clients.client import timeout_error


def info(owner: str | None, expires_in: float, definition: str | None = "reviewer") -> SessionInfo:
    now = time.time_ns()
    return SessionInfo(
        session="s1",
        head=3,
        incarnation=1,
        created_at=now,
        updated_at=now,
        owner=owner,
        expires_at=now + int(expires_in * 1e9) if owner else 0,
        pending=1,
        definition=definition,
    )


def test_no_host_took_the_session() -> None:
    error = timeout_error("s1", "k1", 2.0, [info(None, 0)])
    assert isinstance(error, WaitTimeoutError) and isinstance(error, TimeoutError)
    text = str(error)
    assert text.startswith("session s1: the command with key 'k1' was not applied within 2.0 s")
    assert "no host has taken the session" in text
    assert "definition 'reviewer'" in text and "loopruntime host --journal URL" in text


def test_a_live_host_serves_it_but_has_not_taken_it() -> None:
    """A host that runs the definition is live but full (or has not looked
    yet): the error names it rather than asking for a host that runs."""
    later = time.time_ns() + 30 * 10**9
    hosts = [
        HostInfo(host="h1", definitions=("reviewer",), expires_at=later, live=True),
        HostInfo(host="h2", definitions=("other",), expires_at=later, live=True),
        HostInfo(host="h3", definitions=("reviewer",), expires_at=0, live=False),
    ]
    error = timeout_error("s1", "k1", 2.0, [info(None, 0)], hosts)
    assert error.serving == ("h1",)
    text = str(error)
    assert "no host has taken the session yet, though h1 serves definition 'reviewer'" in text
    assert "loopruntime host --journal URL" not in text


def test_its_host_stopped_renewing() -> None:
    error = timeout_error("s1", "k1", 2.0, [info("h7", -5)])
    assert error.owner == "h7"
    assert "its host h7 stopped renewing its lease" in str(error)
    assert "a host offering definition 'reviewer' takes it over" in str(error)


def test_its_host_holds_it_and_is_busy() -> None:
    error = timeout_error("s1", "k1", 2.0, [info("h7", 30)])
    assert "its host h7 holds it but has not applied the command yet" in str(error)
    assert "no host" not in str(error)


def test_a_session_the_listing_lacks_is_reported_as_unowned() -> None:
    error = timeout_error("s1", "k1", 2.0, [])
    assert (error.owner, error.definition) == (None, None)
    assert "offering its definition" in str(error)
