"""Direct results (``@tool(direct=True)``): a reply whose calls are all to
direct tools ends the turn with their results, in call order, and no further
model call; recorded in ``turn.ended`` (``direct``, ``output``), replayed,
and decided the same by a restore after a crash between the results and the
turn's end.  A mixed batch, or a failed direct call, goes on as before;
typed outputs must fit, or the turn fails with ``output.direct_invalid``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from journal import Journal, open_journal
from journal.content import Text, ToolResult
from journal.events import LoopConfigured, ToolCompleted, TurnEnded
from loopruntime import Delegate, LoopDefinition, ToolContext, tool
from loopruntime.direct import DIRECT_INVALID
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import NoResultError, Session
from session.replay import check, render_transcript
from tests.support.loops import crashed_copy, events_of, records


@tool(permission="allow", direct=True)
async def lookup(ctx: ToolContext, *, order: str) -> str:
    """Looks an order up; its answer goes straight to the user."""
    return f"order {order}: shipped"


@tool(permission="allow", direct=True)
async def broken(ctx: ToolContext) -> str:
    """Fails."""
    raise RuntimeError("the order service is down")


@tool(permission="allow")
async def note(ctx: ToolContext, *, text: str) -> str:
    """An ordinary tool."""
    return f"noted {text}"


class Shipment(msgspec.Struct):
    order: str
    status: str


@tool(permission="allow", direct=True)
async def shipment(ctx: ToolContext, *, order: str, status: str | None = "shipped") -> Any:
    """The typed shipment record (a missing status does not fit ``Shipment``)."""
    return {"order": order, "status": status} if status is not None else {"order": order}


def calls(*pairs: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=[ToolCall(name=name, input=args) for name, args in pairs])


def definition(model: ScriptedModel, **extra: Any) -> LoopDefinition:
    return LoopDefinition(
        name="orders", model=model, tools=[lookup, broken, note, shipment], **extra
    )


@asynccontextmanager
async def journal_of(backend: str, tmp_path: Path) -> AsyncIterator[Journal]:
    url = "memory:" if backend == "memory" else f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as journal:
        yield journal


BACKENDS = pytest.mark.parametrize("backend", ["memory", "sqlite"])


@BACKENDS
async def test_direct_results_are_the_answer_without_another_model_call(
    backend: str, tmp_path: Path
) -> None:
    # One reply: a second model call would find the script empty and fail the turn.
    model = ScriptedModel([calls(("lookup", {"order": "A1"}), ("lookup", {"order": "B2"}))])
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, definition(model), session_id="s") as s:
            await s.submit("where are A1 and B2?")
            await s.wait_idle()
            answer = await s.result()
            await s.verify()
        (ended,) = await events_of(journal, "s", TurnEnded)
        written = await records(journal, "s")
        report = await check(journal, "s")
    assert len(model.requests) == 1
    assert ended.outcome == "completed" and ended.code is None
    assert ended.output == ["order A1: shipped", "order B2: shipped"]
    completed = [e for e in (r.event for r in written) if isinstance(e, ToolCompleted)]
    assert ended.direct == tuple(c.tool_use_id for c in completed)
    assert answer == "order A1: shipped\n\norder B2: shipped"
    assert "── turn 1 completed (direct) ──" in render_transcript(written)
    assert report.ok, report.summary()
    (configured,) = await _configured(written)
    assert {t.name: t.direct for t in configured.config.tools}["lookup"] is True


async def _configured(written: list[Any]) -> list[LoopConfigured]:
    return [r.event for r in written if isinstance(r.event, LoopConfigured)]


@BACKENDS
@pytest.mark.parametrize(
    "reply",
    [
        calls(("lookup", {"order": "A1"}), ("note", {"text": "asked"})),  # mixed
        calls(("broken", {})),  # a direct call that failed
    ],
    ids=["mixed", "failed"],
)
async def test_a_mixed_or_failed_batch_goes_back_to_the_model(
    backend: str, tmp_path: Path, reply: Reply
) -> None:
    model = ScriptedModel([reply, Reply(text="here is what I found")])
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, definition(model), session_id="s") as s:
            await s.submit("where is A1?")
            await s.wait_idle()
            answer = await s.result()
        (ended,) = await events_of(journal, "s", TurnEnded)
    assert len(model.requests) == 2
    assert (ended.outcome, ended.direct, ended.output) == ("completed", (), None)
    assert answer == "here is what I found"


@BACKENDS
async def test_typed_outputs_take_direct_results_that_fit(backend: str, tmp_path: Path) -> None:
    model = ScriptedModel([calls(("shipment", {"order": "A1"}))])
    async with journal_of(backend, tmp_path) as journal:
        d = definition(model, output=Shipment)
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("where is A1?")
            await s.wait_idle()
            answer = await s.result()
        (ended,) = await events_of(journal, "s", TurnEnded)
    assert answer == Shipment(order="A1", status="shipped")
    assert ended.output == {"order": "A1", "status": "shipped"} and len(ended.direct) == 1
    assert len(model.requests) == 1


@BACKENDS
async def test_direct_results_that_do_not_fit_the_output_type_fail_the_turn(
    backend: str, tmp_path: Path
) -> None:
    model = ScriptedModel([calls(("shipment", {"order": "A1", "status": None}))])
    async with journal_of(backend, tmp_path) as journal:
        d = definition(model, output=Shipment)
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("where is A1?")
            await s.wait_idle()
            with pytest.raises(NoResultError, match=DIRECT_INVALID):
                await s.result()
            await s.verify()
        (ended,) = await events_of(journal, "s", TurnEnded)
        report = await check(journal, "s")
    assert (ended.outcome, ended.kind, ended.code) == ("invalid_output", "tool", DIRECT_INVALID)
    assert "Shipment" in ended.detail and "status" in ended.detail
    assert len(model.requests) == 1
    assert report.ok, report.summary()


@BACKENDS
async def test_a_restore_after_the_results_ends_the_turn_the_same_way(
    backend: str, tmp_path: Path
) -> None:
    first = ScriptedModel([calls(("lookup", {"order": "A1"}))])
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, definition(first), session_id="s") as s:
            await s.submit("where is A1?")
            await s.wait_idle()
        written = await records(journal, "s")
        (done,) = [r for r in written if isinstance(r.event, ToolCompleted)]
        assert not any(isinstance(r.event, TurnEnded) for r in written if r.seq <= done.seq)
        # The crash came right after the result: the turn had not ended.
        copy = await crashed_copy(journal, "s", done.seq)
        again = ScriptedModel([])
        async with Session.restore(journal, copy, definition(again)) as s:
            await s.wait_idle()
            answer = await s.result()
            await s.verify()
        (ended,) = await events_of(journal, copy, TurnEnded)
        (original,) = await events_of(journal, "s", TurnEnded)
        report = await check(journal, copy)
    assert again.requests == []
    assert (ended.outcome, ended.output, ended.direct) == (
        original.outcome,
        original.output,
        original.direct,
    )
    assert answer == "order A1: shipped"
    assert report.ok, report.summary()


async def test_the_next_turn_reads_the_direct_results(tmp_path: Path) -> None:
    model = ScriptedModel([calls(("lookup", {"order": "A1"})), Reply(text="you are welcome")])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(model), session_id="s") as s:
            await s.submit("where is A1?")
            await s.wait_idle()
            await s.submit("thanks")
            await s.wait_idle()
            assert await s.result() == "you are welcome"
            await s.verify()
    seen = msgspec.json.encode(model.requests[1].messages).decode()
    assert "order A1: shipped" in seen and "thanks" in seen


async def test_a_child_answered_by_direct_tools_reports_their_results() -> None:
    child_model = ScriptedModel(
        [
            Reply(
                text="Let me look.",
                tool_calls=[ToolCall(name="lookup", input={"order": "A1"})],
            )
        ]
    )
    clerk = LoopDefinition(name="clerk", model=child_model, tools=[lookup])
    lead_model = ScriptedModel(
        [Reply(tool_calls=[ToolCall(name="ask_clerk", input={"task": "A1?"})]), Reply(text="ok")]
    )
    lead = LoopDefinition(
        name="lead",
        model=lead_model,
        delegates=[Delegate(name="ask_clerk", description="Ask the clerk", definition=clerk)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead) as s:
            await s.submit("where is A1?")
            await s.wait_idle()
            await s.verify()
        report = await check(journal, s.id)
    assert report.ok, report.summary()
    result = lead_model.requests[1].messages[-1].blocks[0]
    assert isinstance(result, ToolResult)
    assert result.content == (Text(text="order A1: shipped"),)


async def test_a_direct_tool_that_redacts_its_result_answers_with_the_redacted_form() -> None:
    @tool(permission="allow", direct=True, redact_result=["token"])
    async def issue(ctx: ToolContext, *, user: str) -> dict[str, str]:
        """Issues a token."""
        return {"user": user, "token": "s3cr3t"}

    model = ScriptedModel([calls(("issue", {"user": "bob"}))])
    d = LoopDefinition(name="issuer", model=model, tools=[issue])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("a token for bob")
            await s.wait_idle()
            answer = await s.result()
        written = await records(journal, "s")
    assert "bob" in answer and "s3cr3t" not in answer
    assert not any("s3cr3t" in str(r.event) for r in written)
