"""``open_host_metrics`` on an application's own registry, in its own run;
an address ``--metrics`` cannot have stops the host before anything starts."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from journal import open_blocking
from journal.memory import MemoryJournal
from session import Client, Host, open_host_metrics
from session.cli.main import main
from session.hosting.metrics_endpoint import bind_metrics, metrics_address, serving_metrics
from tests.host.support import counting_definition, trio_clock_journal, wait_for
from tests.host.test_host_outages import Unreachable


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


async def test_an_application_registers_a_hosts_metrics_on_its_registry(
    autojump_clock: object,
) -> None:
    journal = MemoryJournal()
    registry = CollectorRegistry()
    definitions = {"counter": counting_definition()}
    async with (
        Host.open(journal, definitions, host_id="h", poll=0.5) as host,
        open_host_metrics(host, registry) as metrics,
    ):
        client = Client(journal)
        sid = await client.create("counter", key="c")
        await client.submit(sid, "count", key="k")
        await client.wait(sid, "k", timeout=60)
        await wait_for(lambda: metrics.tally.turns_ended["completed"] == 1)
        metrics.refresh()
        assert value(registry, "loopruntime_turns_started_total") == 1
        assert value(registry, "loopruntime_turns_ended_total", outcome="completed") == 1
        assert (
            value(registry, "loopruntime_tool_calls_total", tool="count", outcome="succeeded") == 1
        )
        assert value(registry, "loopruntime_host_ready") == 1
        assert value(registry, "loopruntime_host_sessions_loaded") == 1
        assert value(registry, "loopruntime_sessions", state="idle") == 1
        commits = value(registry, "loopruntime_commit_seconds_count")
        assert commits is not None and commits >= 2  # the create's and the turn's
        # A command the session refuses: counted by the error in its outcome.
        await client.submit(sid, "to a loop it lacks", key="k2", loop="nosuch")
        await wait_for(lambda: host.statistics().refused == {"UnknownLoopError": 1})
        metrics.refresh()
        family = "loopruntime_host_commands_refused_total"
        refused = value(registry, family, reason="UnknownLoopError")
        assert refused == 1
        # A session no host here serves: its entry waits, journal-wide.
        await client.create("nosuch", session_id="orphan", key="o")
        await metrics.read_journal()
        assert value(registry, "loopruntime_inbox_pending") == 1
        assert value(registry, "loopruntime_sessions_waiting_for_host") == 1
        age = value(registry, "loopruntime_inbox_oldest_age_seconds")
        assert age is not None and age >= 0
    # Unregistered with the block: the registry no longer holds them.
    assert value(registry, "loopruntime_host_ready") is None


def test_an_address_in_use_is_one_line_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        definitions = "tests.host.support:counting_definition"
        address = f"127.0.0.1:{port}"
        code = main(["host", "--journal", url, "--definitions", definitions, "--metrics", address])
    assert code == 2
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1 and f"--metrics 127.0.0.1:{port}: cannot listen" in said
    if (tmp_path / "journal.db").exists():
        blocking = open_blocking(url)
        try:
            assert blocking.hosts() == []
        finally:
            blocking.close()


async def fetch(port: int, path: str) -> tuple[int, str]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        answer = b""
        while chunk := await stream.receive_some():
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


async def test_readyz_says_not_ready_while_the_journal_is_out_of_reach(
    autojump_clock: object,
) -> None:
    journal = Unreachable(trio_clock_journal())
    listeners = await bind_metrics(("127.0.0.1", 0))
    assert listeners is not None
    port = listeners[0].socket.getsockname()[1]
    async with (
        Host.open(journal, {"counter": counting_definition()}, host_id="a", poll=0.5) as host,
        serving_metrics(host, listeners) as served,
    ):
        assert served == f"http://127.0.0.1:{port}/metrics"
        assert await fetch(port, "/readyz") == (200, "ready\n")
        journal.down = True
        await wait_for(lambda: not host.ready)
        assert await fetch(port, "/readyz") == (503, "not ready\n")
        assert await fetch(port, "/healthz") == (200, "ok\n")
        status, text = await fetch(port, "/metrics")
        ready = [s for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "loopruntime_host_ready"]  # fmt: skip
        assert status == 200 and [s.value for s in ready] == [0.0]
        journal.down = False
        await wait_for(lambda: host.ready)
        assert await fetch(port, "/readyz") == (200, "ready\n")


def test_metrics_without_the_extra_is_one_line_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if prometheus-client were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    journal = tmp_path / "journal.db"
    definitions = "tests.host.support:counting_definition"
    argv = ["host", "--journal", str(journal), "--definitions", definitions, "--metrics", "0"]
    assert main(argv) == 2
    [said] = capsys.readouterr().err.splitlines()
    assert said == (
        "loopruntime: --metrics needs prometheus-client: pip install 'loopruntime[metrics]'"
    )
    assert not journal.exists()


def test_a_bare_port_listens_on_loopback_only() -> None:
    assert metrics_address("9100") == ("127.0.0.1", 9100)
    assert metrics_address("0") == ("127.0.0.1", 0)
    assert metrics_address("0.0.0.0:9100") == ("0.0.0.0", 9100)
    assert metrics_address("[::1]:9100") == ("::1", 9100)
