"""The example web service (examples/web_service) as real processes: uvicorn
on loopback beside a ``loopruntime host``, driven with httpx.  A retried
message is one input, the reply arrives as Server-Sent Events, a gate is
answered over HTTP, and a host SIGKILLed while its turn waits at a gate is
replaced by another host while the same event stream goes on.

Real time (other processes); every wait is for an event on the stream or a
state of the service, bounded by a hang guard that is no statement of speed."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.web_service.app import MAX_BODY_BYTES
from journal import open_blocking
from journal.inbox import MAX_ENTRY_BYTES
from tests.clients.support import HANG_GUARD, host_process, start_host, stop
from tests.support.processes import ROOT

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The service's base URL and its journal URL, uvicorn running on loopback."""
    journal = f"sqlite:///{tmp_path / 'service.db'}"
    port = free_port()
    with (tmp_path / "uvicorn.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", "examples.web_service.app:app",
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                # Event streams never end by themselves: give them a moment, then close.
                "--timeout-graceful-shutdown", "1",
            ],
            cwd=ROOT, env={**os.environ, "LOOPRUNTIME_JOURNAL": journal}, stderr=log,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=HANG_GUARD) as http:
            for _ in range(int(HANG_GUARD * 20)):  # until it answers (hang guard)
                try:
                    if http.get("/sessions").status_code == 200:
                        break
                except httpx.TransportError:
                    assert proc.poll() is None, (tmp_path / "uvicorn.log").read_text()
                    threading.Event().wait(0.05)
        yield base, journal
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class EventStream:
    """``GET /sessions/{id}/events`` read by a thread into a queue, one connection."""

    def __init__(self, base: str, session_id: str, last_event_id: int | None = None) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._http = httpx.Client(base_url=base, timeout=httpx.Timeout(HANG_GUARD))
        headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
        self._thread = threading.Thread(target=self._read, args=(session_id, headers), daemon=True)
        self._thread.start()

    def _read(self, session_id: str, headers: dict[str, str]) -> None:
        try:
            with self._http.stream(
                "GET", f"/sessions/{session_id}/events", headers=headers
            ) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                event: dict[str, Any] = {}
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        event["id"] = int(line[4:])
                    elif line.startswith("event: "):
                        event["type"] = line[7:]
                    elif line.startswith("data: "):
                        event["data"] = json.loads(line[6:])
                    elif line == "" and event:
                        self.events.put(event)
                        event = {}
        except httpx.HTTPError:
            pass  # the service stopped: the test is over

    def until(self, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            event = self.events.get(timeout=HANG_GUARD)  # a hang guard
            self.seen.append(event)
            if done(event):
                return event

    def close(self) -> None:
        self._http.close()


def is_type(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event.get("type") == name


def turn_ended(n: int) -> Callable[[dict[str, Any]], bool]:
    return lambda e: e.get("type") == "turn.ended" and e["data"]["event"]["turn"] == n


def reply_of(events: list[dict[str, Any]]) -> list[str]:
    return [
        block["text"]
        for e in events
        if e.get("type") == "model.message_committed"
        for block in e["data"]["event"]["message"]["blocks"]
        if block["type"] == "text"
    ]


def test_the_web_service_end_to_end_across_a_killed_host(
    service: tuple[str, str], tmp_path: Path
) -> None:
    base, journal = service
    host_log = tmp_path / "hosts.log"
    http = httpx.Client(base_url=base, timeout=HANG_GUARD)
    host_a = start_host(journal, "a", host_log, lease_ttl=1.0)
    try:
        made = http.post(
            "/sessions", json={"definition": "confirm"}, headers={"Idempotency-Key": "new-1"}
        )
        assert made.status_code == 201, made.text
        sid = made.json()["session"]
        again = http.post(
            "/sessions", json={"definition": "confirm"}, headers={"Idempotency-Key": "new-1"}
        )
        assert again.json()["session"] == sid
        # The same message twice under one Idempotency-Key: one inbox entry.
        sent = [
            http.post(f"/sessions/{sid}/messages", json={"text": "send the report"},
                      headers={"Idempotency-Key": "msg-1"})
            for _ in range(2)
        ]  # fmt: skip
        assert [r.status_code for r in sent] == [202, 202]
        assert sent[0].json()["entry"] == sent[1].json()["entry"]
        stream = EventStream(base, sid)
        gate = stream.until(is_type("gate.opened"))["data"]["event"]
        assert gate["prompt"] == "Shall I send the report?"
        answered = http.post(f"/gates/{gate['gate_id']}", json={"session": sid, "answer": "yes"})
        assert answered.status_code == 202, answered.text
        stream.until(turn_ended(1))
        assert reply_of(stream.seen) == ["Done. The person said: yes"]

        # A second turn waits at its gate; its host is SIGKILLed there.
        http.post(f"/sessions/{sid}/messages", json={"text": "close the ticket"},
                  headers={"Idempotency-Key": "msg-2"})  # fmt: skip
        gate = stream.until(is_type("gate.opened"))["data"]["event"]
        os.kill(host_a.pid, signal.SIGKILL)
        host_a.wait()
        with host_process(journal, "b", host_log, lease_ttl=1.0):
            # Sent while no host owns the session: it waits in the inbox for b.
            answered = http.post(
                f"/gates/{gate['gate_id']}", json={"session": sid, "answer": "go ahead"}
            )
            assert answered.status_code == 202
            stream.until(turn_ended(2))
            assert reply_of(stream.seen)[-1] == "Done. The person said: go ahead"
            owner = {s["session"]: s["owner"] for s in http.get("/sessions").json()}[sid]
            assert owner == "b"
        # One connection saw every record once, in order, across both hosts.
        seqs = [e["id"] for e in stream.seen]
        assert seqs == list(range(1, len(seqs) + 1))
        inputs = [e for e in stream.seen if e["type"] == "input.queued"]
        assert len(inputs) == 2
        stream.close()
        # A reconnecting browser resumes after the last seq it saw.
        resumed = EventStream(base, sid, last_event_id=seqs[-3])
        assert resumed.until(lambda e: True)["id"] == seqs[-2]
        resumed.close()
    finally:
        stop(host_a)
        http.close()


def test_a_permission_is_decided_over_http(service: tuple[str, str], tmp_path: Path) -> None:
    base, journal = service
    with (
        host_process(journal, "a", tmp_path / "host.log"),
        httpx.Client(base_url=base, timeout=HANG_GUARD) as http,
    ):
        sid = http.post("/sessions", json={"definition": "operator"}).json()["session"]
        http.post(f"/sessions/{sid}/messages", json={"text": "billing"},
                  headers={"Idempotency-Key": "m1"})  # fmt: skip
        stream = EventStream(base, sid)
        gate = stream.until(is_type("gate.opened"))["data"]["event"]
        assert (gate["kind"], gate["tool_name"]) == ("permission", "restart")
        decided = http.post(f"/gates/{gate['gate_id']}", json={"session": sid, "allow": True})
        assert decided.status_code == 202, decided.text
        stream.until(turn_ended(1))
        assert reply_of(stream.seen)[-1] == "Result: billing restarted"
        resolved = [e for e in stream.seen if e["type"] == "gate.resolved"]
        assert [e["data"]["event"]["allow"] for e in resolved] == [True]
        stream.close()


def test_the_web_service_refuses_bad_requests(service: tuple[str, str], tmp_path: Path) -> None:
    base, journal = service
    with (
        host_process(journal, "a", tmp_path / "host.log"),
        httpx.Client(base_url=base, timeout=HANG_GUARD) as http,
    ):
        sid = http.post("/sessions", json={"definition": "echo"}).json()["session"]
        no_key = http.post(f"/sessions/{sid}/messages", json={"text": "hi"})
        assert no_key.status_code == 400 and "Idempotency-Key" in no_key.json()["error"]
        missing = http.post(
            "/sessions/ses_missing/messages", json={"text": "hi"}, headers={"Idempotency-Key": "k"}
        )
        assert missing.status_code == 404 and "ses_missing" in missing.json()["error"]
        first = http.post(
            f"/sessions/{sid}/messages", json={"text": "hi"}, headers={"Idempotency-Key": "k"}
        )
        other = http.post(
            f"/sessions/{sid}/messages", json={"text": "bye"}, headers={"Idempotency-Key": "k"}
        )
        assert (first.status_code, other.status_code) == (202, 409)
        assert http.post("/gates/g1", content=b"not json").status_code == 400
        # An answer may be data (a form's), but a decision's scope is one of two words.
        scope = http.post("/gates/g1", json={"session": sid, "allow": True, "scope": "always"})
        assert scope.status_code == 422 and "'once' or 'session'" in scope.json()["error"]
        # A lone surrogate, escaped in the JSON: text the journal could not store.
        surrogate = http.post(
            f"/sessions/{sid}/messages",
            content=b'{"text": "\\ud800"}',
            headers={"Idempotency-Key": "u", "Content-Type": "application/json"},
        )
        assert surrogate.status_code == 422, surrogate.text
        blank = http.post(
            f"/sessions/{sid}/messages", json={"text": "  "}, headers={"Idempotency-Key": "b"}
        )
        assert blank.status_code == 422 and "the input is empty" in blank.json()["error"]
        # A creation key names one session: another definition under it is a conflict.
        made = http.post("/sessions", json={"definition": "echo"}, headers={"Idempotency-Key": "c"})
        clash = http.post(
            "/sessions", json={"definition": "confirm"}, headers={"Idempotency-Key": "c"}
        )
        assert (made.status_code, clash.status_code) == (201, 409)
        assert "'echo', not 'confirm'" in clash.json()["error"]
        resume = http.get(f"/sessions/{sid}/events", headers={"Last-Event-ID": "x"})
        assert resume.status_code == 400
        # A stream of a session that does not exist is no stream.
        nowhere = http.get("/sessions/ses_missing/events")
        assert nowhere.status_code == 404 and "ses_missing" in nowhere.json()["error"]


def test_the_web_service_says_what_no_host_serves_and_why_a_command_was_refused(
    service: tuple[str, str], tmp_path: Path
) -> None:
    base, journal = service
    with httpx.Client(base_url=base, timeout=HANG_GUARD) as http:
        # No host at all: a session would only wait, so none is made.
        alone = http.post("/sessions", json={"definition": "echo"})
        assert alone.status_code == 422
        assert "no live host serves definition 'echo'" in alone.json()["error"]
        assert http.get("/sessions").json() == []
        with host_process(journal, "a", tmp_path / "host.log"):
            nosuch = http.post("/sessions", json={"definition": "nosuch"})
            assert nosuch.status_code == 422
            assert "no live host serves definition 'nosuch'" in nosuch.json()["error"]
            sid = http.post("/sessions", json={"definition": "echo"}).json()["session"]
            sent = http.post(
                f"/sessions/{sid}/messages", json={"text": "hi"}, headers={"Idempotency-Key": "m/1"}
            )
            applied = http.get(sent.json()["outcome"]).json()
            assert applied["state"] == "applied" and applied["value"].startswith("in_")
            # A gate the session never opened: the host refuses it once, with the reason.
            http.post("/gates/nope", json={"session": sid, "answer": "yes"})
            refused = http.get(f"/sessions/{sid}/commands/gate/nope").json()
            assert refused["state"] == "refused" and refused["error"] == "GateMismatchError"
            assert "nope" in refused["reason"]
            unknown = http.get(f"/sessions/{sid}/commands/never-sent")
            assert unknown.status_code == 404
            bad_wait = http.get(f"/sessions/{sid}/commands/m/1", params={"wait": "0"})
            assert bad_wait.status_code == 400
        assert [s["session"] for s in http.get("/sessions").json()] == [sid]


def test_a_message_over_the_inbox_limit_is_answered_413_and_nothing_is_written(
    service: tuple[str, str], tmp_path: Path
) -> None:
    base, journal = service
    with (
        httpx.Client(base_url=base, timeout=HANG_GUARD) as http,
        host_process(journal, "a", tmp_path / "host.log"),
    ):
        sid = http.post("/sessions", json={"definition": "echo"}).json()["session"]
        blocking = open_blocking(journal)
        try:
            # The host applies the session's Create; after that nothing waits.
            deadline = time.monotonic() + HANG_GUARD
            while [i.pending for i in blocking.sessions() if i.session == sid] != [0]:
                assert time.monotonic() < deadline, "the host never applied the Create"
                time.sleep(0.05)
            [created] = [i for i in blocking.sessions() if i.session == sid]
            # The JSON body fits the service's body limit; the command it makes
            # is a few bytes over what the inbox takes in one entry.
            text = "x" * MAX_ENTRY_BYTES
            over = http.post(
                f"/sessions/{sid}/messages", json={"text": text}, headers={"Idempotency-Key": "big"}
            )
            assert over.status_code == 413, over.text
            refused = over.json()
            assert refused["limit"] == MAX_ENTRY_BYTES and refused["size"] > MAX_ENTRY_BYTES
            assert f"{MAX_ENTRY_BYTES:,} bytes" in refused["error"]
            # A body past the service's own limit is refused before it is read.
            huge = http.post(
                f"/sessions/{sid}/messages",
                content=b'{"text": "' + b"y" * MAX_BODY_BYTES + b'"}',
                headers={"Idempotency-Key": "huge", "Content-Type": "application/json"},
            )
            assert huge.status_code == 413 and huge.json()["limit"] == MAX_BODY_BYTES
            assert blocking.entry(sid, "big") is None and blocking.entry(sid, "huge") is None
            [after] = [i for i in blocking.sessions() if i.session == sid]
            assert after.pending == created.pending == 0
            fits = http.post(
                f"/sessions/{sid}/messages", json={"text": "hi"}, headers={"Idempotency-Key": "ok"}
            )
            assert fits.status_code == 202
        finally:
            blocking.close()
