"""``loopruntime host --metrics``: a real host process scraped over HTTP, its
output parsed by ``prometheus_client``'s own parser; its health checks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

from journal import Journal, open_journal
from journal.events import TurnEnded
from session import Client
from tests.host.support import wait_for
from tests.support.loops import events_of
from tests.support.processes import ROOT


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "session.cli.main", *args]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_a_host_process_serves_its_metrics_and_health(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    base = f"http://127.0.0.1:{free_port()}"
    host = await trio.lowlevel.open_process(
        cli(
            "host", "--journal", url, "--definitions",
            "tests.support.crash_hosts:cli_definitions",
            "--host-id", "h1", "--poll", "0.05", "--metrics", base.rpartition("/")[2],
        ),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_for(lambda: trio.to_thread.run_sync(lambda: get(f"{base}/readyz")[0] == 200))
        assert await trio.to_thread.run_sync(get, f"{base}/healthz") == (200, "ok\n")
        sent = await trio.run_process(
            cli("submit", "s1", "fetch it", "--key", "k1", "--create", "fetcher", "--wait",
                "--journal", url),
            cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr.decode()
        async with open_journal(url) as journal:
            await wait_for(lambda: ended(journal))
            # A command the host will never apply: consumed once, refused.
            await Client(journal).submit("s1", "to a loop it lacks", key="k2", loop="nosuch")
            await wait_for(lambda: consumed(journal, "k2"))

        async def counted() -> bool:
            status, text = await trio.to_thread.run_sync(get, f"{base}/metrics")
            return status == 200 and (
                "loopruntime_turns_ended_total",
                (("outcome", "completed"),),
            ) in samples(text)

        await wait_for(counted)
        _, text = await trio.to_thread.run_sync(get, f"{base}/metrics")
        found = samples(text)
        assert found[("loopruntime_host_ready", ())] == 1.0
        assert found[("loopruntime_host_claims_total", ())] >= 1
        assert found[("loopruntime_host_commands_applied_total", ())] >= 2  # create, submit
        assert found[("loopruntime_turns_started_total", ())] == 1
        assert found[("loopruntime_inbox_pending", ())] == 0  # both entries applied
        assert found[("loopruntime_turns_ended_total", (("outcome", "completed"),))] == 1
        calls = {k: v for k, v in found.items() if k[0] == "loopruntime_model_calls_total"}
        assert sum(calls.values()) >= 2  # the call asking for the tool, and the answer
        timed = [v for k, v in found.items() if k[0] == "loopruntime_model_call_seconds_count"]
        assert sum(timed) == sum(calls.values())
        tools = {k: v for k, v in found.items() if k[0] == "loopruntime_tool_calls_total"}
        assert tools == {
            ("loopruntime_tool_calls_total", (("outcome", "succeeded"), ("tool", "fetch"))): 1.0
        }
        assert found[("loopruntime_tool_duration_seconds_count", (("tool", "fetch"),))] == 1
        refused = {k: v for k, v in found.items() if k[0].startswith("loopruntime_host_commands_r")}
        assert refused == {
            ("loopruntime_host_commands_refused_total", (("reason", "UnknownLoopError"),)): 1.0
        }
        # The create's, the turn's and the refusal's commits, each timed once.
        commits = found[("loopruntime_commit_seconds_count", ())]
        assert commits >= 3
        assert found[("loopruntime_commit_seconds_bucket", (("le", "+Inf"),))] == commits
        assert found[("loopruntime_commit_seconds_sum", ())] > 0
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert all(f.documentation for f in families.values())
        assert families["loopruntime_tool_duration_seconds"].type == "histogram"
        assert families["loopruntime_commit_seconds"].type == "histogram"
        assert await trio.to_thread.run_sync(get, f"{base}/nothing") == (
            404,
            "/metrics, /healthz or /readyz\n",
        )
    finally:
        os.kill(host.pid, signal.SIGTERM)
        await host.wait()
    assert host.returncode == 0


async def ended(journal: object) -> bool:
    return bool(await events_of(journal, "s1", TurnEnded))  # type: ignore[arg-type]


async def consumed(journal: Journal, key: str) -> bool:
    entry = await journal.entry("s1", key)
    return entry is not None and entry.consumed
