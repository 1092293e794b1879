"""Crash scenarios for hosts: a host process SIGKILLed around the append that
consumes an inbox entry, or with a tool call in flight, and the definitions
the killed host and the test's own host share.

Rules: as ``crash_scenarios``: a scenario runs in the child process of
``tests.support.crash_child`` and reaches its kill point through
``tests.support.processes``.  Commands reach the hosts only through the inbox.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from journal import Draft, ForwardingJournal, Record, SessionLease, open_journal
from journal.inbox import Consumed
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Host
from tests.support.crash_scenarios import effects, record_effect
from tests.support.processes import kill_self, ready

__all__ = [
    "LEASE_TTL",
    "charging_definitions",
    "cli_definitions",
    "definitions",
    "host_consume",
    "host_pause",
    "host_tool",
]

LEASE_TTL = 1.0
"""Short, so the next host takes over soon after a kill (tests wait for the
journal to show the takeover, never for a span of time)."""


def definitions(side: Path) -> dict[str, LoopDefinition]:
    """``fetcher``: every turn calls the replay-safe ``fetch`` once, then answers.
    The first run of ``fetch`` says READY and never returns (the kill point)."""

    @tool(permission="allow", replay_safe=True)
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Fetch a page (safe to run again)."""
        first = not effects(side)
        record_effect(side, tool="fetch", execution=ctx.execution_id)
        if first and side.name.startswith("hang"):
            ready()
            await trio.sleep_forever()
        return f"the page at {url}"

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="fetched")
        return Reply(tool_calls=[ToolCall(name="fetch", input={"url": "https://example.org"})])

    return {"fetcher": LoopDefinition(name="fetcher", model=ScriptedModel(script), tools=[fetch])}


def cli_definitions() -> dict[str, LoopDefinition]:
    """``loopruntime host --definitions tests.support.crash_hosts:cli_definitions``."""
    return definitions(Path("/dev/null"))


class KillAtConsume(ForwardingJournal):
    """SIGKILLs this process at the append that consumes inbox entry ``entry``:
    before it is sent (``before``) or once it returned (``after``)."""

    def __init__(self, inner: Any, entry: int, when: str) -> None:
        super().__init__(inner)
        self.entry, self.when = entry, when

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Consumed] = (),
    ) -> list[Record]:
        mine = any(c.entry == self.entry for c in consumes)
        if mine and self.when == "before":
            kill_self()
        records = await self.inner.append(
            lease, drafts, expected_seq=expected_seq, consumes=consumes
        )
        if mine:
            kill_self()
        return records


async def host_consume(url: str, side: str, entry: str, when: str) -> None:
    """A host that is SIGKILLed at the append consuming inbox entry ``entry``."""
    async with open_journal(url) as journal:
        killing = KillAtConsume(journal, int(entry), when)
        async with Host.open(
            killing, definitions(Path(side)), host_id="a", lease_ttl=LEASE_TTL, poll=0.05
        ):
            await trio.sleep_forever()


async def host_tool(url: str, side: str, ttl: str = str(LEASE_TTL)) -> None:
    """A host that runs sessions until it is SIGKILLed (its tool says READY)."""
    async with open_journal(url) as journal:
        async with Host.open(
            journal, definitions(Path(side)), host_id="a", lease_ttl=float(ttl), poll=0.05
        ):
            await trio.sleep_forever()


def charging_definitions(side: Path, go: Path) -> dict[str, LoopDefinition]:
    """``charger``: every turn calls ``charge`` once (not replay-safe), then
    answers.  ``charge`` says READY, waits (a sleep at a time) until the
    file ``go`` exists, then records its effect in ``side``."""

    @tool(permission="allow")
    async def charge(ctx: ToolContext, *, amount: int) -> str:
        """Charge a card (not safe to run twice)."""
        ready()
        # Polled: the file is made by another process, and no event crosses processes.
        # Each look follows a sleep, READY's too: the test pauses the host on
        # READY, meaning "while the tool waits"; paused in the same step as
        # READY, before the first look, the tool would resume into its effect
        # with no checkpoint between, where no cancel scope can reach
        # (docs/tools.md: check the owner right before an effect).
        await trio.sleep(0.05)
        while not go.exists():  # noqa: ASYNC110, ASYNC240
            await trio.sleep(0.05)
        record_effect(side, tool="charge", execution=ctx.execution_id, pid=os.getpid())
        return f"charged {amount}"

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="charged")
        return Reply(tool_calls=[ToolCall(name="charge", input={"amount": 5})])

    return {"charger": LoopDefinition(name="charger", model=ScriptedModel(script), tools=[charge])}


async def host_pause(url: str, side: str, go: str) -> None:
    """Host ``a`` running ``charging_definitions`` until it is stopped."""
    async with open_journal(url) as journal:
        async with Host.open(
            journal,
            charging_definitions(Path(side), Path(go)),
            host_id="a",
            lease_ttl=LEASE_TTL,
            poll=0.05,
        ):
            await trio.sleep_forever()
