"""Property: whatever commands arrive in whatever order, the live state equals
the fold of the journal, and the journal passes the checker."""

from __future__ import annotations

import contextlib

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import open_journal
from loopruntime import LoopDefinition, LoopError, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.checkpoints import read_restored
from session.replay import check


@tool(permission="allow", concurrency="parallel")
async def nap(ctx: ToolContext, *, seconds: float) -> str:
    """Sleeps a little."""
    await trio.sleep(seconds)
    return "rested"


def brain(request: ModelRequest) -> Reply:
    # Deterministic variety from the conversation length: plain replies,
    # tool calls, and streams that break part-way.
    n = len(request.messages)
    if n % 5 == 1:
        return Reply(
            text="napping",
            tool_calls=[ToolCall(name="nap", input={"seconds": 0.5})] * 2,
            chunk_delay=0.1,
        )
    if n % 7 == 3:
        return Reply(text="this stream breaks", chunk_size=3, chunk_delay=0.1, fail_after_chunks=2)
    return Reply(text="reply " * (n % 4 + 1), chunk_size=5, chunk_delay=0.1)


op = st.one_of(
    st.tuples(st.just("submit"), st.none()),
    st.tuples(st.just("cancel"), st.integers(0, 5)),
    st.tuples(st.just("interrupt"), st.none()),
    st.tuples(st.just("snapshot"), st.none()),
    st.tuples(st.just("steer"), st.none()),
    st.tuples(st.just("sleep"), st.sampled_from([0.05, 0.2, 0.7, 2.0])),
)


async def scenario(ops: list[tuple[str, object]]) -> None:
    d = LoopDefinition(name="prop", model=ScriptedModel(brain), tools=[nap])
    async with open_journal("memory:") as journal:
        # Checkpoints every few records, so that they land everywhere: inside
        # turns, at open gates, in the middle of a stream.
        async with Session.create(journal, d, checkpoint_every=7) as s:
            inputs: list[str] = []
            for name, arg in ops:
                if name == "submit":
                    inputs.append(await s.submit(f"message {len(inputs)}"))
                elif name == "cancel" and inputs:
                    assert isinstance(arg, int)
                    # Refused (nothing committed) when that input already ran.
                    with contextlib.suppress(LoopError):
                        await s.cancel_queued(inputs[arg % len(inputs)])
                elif name == "interrupt":
                    await s.interrupt()
                elif name == "snapshot":
                    await s.snapshot()
                elif name == "steer":
                    await s.steer("keep it short")
                elif name == "sleep":
                    assert isinstance(arg, float)
                    await trio.sleep(arg)
                await s.verify()
            await s.wait_idle()
            live = await s.snapshot()
            await s.verify()
        folded = await read_restored(journal, s.id, use_checkpoints=False)
        assert folded.checkpoint_seq == 0
        assert folded.states["main"] == live
        restored = await read_restored(journal, s.id)
        assert restored.states == folded.states
        chain = await journal.checkpoints(s.id)
        assert restored.checkpoint_seq == (chain[-1].seq if chain else 0)
        report = await check(journal, s.id)
        assert report.ok, report.summary()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=25))
def test_fold_of_journal_equals_live_state(ops: list[tuple[str, object]]) -> None:
    trio.run(scenario, ops, clock=trio.testing.MockClock(autojump_threshold=0))
