"""Payload limits of a session's commands and of the model's output, each at
its limit (taken) and one past it (refused, the journal's head unchanged),
on the memory and the SQLite journal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest

from journal import Journal, open_journal
from journal.content import Message, Text, TextDelta, ToolResult, ToolUse
from journal.events import (
    CompactionRejected,
    ModelCallFailed,
    ModelMessageCommitted,
    ModelOutput,
    Notice,
    TurnEnded,
)
from loopruntime import (
    Limits,
    LoopDefinition,
    ModelCompactor,
    ModelRequest,
    PayloadTooLargeError,
    ToolContext,
    tool,
)
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.summary import MAX_SUMMARY_CHARS
from session import Session
from session.embedded.validation import tool_result
from tests.compaction.support import outcome
from tests.support.loops import records

BACKENDS = ["memory", "sqlite"]


@asynccontextmanager
async def journal_of(backend: str, tmp_path: Path) -> AsyncIterator[Journal]:
    url = "memory:" if backend == "memory" else f"sqlite:///{tmp_path / 'journal.db'}"
    async with open_journal(url) as journal:
        yield journal


def text_of_size(size: int) -> str:
    """Text whose user message is exactly ``size`` bytes as the journal stores it."""
    probe = 500  # the same msgpack string header as any length up to 64 KiB
    encoded = msgspec.msgpack.encode(Message(role="user", blocks=(Text(text="x" * probe),)))
    return "x" * (size - (len(encoded) - probe))


class Note(msgspec.Struct):
    text: str


def echo(limits: Limits, *, ran: list[str] | None = None) -> LoopDefinition:
    @tool(permission="allow")
    async def ask(ctx: ToolContext) -> str:
        """Ask the person a question."""
        return await ctx.ask_user("what now?")

    @tool(permission="allow")
    async def fill(ctx: ToolContext) -> str:
        """Ask the person to fill a form."""
        return (await ctx.ask_form("your note", Note)).text

    @tool(permission="allow")
    async def save(ctx: ToolContext, text: str) -> str:
        """Save text."""
        (ran if ran is not None else []).append(text)
        return "saved"

    def brain(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if any(isinstance(b, ToolResult) for b in last.blocks):
            return Reply(text="done")
        said = " ".join(b.text for b in last.blocks if isinstance(b, Text))
        if said in ("ask", "fill"):
            return Reply(tool_calls=[ToolCall(name=said, input={})])
        return Reply(text="ok")

    return LoopDefinition(
        name="limits", model=ScriptedModel(brain), tools=[ask, fill, save], limits=limits
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_input_text_at_its_limit_is_taken_and_one_byte_more_refused(
    backend: str, tmp_path: Path
) -> None:
    limit = 1_000
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, echo(Limits(max_input_bytes=limit))) as s:
            await s.submit(text_of_size(limit))
            await s.wait_idle()
            head = await journal.head(s.id)
            with pytest.raises(PayloadTooLargeError) as caught:
                await s.submit(text_of_size(limit + 1))
            assert (caught.value.size, caught.value.limit) == (limit + 1, limit)
            assert caught.value.what == "the input"
            assert "1,001 bytes" in str(caught.value) and "1,000 bytes" in str(caught.value)
            with pytest.raises(PayloadTooLargeError):
                await s.steer(text_of_size(limit + 100))
            assert await journal.head(s.id) == head
            assert (await s.snapshot()).last_outcome == "completed"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_blocks_of_an_input_are_counted(backend: str, tmp_path: Path) -> None:
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, echo(Limits(max_input_blocks=3))) as s:
            await s.submit([Text(text="a"), Text(text="b"), Text(text="c")])
            await s.wait_idle()
            head = await journal.head(s.id)
            with pytest.raises(PayloadTooLargeError) as caught:
                await s.submit([Text(text=c) for c in "abcd"])
            assert (caught.value.size, caught.value.limit) == (4, 3)
            assert "4 blocks" in str(caught.value)
            assert await journal.head(s.id) == head


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_answer_over_its_limit_is_refused_and_the_gate_stays_open(
    backend: str, tmp_path: Path
) -> None:
    limit = 300
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, echo(Limits(max_answer_bytes=limit))) as s:
            await s.submit("ask")
            await s.wait_idle()
            [gate_id] = (await s.snapshot()).gates
            head = await journal.head(s.id)
            # Bytes of UTF-8, not characters: "é" is two.
            with pytest.raises(PayloadTooLargeError) as caught:
                await s.answer(gate_id, "é" * 150 + "x")
            assert (caught.value.size, caught.value.limit) == (limit + 1, limit)
            assert gate_id in caught.value.what
            assert await journal.head(s.id) == head
            assert gate_id in (await s.snapshot()).gates
            await s.answer(gate_id, "é" * 150)
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_forms_answer_is_measured_as_its_json(backend: str, tmp_path: Path) -> None:
    limit = 300
    overhead = len(b'{"text":""}')
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, echo(Limits(max_answer_bytes=limit))) as s:
            await s.submit("fill")
            await s.wait_idle()
            [gate_id] = (await s.snapshot()).gates
            head = await journal.head(s.id)
            with pytest.raises(PayloadTooLargeError) as caught:
                await s.answer(gate_id, {"text": "x" * (limit - overhead + 1)})
            assert (caught.value.size, caught.value.limit) == (limit + 1, limit)
            assert await journal.head(s.id) == head
            await s.answer(gate_id, Note(text="x" * (limit - overhead)))
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"


def test_a_hosts_result_for_an_unknown_outcome_is_bounded_like_input() -> None:
    limits = Limits(max_input_bytes=200)
    tool_result("exe_1", "x" * 150, False, limits)
    with pytest.raises(PayloadTooLargeError) as caught:
        tool_result("exe_1", "x" * 250, False, limits)
    assert caught.value.what == "the result of execution exe_1"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_reply_past_max_response_bytes_is_cut_and_none_of_it_kept(
    backend: str, tmp_path: Path
) -> None:
    limit = 2_000
    model = ScriptedModel([Reply(text="a" * limit), Reply(text="b" * (limit + 1), chunk_size=64)])
    definition = LoopDefinition(name="cut", model=model, limits=Limits(max_response_bytes=limit))
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("first")
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"
            await s.submit("second")
            await s.wait_idle()
            state = await s.snapshot()
        events = [r.event for r in await records(journal, s.id)]
    assert state.last_outcome == "failed"
    assert state.last_failure_code == "model.response_too_large"
    [failed] = [e for e in events if isinstance(e, ModelCallFailed)]
    assert failed.code == "model.response_too_large" and f"{limit:,} bytes" in failed.detail
    [notice] = [e for e in events if isinstance(e, Notice)]
    assert notice.code == "truncated" and notice.refs == (failed.effect_id,)
    # Reading stopped at the limit: the journal holds no more of the reply than it.
    streamed = [
        p.text
        for e in events
        if isinstance(e, ModelOutput) and e.effect_id == failed.effect_id
        for p in e.pieces
        if isinstance(p, TextDelta)
    ]
    assert 0 < len("".join(streamed)) <= limit
    # The first reply is the only assistant message: nothing of the second was promoted.
    messages = [e.message for e in events if isinstance(e, ModelMessageCommitted)]
    assert [m.blocks for m in messages] == [(Text(text="a" * limit),)]
    assert not any("b" in b.text for m in state.messages for b in m.blocks if isinstance(b, Text))
    [*_, ended] = [e for e in events if isinstance(e, TurnEnded)]
    assert ended.code == "model.response_too_large" and ended.outcome == "failed"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_tool_input_over_its_limit_is_an_error_result_and_does_not_run(
    backend: str, tmp_path: Path
) -> None:
    limit = 500
    overhead = len(b'{"text":""}')
    ran: list[str] = []
    at_limit, over = "x" * (limit - overhead), "y" * (limit - overhead + 1)
    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="save", input={"text": at_limit})]),
            Reply(tool_calls=[ToolCall(name="save", input={"text": over})]),
            Reply(text="sorry"),
        ]
    )
    definition = LoopDefinition(
        name="tools",
        model=model,
        tools=echo(Limits(), ran=ran).tools,
        limits=Limits(max_tool_input_bytes=limit),
    )
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("save twice")
            await s.wait_idle()
            state = await s.snapshot()
    assert ran == [at_limit]
    assert state.last_outcome == "completed"
    uses = [b for m in state.messages for b in m.blocks if isinstance(b, ToolUse)]
    assert [u.input for u in uses] == [{"text": at_limit}, {}]
    results = [b for m in state.messages for b in m.blocks if isinstance(b, ToolResult)]
    refused = results[-1]
    assert refused.is_error
    said = " ".join(b.text for b in refused.content if isinstance(b, Text))
    assert f"{limit + 1:,} bytes" in said and "Limits.max_tool_input_bytes" in said


async def test_a_compactors_runaway_summary_stream_is_stopped() -> None:
    runaway = ScriptedModel([Reply(text="z" * (4 * MAX_SUMMARY_CHARS + 1), chunk_size=4096)])
    model = ScriptedModel([Reply(text="a1"), Reply(text="a2"), Reply(text="a3")])
    definition = LoopDefinition(
        name="compacting",
        model=model,
        limits=Limits(retained_exchanges=1),
        compactor=ModelCompactor(model=runaway),
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            for text in ("u1", "u2", "u3"):
                await s.submit(text)
                await s.wait_idle()
            await s.compact()
            await s.wait_idle()
        rejected = await outcome(journal, s.id)
    assert isinstance(rejected, CompactionRejected) and rejected.reason == "failed"
    assert "model.response_too_large" in rejected.detail
