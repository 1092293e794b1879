"""Golden event sequences of the turn machine (no tools)."""

from __future__ import annotations

import pytest
import trio

from journal import open_journal
from journal.content import Text
from journal.events import (
    InputCancelled,
    ModelCallStarted,
    ModelMessageCommitted,
    Notice,
    TurnEnded,
)
from loopruntime import (
    INTERRUPTED_NOTICE,
    TRUNCATED_NOTICE,
    Limits,
    LoopClosedError,
    LoopDefinition,
    LoopStatus,
    NotQueuedError,
)
from loopruntime.errors import ScriptExhaustedError
from loopruntime.models import Reply, ScriptedModel
from session import Session, UnknownSessionError
from tests.support.loops import events_of, squash, tags


def definition(*replies: Reply) -> LoopDefinition:
    return LoopDefinition(name="assistant", model=ScriptedModel(list(replies)), system="be brief")


TURN = [
    "turn.started",
    "model.call_started",
    "model.output",
    "model.message_committed",
    "context.measured",
    "turn.ended",
]


async def test_plain_turn() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(Reply(text="hi there"))) as s:
            input_id = await s.submit("hello")
            assert input_id.startswith("in_")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        assert squash(await tags(journal, s.id)) == [
            "loop.started",
            "loop.configured",
            "input.queued",
            *TURN,
        ]
        assert [m.role for m in state.messages] == ["user", "assistant"]
        assert state.messages[1].blocks == (Text(text="hi there"),)
        assert state.turn_index == 1
        assert state.status is LoopStatus.IDLE
        assert state.queued == []
        ended = await events_of(journal, s.id, TurnEnded)
        assert [e.outcome for e in ended] == ["completed"]


async def test_model_request_carries_system_and_history() -> None:
    model = ScriptedModel([Reply(text="one"), Reply(text="two")])
    async with open_journal("memory:") as journal:
        d = LoopDefinition(name="a", model=model, system="sys")
        async with Session.create(journal, d) as s:
            await s.submit("first")
            await s.wait_idle()
            await s.submit("second")
            await s.wait_idle()
    second = model.requests[1]
    assert second.system == "sys"
    assert [m.role for m in second.messages] == ["user", "assistant", "user"]
    assert second.messages[-1].blocks == (Text(text="second"),)


async def test_input_queued_during_a_turn_starts_the_next_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    d = definition(Reply(text="slow reply", chunk_size=2, chunk_delay=1.0), Reply(text="second"))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("first")
            await trio.sleep(1.5)
            assert (await s.snapshot()).status is LoopStatus.RUNNING
            await s.submit("second")
            await s.wait_idle()
            state = await s.snapshot()
        seq = squash(await tags(journal, s.id))
    assert seq == [
        "loop.started",
        "loop.configured",
        "input.queued",
        "turn.started",
        "model.call_started",
        "model.output",
        "input.queued",
        "model.output",
        "model.message_committed",
        "context.measured",
        "turn.ended",
        *TURN,
    ]
    assert state.turn_index == 2
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]


async def test_cancel_queued_input(autojump_clock: trio.abc.Clock) -> None:
    d = definition(Reply(text="slow", chunk_size=1, chunk_delay=1.0))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("first")
            await trio.sleep(0.5)
            queued = await s.submit("second")
            assert [q.input_id for q in (await s.snapshot()).queued] == [queued]
            await s.cancel_queued(queued)
            await s.wait_idle()
            state = await s.snapshot()
            before = await tags(journal, s.id)
            with pytest.raises(NotQueuedError):
                await s.cancel_queued(queued)
            with pytest.raises(NotQueuedError):
                await s.cancel_queued("in_never")
            assert await tags(journal, s.id) == before
        seq = squash(await tags(journal, s.id))
    assert seq == [
        "loop.started",
        "loop.configured",
        "input.queued",
        "turn.started",
        "model.call_started",
        "model.output",  # the block start, flushed after 250 ms
        "input.queued",
        "input.cancelled",
        "model.output",
        "model.message_committed",
        "context.measured",
        "turn.ended",
    ]
    assert state.turn_index == 1 and state.queued == []


async def test_interrupt_mid_stream(autojump_clock: trio.abc.Clock) -> None:
    d = definition(Reply(text="abcdefghij", chunk_size=1, chunk_delay=1.0))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await trio.sleep(3.5)
            assert await s.interrupt() is True
            assert await s.interrupt() is False  # nothing runs any more
            state = await s.snapshot()
            await s.verify()
        seq = squash(await tags(journal, s.id))
        committed = (await events_of(journal, s.id, ModelMessageCommitted))[0]
    assert seq == [
        "loop.started",
        "loop.configured",
        "input.queued",
        "turn.started",
        "model.call_started",
        "model.output",
        "model.message_committed",
        "turn.ended",
    ]
    assert committed.notice == "interrupted"
    blocks = committed.message.blocks
    assert blocks[-1] == Text(text=INTERRUPTED_NOTICE)
    assert blocks[0] == Text(text="abc")
    assert state.last_outcome == "interrupted"
    assert state.status is LoopStatus.IDLE


async def test_interrupt_before_any_output_leaves_no_message(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Nothing the model said arrived: the context keeps the user's message
    # alone and the journal keeps the notice, naming the call it closes.
    d = definition(Reply(text="late", chunk_delay=10.0))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await trio.sleep(1)
            assert await s.interrupt()
            state = await s.snapshot()
            await s.verify()
        assert await events_of(journal, s.id, ModelMessageCommitted) == []
        [notice] = await events_of(journal, s.id, Notice)
        [started] = await events_of(journal, s.id, ModelCallStarted)
    assert (notice.code, notice.text, notice.refs) == (
        "interrupted",
        INTERRUPTED_NOTICE,
        (started.effect_id,),
    )
    assert [m.role for m in state.messages] == ["user"]
    assert state.open_call is None


async def test_stream_failure_mid_reply(autojump_clock: trio.abc.Clock) -> None:
    d = definition(Reply(text="abcdefgh", chunk_size=2, chunk_delay=1.0, fail_after_chunks=2))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await trio.sleep(1.5)
            await s.submit("queued behind a failing turn")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        seq = squash(await tags(journal, s.id))
        committed = (await events_of(journal, s.id, ModelMessageCommitted))[0]
        ended = (await events_of(journal, s.id, TurnEnded))[0]
        cancelled = await events_of(journal, s.id, InputCancelled)
    assert seq == [
        "loop.started",
        "loop.configured",
        "input.queued",
        "turn.started",
        "model.call_started",
        "model.output",
        "input.queued",
        "model.output",  # what had arrived, committed with the failure
        "model.call_failed",
        "model.message_committed",
        "turn.ended",
        "input.cancelled",
    ]
    assert committed.notice == "truncated"
    assert committed.message.blocks == (Text(text="abcd"), Text(text=TRUNCATED_NOTICE))
    assert ended.outcome == "failed" and ended.code == "model.connection_lost"
    assert [c.reason for c in cancelled] == ["turn_failed"]
    assert state.queued == []


async def test_shutdown_while_a_turn_runs(autojump_clock: trio.abc.Clock) -> None:
    d = definition(Reply(text="abcdefgh", chunk_size=1, chunk_delay=1.0))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await trio.sleep(2.5)
            await s.shutdown()
            with pytest.raises(LoopClosedError):
                await s.submit("too late")
        seq = squash(await tags(journal, s.id))
    assert seq == [
        "loop.started",
        "loop.configured",
        "input.queued",
        "turn.started",
        "model.call_started",
        "model.output",
        "model.message_committed",
        "turn.ended",
        "turn.rejected",  # the submit that came too late (reason shutting_down)
    ]


async def test_output_is_flushed_while_a_slow_block_streams(autojump_clock: trio.abc.Clock) -> None:
    """A long block reaches the journal every 250 ms, not only at its end."""
    d = definition(Reply(text="x" * 40, chunk_size=1, chunk_delay=0.1))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await trio.sleep(1.05)
            mid = (await tags(journal, s.id)).count("model.output")
            await s.wait_idle()
    assert mid >= 3


async def test_a_loop_parks_as_its_turn_ends_with_a_flush_deadline_still_ahead(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A reply that streamed slowly but ended before its 250 ms flush
    deadline leaves nothing waiting for that deadline: the loop's actor parks
    as the turn ends (an idle loop keeps no task)."""
    d = definition(Reply(text="abc", chunk_size=1, chunk_delay=0.05))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            # Parked, not waiting in its mailbox for a flusher task to retire.
            assert s.loops["main"].parked
            await s.verify()


async def test_script_exhausted_fails_the_turn_clearly() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(Reply(text="only one"))) as s:
            await s.submit("one")
            await s.wait_idle()
            await s.submit("two")
            await s.wait_idle()
        ended = await events_of(journal, s.id, TurnEnded)
    assert [e.outcome for e in ended] == ["completed", "failed"]
    assert ended[1].code == ScriptExhaustedError(2, 1).code


async def test_restore_of_unknown_session_is_a_named_error() -> None:
    async with open_journal("memory:") as journal:
        with pytest.raises(UnknownSessionError):
            async with Session.restore(journal, "ses_missing", definition()):
                pass
        assert await journal.sessions() == []


async def test_restore_continues_a_cleanly_stopped_session() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(Reply(text="one"))) as s:
            await s.submit("first")
            await s.wait_idle()
        d2 = definition(Reply(text="two"))
        async with Session.restore(journal, s.id, d2) as s2:
            assert s2.id == s.id
            await s2.submit("second")
            await s2.wait_idle()
            state = await s2.snapshot()
            await s2.verify()
        seq = await tags(journal, s.id)
    assert "notice" not in seq  # nothing was in flight: nothing to settle
    assert state.turn_index == 2
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]


async def test_pause_turn_continuations_count_against_the_model_call_limit() -> None:
    model = ScriptedModel([Reply(text="more", stop_reason="pause_turn")] * 6)
    d = LoopDefinition(name="a", model=model, limits=Limits(max_model_calls_per_turn=3))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("go")
            await s.wait_idle()
            await s.verify()
        [ended] = await events_of(journal, s.id, TurnEnded)
    assert (ended.outcome, ended.code) == ("limit", "limit.model_calls")
    assert len(model.requests) == 3
