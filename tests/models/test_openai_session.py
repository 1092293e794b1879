"""A Session driving an OpenAI-compatible model through the real SDK against
the local server: a tool turn and the requests on the wire, a stream dying
after output, an interrupted reply."""

from __future__ import annotations

import trio

from journal import open_journal
from journal.content import Text, TextDelta
from journal.events import ModelMessageCommitted
from loopruntime import INTERRUPTED_NOTICE, LoopDefinition
from loopruntime.models import OpenAIModel
from session import Session, StreamDelta
from tests.models.test_openai import DONE, KEY, MODEL, chunk, role, text_reply, tool_reply
from tests.support.model_calls import assert_cut_short, one_turn_records, weather_turn
from tests.support.sse_server import Drop, Hold, Stream, open_sse_server


async def test_a_tool_turn_over_the_real_sdk() -> None:
    async with open_sse_server([tool_reply(), text_reply("Oslo is sunny.")]) as server:
        async with OpenAIModel(MODEL, api_key=KEY, base_url=server.url) as model:
            state, report, serialized = await weather_turn(model)
    assert report.ok, report.summary()
    assert state.last_outcome == "completed"
    assert state.messages[-1].blocks == (Text(text="Oslo is sunny."),)
    first, second = (r.body for r in server.requests)
    assert first["tools"][0]["function"]["name"] == "weather"
    assert first["tools"][0]["function"]["parameters"]["properties"] == {"city": {"type": "string"}}
    assert first["tool_choice"] == "auto"
    # The second request answers the call with a `tool` message after the
    # assistant message that asked for it.
    assistant, result = second["messages"][-2:]
    assert assistant["role"] == "assistant" and assistant["content"] == "Checking."
    assert assistant["tool_calls"] == [
        {
            "id": "call_01",
            "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
        }
    ]
    assert result == {"role": "tool", "tool_call_id": "call_01", "content": "Oslo: sunny"}
    assert KEY.encode() not in serialized  # the key never reaches the journal


async def test_a_stream_dying_after_output_leaves_the_truncated_notice() -> None:
    dying = Stream([role(), chunk({"content": "The answer is"}), Drop()])
    async with open_sse_server([dying]) as server:
        async with OpenAIModel(MODEL, api_key=KEY, base_url=server.url) as model:
            records = await one_turn_records(model, "What is the answer?")
    assert len(server.requests) == 1  # never resent after output began
    assert_cut_short(records, "The answer is")


async def test_an_interrupted_reply_leaves_the_interrupted_notice() -> None:
    held = Stream([role(), chunk({"content": "Once upon"}), Hold(), chunk(finish="stop"), DONE])
    async with open_sse_server([held]) as server:
        async with OpenAIModel(MODEL, api_key=KEY, base_url=server.url) as model:
            d = LoopDefinition(name="gpt", model=model)
            async with open_journal("memory:") as journal:
                async with Session.create(journal, d) as s:
                    streamed = trio.Event()

                    async def watch() -> None:
                        async for item in s.subscribe(after=None, deltas=True):
                            if isinstance(item, StreamDelta) and isinstance(item.delta, TextDelta):
                                streamed.set()
                                return

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(watch)
                        await s.submit("Tell a story.")
                        await streamed.wait()
                    assert await s.interrupt() is True
                    await s.wait_idle()
                    state = await s.snapshot()
                records = [r.event async for r in journal.read(s.id)]
        # A guard so a broken build fails instead of hanging, not a timing
        # assertion: the disconnect normally arrives at once.
        with trio.fail_after(120):
            await server.disconnected.wait()
    [message] = [e for e in records if isinstance(e, ModelMessageCommitted)]
    assert message.notice == "interrupted"
    assert message.message.blocks == (Text(text="Once upon"), Text(text=INTERRUPTED_NOTICE))
    assert state.last_outcome == "interrupted"
