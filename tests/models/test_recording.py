"""RecordingModel and ReplayModel: a session recorded once, replayed with no
model behind it, and every way a replay refuses a request it was not given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from journal import open_journal
from journal.content import Message, Text, TextDelta, ToolResult, ToolUse
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.errors import ModelError
from loopruntime.model import Delta, Model, ModelRequest
from loopruntime.models import (
    OpenAIModel,
    RecordingError,
    RecordingMismatchError,
    RecordingModel,
    ReplayModel,
    Reply,
    ScriptedModel,
    ToolCall,
    request_digest,
)
from session import Session
from tests.models.test_openai import KEY, MODEL, text_reply
from tests.support.sse_server import open_sse_server

FORECASTS = {"Oslo": "sunny"}


@tool(permission="allow")
async def weather(ctx: ToolContext, *, city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: {FORECASTS.get(city, 'unknown')}"


def weather_script() -> ScriptedModel:
    # The tool call has no scripted id: the model makes a random one, which
    # the replay must give back as it was recorded.
    return ScriptedModel(
        [
            Reply(text="Checking.", tool_calls=[ToolCall(name="weather", input={"city": "Oslo"})]),
            Reply(text="It is sunny in Oslo."),
        ],
        name="scripted:weather",
    )


async def run_session(model: Model, text: str) -> tuple[list[Message], str | None, str | None]:
    d = LoopDefinition(name="agent", model=model, system="Be brief.", tools=[weather])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit(text)
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
    return list(state.messages), state.last_outcome, state.last_failure


def ask(text: str) -> ModelRequest:
    return ModelRequest(system="", messages=(Message(role="user", blocks=(Text(text=text),)),))


async def collect(model: Model, request: ModelRequest) -> list[Delta]:
    out: list[Delta] = []
    async with model.stream(request) as deltas:
        async for delta in deltas:
            out.append(delta)
    return out


async def test_a_recorded_session_replays_with_no_model(tmp_path: Path) -> None:
    path = tmp_path / "weather.jsonl"
    recorded, outcome, _ = await run_session(RecordingModel(weather_script(), path), "Weather?")
    assert outcome == "completed"

    replay = ReplayModel(path)
    assert replay.name == "scripted:weather"
    replayed, outcome, _ = await run_session(replay, "Weather?")
    assert outcome == "completed"
    assert replayed == recorded
    [use] = [b for m in replayed for b in m.blocks if isinstance(b, ToolUse)]
    assert use.id.startswith("toolu_")  # the random id, given back as recorded
    assert replay.calls == 2
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["model"] == "scripted:weather"
    assert [json.loads(line)["outcome"] for line in lines[1:]] == ["complete", "complete"]


async def test_another_input_names_the_first_differing_message(tmp_path: Path) -> None:
    path = tmp_path / "weather.jsonl"
    await run_session(RecordingModel(weather_script(), path), "Weather in Oslo?")

    _, outcome, failure = await run_session(ReplayModel(path), "Weather in Rome?")
    assert outcome == "failed"
    assert failure is not None
    assert "the message at index 0 (user) differs: recorded 'Weather in Oslo?', now " in failure
    assert "'Weather in Rome?'" in failure


async def test_a_tool_answering_otherwise_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "weather.jsonl"
    await run_session(RecordingModel(weather_script(), path), "Weather?")
    monkeypatch.setitem(FORECASTS, "Oslo", "rain")

    replay = ReplayModel(path)
    messages, _, _ = await run_session(replay, "Weather?")
    [result] = [b for b in messages[2].blocks if isinstance(b, ToolResult)]
    request = ModelRequest(system="Be brief.", messages=tuple(messages[:3]))
    with pytest.raises(RecordingMismatchError) as caught:
        async with replay.stream(request):
            pass
    err = caught.value
    assert (err.message_index, err.call, err.path, err.code) == (
        2,
        3,
        str(path),
        "model.recording_mismatch",
    )
    assert f"recorded '(result of {result.tool_use_id}) Oslo: sunny', now" in str(err)


async def test_equal_requests_replay_in_recorded_order_then_refuse(tmp_path: Path) -> None:
    path = tmp_path / "twice.jsonl"
    recording = RecordingModel(ScriptedModel([Reply(text="one"), Reply(text="two")]), path)
    for _ in range(2):
        await collect(recording, ask("again"))

    replay = ReplayModel(path)
    texts = []
    for _ in range(2):
        texts.append(
            "".join(d.text for d in await collect(replay, ask("again")) if isinstance(d, TextDelta))
        )
    assert texts == ["one", "two"]
    with pytest.raises(RecordingMismatchError, match=r"recorded 2 time\(s\), each already"):
        await collect(replay, ask("again"))


async def test_a_request_with_another_system_prompt_is_named(tmp_path: Path) -> None:
    path = tmp_path / "system.jsonl"
    await collect(RecordingModel(ScriptedModel([Reply(text="ok")]), path), ask("hi"))
    other = ModelRequest(system="Be verbose.", messages=ask("hi").messages)
    with pytest.raises(RecordingMismatchError, match="the system prompt differ") as caught:
        await collect(ReplayModel(path), other)
    assert caught.value.message_index is None


async def test_errors_are_replayed_where_they_happened(tmp_path: Path) -> None:
    path = tmp_path / "errors.jsonl"
    refused = ModelError("no such model", kind="not_found", code="model.not_found", status=404)
    script = ScriptedModel(
        [Reply(error=refused), Reply(text="abcdefgh", chunk_size=2, fail_after_chunks=2)]
    )
    recording = RecordingModel(script, path)
    with pytest.raises(ModelError):
        await collect(recording, ask("first"))
    live: list[Delta] = []
    with pytest.raises(ModelError) as broke:
        async with recording.stream(ask("second")) as deltas:
            async for delta in deltas:
                live.append(delta)

    replay = ReplayModel(path)
    with pytest.raises(ModelError) as again:
        await collect(replay, ask("first"))
    assert (again.value.error_kind, again.value.status, str(again.value)) == (
        "not_found",
        404,
        "no such model",
    )
    replayed: list[Delta] = []
    with pytest.raises(ModelError) as broke_again:
        async with replay.stream(ask("second")) as deltas:
            async for delta in deltas:
                replayed.append(delta)
    assert replayed == live and len(live) > 2
    assert str(broke_again.value) == str(broke.value)
    assert broke_again.value.code == broke.value.code


async def test_a_call_cut_short_replays_what_came_and_then_waits(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "cut.jsonl"
    slow = ScriptedModel([Reply(text="abcdef", chunk_size=1, chunk_delay=1.0)])
    recording = RecordingModel(slow, path)
    with trio.move_on_after(3.5):
        async with recording.stream(ask("go")) as deltas:
            async for _ in deltas:
                pass
    [line] = path.read_text().splitlines()[1:]
    assert json.loads(line)["outcome"] == "cut"

    got: list[Delta] = []
    with trio.move_on_after(1000) as waited:
        async with ReplayModel(path).stream(ask("go")) as deltas:
            async for delta in deltas:
                got.append(delta)
    assert waited.cancelled_caught  # it went no further than the recorded call
    assert "".join(d.text for d in got if isinstance(d, TextDelta)) == "abc"


async def test_any_model_is_recorded_here_a_real_sdk_call(tmp_path: Path) -> None:
    path = tmp_path / "openai.jsonl"
    async with open_sse_server([text_reply("Hel", "lo")]) as server:
        async with OpenAIModel(MODEL, api_key=KEY, base_url=server.url) as model:
            live = await collect(RecordingModel(model, path), ask("hi"))
    # The server is gone; the replay needs none.
    replay = ReplayModel(path)
    assert await collect(replay, ask("hi")) == live
    assert replay.name == "openai:gpt-test-1"
    assert replay.settings["max_tokens_field"] == "max_completion_tokens"
    assert KEY not in path.read_text()


async def test_an_option_json_cannot_hold_is_a_recording_error(tmp_path: Path) -> None:
    recording = RecordingModel(ScriptedModel([Reply(text="ok")]), tmp_path / "x.jsonl")
    odd = ModelRequest(system="", messages=ask("hi").messages, options={"when": object()})
    with pytest.raises(RecordingError, match="options to values JSON can hold"):
        await collect(recording, odd)


def test_a_recording_that_is_missing_or_not_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="there is no recording at") as caught:
        ReplayModel(tmp_path / "missing.jsonl")
    assert caught.value.path == str(tmp_path / "missing.jsonl")
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n')
    with pytest.raises(RecordingError, match="is not a model recording"):
        ReplayModel(other)
    with pytest.raises(RecordingError, match="could not be written"):
        RecordingModel(ScriptedModel(), tmp_path / "no-such-dir" / "x.jsonl")


def test_the_digest_reads_the_messages_as_plain_data() -> None:
    use = ToolUse(id="call_1", name="weather", input={"city": "Oslo", "days": 2})
    same_input = ToolUse(id="call_1", name="weather", input={"days": 2, "city": "Oslo"})
    first = ModelRequest(system="s", messages=(Message(role="assistant", blocks=(use,)),))
    # Another sequence, another key order, the runtime's own mark: the same request.
    second = ModelRequest(
        system="s",
        messages=[Message(role="assistant", blocks=(same_input,), synthetic=True)],
    )
    assert request_digest(first) == request_digest(second)
    third = ModelRequest(system="s", messages=(Message(role="user", blocks=(use,)),))
    assert request_digest(third) != request_digest(first)
