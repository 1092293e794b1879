"""Every metric family a host serves has a help text and a row in
docs/host.md, and every row names a family served; the shared limiter's
waits and slowdowns are counted in them."""

from __future__ import annotations

import re
from pathlib import Path

import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from journal.memory import MemoryJournal
from loopruntime import LoopDefinition
from loopruntime.models import RateLimit, limiters
from loopruntime.models.anthropic import AnthropicModel
from loopruntime.models.limiter import limiter_for
from session import Client, Host, open_host_metrics
from tests.host.support import counting_definition, trio_clock_journal, wait_for
from tests.metrics.test_embedded_metrics import value
from tests.models import test_anthropic as claude
from tests.support.sse_server import open_sse_server

HOST_DOC = Path(__file__).resolve().parents[2] / "docs" / "host.md"

# What an operator watches a host by: a session's state at rest and in a
# host, its leases and takeovers, the inbox, commits, turns, model calls,
# tokens, tools, and the shared limiter.
OPERATED = {
    "loopruntime_sessions",
    "loopruntime_sessions_passivated",
    "loopruntime_sessions_waiting_for_host",
    "loopruntime_gates_open",
    "loopruntime_inbox_pending",
    "loopruntime_inbox_oldest_age_seconds",
    "loopruntime_host_commands_applied",
    "loopruntime_host_commands_refused",
    "loopruntime_commit_seconds",
    "loopruntime_turns_started",
    "loopruntime_turns_ended",
    "loopruntime_model_calls",
    "loopruntime_model_first_output_seconds",
    "loopruntime_model_call_seconds",
    "loopruntime_model_tokens",
    "loopruntime_tool_calls",
    "loopruntime_tool_duration_seconds",
    "loopruntime_host_sessions_loaded",
    "loopruntime_host_failovers",
    "loopruntime_host_fenced",
    "loopruntime_rate_limit_waited",
    "loopruntime_rate_limit_wait_seconds",
    "loopruntime_rate_limit_waiting",
}


def documented() -> set[str]:
    """The family names in the first column of docs/host.md's metrics table
    (a counter's without the ``_total`` Prometheus adds)."""
    rows = re.findall(r"^\| `(loopruntime_\w+)` \|", HOST_DOC.read_text(), re.MULTILINE)
    return {name.removesuffix("_total") for name in rows}


async def test_every_family_served_has_help_and_is_documented(autojump_clock: object) -> None:
    registry = CollectorRegistry()
    async with (
        Host.open(MemoryJournal(), {"counter": counting_definition()}, host_id="h") as host,
        open_host_metrics(host, registry),
    ):
        limiter_for("anthropic", "claude-test", RateLimit(requests_per_minute=5))
        served = {
            family.name: family
            for family in text_string_to_metric_families(generate_latest(registry).decode())
        }
    assert all(family.documentation for family in served.values())
    assert set(served) == documented()
    assert OPERATED <= set(served)


async def test_sessions_at_rest_are_counted_journal_wide(autojump_clock: object) -> None:
    journal = MemoryJournal()
    registry = CollectorRegistry()
    async with (
        Host.open(journal, {"counter": counting_definition()}, host_id="h", poll=0.5,
                  idle_after=1.0) as host,
        open_host_metrics(host, registry) as metrics,
    ):  # fmt: skip
        client = Client(journal)
        sid = await client.create("counter", key="c")
        await client.submit(sid, "count", key="k")
        await client.wait(sid, "k", timeout=60)
        await metrics.read_journal()
        assert value(registry, "loopruntime_sessions_passivated") == 0  # held by the host
        await wait_for(lambda: host.statistics().passivations == 1)
        await metrics.read_journal()
        assert value(registry, "loopruntime_sessions_passivated") == 1
        assert value(registry, "loopruntime_sessions_waiting_for_host") == 0


async def test_the_shared_limiters_waits_are_counted(autojump_clock: object) -> None:
    registry = CollectorRegistry()
    async with (
        Host.open(MemoryJournal(), {"counter": counting_definition()}, host_id="h") as host,
        open_host_metrics(host, registry) as metrics,
    ):
        limiter = limiter_for("openai", "gpt-test", RateLimit(requests_per_minute=1))
        assert limiter is not None and limiters() == [limiter]
        labels = {"provider": "openai", "model": "gpt-test"}
        await limiter.admit()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(limiter.admit)
            await trio.testing.wait_all_tasks_blocked()
            metrics.refresh()
            assert value(registry, "loopruntime_rate_limit_waiting", **labels) == 1
        limiter.slow_down(5.0)
        metrics.refresh()
        assert value(registry, "loopruntime_rate_limit_waiting", **labels) == 0
        assert value(registry, "loopruntime_rate_limit_admitted_total", **labels) == 2
        assert value(registry, "loopruntime_rate_limit_waited_total", **labels) == 1
        waited = value(registry, "loopruntime_rate_limit_wait_seconds_total", **labels)
        assert waited is not None and waited > 50  # a minute's bucket, one request
        assert value(registry, "loopruntime_rate_limit_slowdowns_total", **labels) == 1


async def test_a_session_waiting_for_the_shared_limit_is_counted_so(
    autojump_clock: object,
) -> None:
    replies = [claude.text_reply("one"), claude.text_reply("two")]
    journal = trio_clock_journal()
    client = Client(journal)
    registry = CollectorRegistry()
    async with open_sse_server(replies) as server:
        async with AnthropicModel(claude.MODEL, api_key=claude.KEY, base_url=server.url) as model:
            chat = LoopDefinition(name="chat", model=model)
            limit = RateLimit(requests_per_minute=1)
            async with (
                Host.open(journal, {"chat": chat}, host_id="h", rate_limit=limit) as host,
                open_host_metrics(host, registry) as metrics,
            ):
                for n in range(2):
                    sid = await client.create("chat", key=f"c{n}")
                    await client.submit(sid, "hi", key=f"s{n}")
                await wait_for(lambda: bool(limiters() and limiters()[0].statistics().waiting))
                metrics.refresh()
                assert value(registry, "loopruntime_sessions", state="rate_limited") == 1
                await wait_for(lambda: len(server.requests) == 2)
                await wait_for(lambda: not limiters()[0].statistics().waiting)
                metrics.refresh()
                assert value(registry, "loopruntime_sessions", state="rate_limited") == 0
