"""``open_host_metrics`` on an application's own registry, in its own run;
an address ``--metrics`` cannot have stops the host before anything starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from journal import open_blocking
from journal.memory import MemoryJournal
from session import Client, Host, open_host_metrics
from session.cli import main
from tests.host.support import counting_definition, wait_for


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
