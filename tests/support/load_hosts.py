"""Load scenarios for hosts: host processes and a client process sharing one
journal, each turn calling a replay-safe tool and one that is not.

Rules: as ``crash_scenarios``: each runs in the child process of
``tests.support.crash_child``.  Every tool run writes a start and an end line
to its process's own side file (``SIDE_DIR/<pid>.jsonl``: one writer per
file, so lines never interleave), which is how the test tells what ran, how
often, and what was in flight in the process it killed.  The client drives
each session turn by turn through the inbox, and resolves an unknown effect
as an operator would (it reports that the charge did not happen).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import trio

from journal import open_journal
from journal.content import Text
from journal.events import ToolAbandoned, ToolResolved, TurnEnded
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Client, Host
from tests.support.crash_scenarios import record_effect

__all__ = ["CAUGHT", "LEASE_TTL", "TURNS", "definitions", "load_client", "load_host", "runs"]

LEASE_TTL = 5.0
"""Long enough that a host slowed by the load (two shared cores) still renews
in time: the failovers the test sees are the kill's, not a starved renewal."""
TURNS = 5
CAUGHT = "load_000 turn 3"
"""The charge for this turn takes a minute: the test kills its host while it
runs, so the kill always catches a call that is not replay-safe in flight."""


def definitions(side_dir: Path) -> dict[str, LoopDefinition]:
    """``load``: every turn calls ``look`` (replay-safe) and ``charge`` (not)
    for the user's text, then answers; model replies and tools take a little time."""
    side = side_dir / f"{os.getpid()}.jsonl"

    async def run(ctx: ToolContext, name: str, ref: str) -> str:
        execution = ctx.execution_id
        record_effect(
            side, tool=name, ref=ref, execution=execution, phase="start", at=time.time_ns()
        )
        await trio.sleep(60 if (name, ref) == ("charge", CAUGHT) else 0.01)
        record_effect(side, tool=name, ref=ref, execution=execution, phase="end", at=time.time_ns())
        return f"{name} {ref}"

    @tool(permission="allow", replay_safe=True)
    async def look(ctx: ToolContext, *, ref: str) -> str:
        """Look something up (safe to run again)."""
        return await run(ctx, "look", ref)

    @tool(permission="allow")
    async def charge(ctx: ToolContext, *, ref: str) -> str:
        """Charge a card (must not run twice)."""
        return await run(ctx, "charge", ref)

    def script(request: ModelRequest) -> Reply:
        # A new input (the client's "SESSION turn N", perhaps after the notices
        # and results a crash left) asks for the tools; tool results alone, the answer.
        asked = [b.text for b in request.messages[-1].blocks if isinstance(b, Text)]
        refs = [text for text in asked if text.startswith("load_")]
        if not refs:
            return Reply(text="looked and charged, all done", chunk_size=8, chunk_delay=0.002)
        ref = refs[-1]
        return Reply(
            tool_calls=[
                ToolCall(name="look", input={"ref": ref}),
                ToolCall(name="charge", input={"ref": ref}),
            ]
        )

    return {"load": LoopDefinition(name="load", model=ScriptedModel(script), tools=[look, charge])}


def runs(side_dir: Path) -> list[dict[str, Any]]:
    """Every tool start and end the hosts recorded, each with its process id,
    in the order they happened (a line still being written is left out)."""
    found: list[dict[str, Any]] = []
    for path in side_dir.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                found.append({**json.loads(line), "pid": int(path.stem)})
            except ValueError:
                continue  # the last line, half written
    return sorted(found, key=lambda r: int(r["at"]))


async def load_host(url: str, side_dir: str, host_id: str) -> None:
    """A host running ``load`` sessions until it is killed or stopped."""
    async with open_journal(url) as journal:
        async with Host.open(
            journal,
            definitions(Path(side_dir)),
            host_id=host_id,
            lease_ttl=LEASE_TTL,
            poll=0.2,
            idle_after=2.0,
        ):
            await trio.sleep_forever()


async def load_client(url: str, count: str) -> None:
    """Create ``count`` sessions and drive each through ``TURNS`` turns, one
    submit after the other, resolving unknown effects; exits when all are done."""
    async with open_journal(url) as journal:
        client = Client(journal, poll=0.2)

        async def drive(sid: str) -> None:
            await client.create("load", session_id=sid, key="create")
            seen, ended = 0, 0
            unknown: set[str] = set()
            for turn in range(1, TURNS + 1):
                await client.submit(sid, f"{sid} turn {turn}", key=f"turn-{turn}")
                await client.wait(sid, f"turn-{turn}")
                while ended < turn:
                    async for record in journal.read(sid, after=seen):
                        seen = record.seq
                        match record.event:
                            case TurnEnded():
                                ended += 1
                            case ToolAbandoned(reason="crashed", execution_id=execution):
                                unknown.add(execution)
                            case ToolResolved(execution_id=execution):
                                unknown.discard(execution)
                            case _:
                                pass
                    for execution in sorted(unknown):
                        await client.resolve(
                            sid, execution, "not charged: retry later", True, key=f"r-{execution}"
                        )
                    if ended < turn:
                        await trio.sleep(0.2)

        async with trio.open_nursery() as nursery:
            for i in range(int(count)):
                nursery.start_soon(drive, f"load_{i:03d}")
