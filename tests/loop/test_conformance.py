"""Behaviours kept the same as the reference runtime this project grew from.

- a reply cut short before anything usable arrived stores no assistant message:
  the notice is a journal record, the model's context keeps only real messages;
- a tool that returns nothing gets a model-visible error result;
- a delegated child's failure reason reaches its parent.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio

from journal import open_journal
from journal.content import Text, ToolResult
from journal.events import (
    ChildFinished,
    LoopImage,
    ModelCallStarted,
    ModelMessageCommitted,
    Notice,
    SessionCheckpoint,
    ToolCompleted,
    TurnEnded,
)
from journal.record import Record
from loopruntime import (
    INTERRUPTED_NOTICE,
    TRUNCATED_NOTICE,
    Delegate,
    LoopDefinition,
    LoopState,
    ModelError,
    ToolContext,
    tool,
)
from loopruntime.host import image_bytes, image_missing
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.notices import EMPTY_RESULT
from session import Session
from session.embedded.checkpoints import InvalidCheckpointError, states_from
from tests.support.loops import events_of

PROVIDER_MESSAGE = "overloaded_error: the service is overloaded, try again later"


def provider_error() -> ModelError:
    return ModelError(PROVIDER_MESSAGE, kind="overloaded", code="model.overloaded")


async def no_message_then_next_request(
    first: Reply, *, interrupt_at: float | None = None
) -> tuple[list[Any], Notice, str, ScriptedModel]:
    """Run ``first`` (failing or interrupted before anything usable), then one
    more turn; return the committed messages, the notice, the failed call's
    effect id and the model (its requests)."""
    model = ScriptedModel([first, Reply(text="second answer")])
    d = LoopDefinition(name="assistant", model=model)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("first question")
            if interrupt_at is None:
                await s.wait_idle()
            else:
                await trio.sleep(interrupt_at)
                assert await s.interrupt()
            after_first = await s.snapshot()
            assert [m.role for m in after_first.messages] == ["user"]
            assert after_first.open_call is None
            await s.submit("second question")
            await s.wait_idle()
            await s.verify()
        committed = await events_of(journal, s.id, ModelMessageCommitted)
        [notice] = await events_of(journal, s.id, Notice)
        first_call = (await events_of(journal, s.id, ModelCallStarted))[0]
    return committed, notice, first_call.effect_id, model


def user_texts(model: ScriptedModel) -> list[list[str]]:
    """Per message of the last request: its role and texts."""
    return [
        [m.role, *(b.text for b in m.blocks if isinstance(b, Text))]
        for m in model.requests[-1].messages
    ]


async def test_stream_failure_before_any_output_stores_no_message() -> None:
    committed, notice, effect_id, model = await no_message_then_next_request(
        Reply(error=provider_error())
    )
    assert (notice.code, notice.text, notice.refs) == ("truncated", TRUNCATED_NOTICE, (effect_id,))
    # Only the second turn's reply is a message; the next request holds only real messages.
    assert [_text(c.message.blocks) for c in committed] == ["second answer"]
    assert user_texts(model) == [["user", "first question", "second question"]]


async def test_failure_with_only_a_partial_tool_call_stores_no_message() -> None:
    partial = Reply(
        tool_calls=[ToolCall(name="lookup", input={"query": "x" * 300})],
        chunk_size=64,
        fail_after_chunks=1,
    )
    committed, notice, effect_id, model = await no_message_then_next_request(partial)
    assert (notice.code, notice.refs) == ("truncated", (effect_id,))
    assert [_text(c.message.blocks) for c in committed] == ["second answer"]
    assert user_texts(model) == [["user", "first question", "second question"]]


async def test_interrupt_before_the_first_token_stores_no_message(
    autojump_clock: trio.abc.Clock,
) -> None:
    slow = Reply(text="too late", chunk_delay=10.0)
    committed, notice, effect_id, model = await no_message_then_next_request(slow, interrupt_at=1.0)
    assert (notice.code, notice.text, notice.refs) == (
        "interrupted",
        INTERRUPTED_NOTICE,
        (effect_id,),
    )
    assert [_text(c.message.blocks) for c in committed] == ["second answer"]
    assert user_texts(model) == [["user", "first question", "second question"]]


async def test_a_partial_reply_with_content_keeps_it_and_the_notice() -> None:
    # The rule above only applies when nothing usable arrived.
    broken = Reply(text="abcdefgh", chunk_size=2, fail_after_chunks=2)
    d = LoopDefinition(name="assistant", model=ScriptedModel([broken]))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            state = await s.snapshot()
        assert await events_of(journal, s.id, Notice) == []
    assert state.messages[-1].blocks == (Text(text="abcd"), Text(text=TRUNCATED_NOTICE))


@pytest.mark.parametrize("returned", ["", "   ", [], None, [Text(text="")]])
async def test_a_tool_that_returns_nothing_gets_an_error_result(returned: Any) -> None:
    @tool(permission="allow")
    async def quiet(ctx: ToolContext) -> Any:
        """Returns nothing."""
        return returned

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="quiet")]), Reply(text="ok")])
    d = LoopDefinition(name="assistant", model=model, tools=[quiet])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
        [completed] = await events_of(journal, s.id, ToolCompleted)
    assert completed.disposition == "failed"
    assert completed.content == (Text(text=EMPTY_RESULT),)
    [result] = [b for b in model.requests[-1].messages[-1].blocks if isinstance(b, ToolResult)]
    assert result.is_error
    assert "empty result" in _text(result.content)


async def test_a_childs_failure_reason_reaches_its_parent() -> None:
    child = LoopDefinition(name="researcher", model=ScriptedModel([Reply(error=provider_error())]))
    parent_model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="research", input={"task": "look it up"})]),
            Reply(text="The researcher could not answer."),
        ]
    )
    parent = LoopDefinition(
        name="lead",
        model=parent_model,
        delegates=[Delegate(name="research", description="Looks things up.", definition=child)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, parent) as s:
            await s.submit("find out")
            await s.wait_idle()
            await s.verify()
        [finished] = await events_of(journal, s.id, ChildFinished)
        [completed] = await events_of(journal, s.id, ToolCompleted)
        child_ended = [
            e for e in await events_of(journal, s.id, TurnEnded) if e.outcome == "failed"
        ]
    assert child_ended and child_ended[0].detail == PROVIDER_MESSAGE
    assert finished.status == "failed"
    assert finished.output == PROVIDER_MESSAGE
    assert completed.disposition == "failed"
    assert PROVIDER_MESSAGE in _text(completed.content)
    [result] = [
        b for b in parent_model.requests[-1].messages[-1].blocks if isinstance(b, ToolResult)
    ]
    assert result.is_error and PROVIDER_MESSAGE in _text(result.content)


def test_a_checkpoint_image_written_before_a_state_field_is_not_restored_from() -> None:
    # Journals written before ``last_failure`` existed hold images without it:
    # restore folds the records instead of starting from such an image.
    full = image_bytes(LoopState(loop="main"))
    held = msgspec.msgpack.decode(full)
    del held["last_failure"], held["last_failure_code"]
    old = msgspec.msgpack.encode(held)
    assert image_missing(full) == []
    assert image_missing(old) == ["last_failure", "last_failure_code"]
    checkpoint = SessionCheckpoint(loops=(LoopImage(loop="main", state=old),))
    record = Record(
        seq=5,
        id="ck",
        session="s",
        loop="~checkpoint",
        at=0,
        cause=None,
        digest=b"",
        event=checkpoint,
    )
    with pytest.raises(InvalidCheckpointError, match="last_failure"):
        states_from([record])


def _text(blocks: Any) -> str:
    return "".join(b.text for b in blocks if isinstance(b, Text))
