"""What keeps a step's cost flat as the history grows (benchmarks/README.md
has the figures): record ids that grow the journal's id index at its end, a
request whose fixed part is digested once, and a request that reads the
history in place (exactly the messages it was sent before)."""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
from typing import Any

import msgspec
import pytest
import structlog
import trio

from journal import open_journal
from journal.content import Message, Text
from loopruntime import Loop
from loopruntime.context import RequestBuilder, merged
from loopruntime.ids import RECORD_PREFIXES, new_id
from loopruntime.model import ModelRequest, ToolSchema
from loopruntime.models import ScriptedModel
from session import Session

from .test_pipelining import stepping


def test_record_ids_count_up_within_a_process() -> None:
    ids = [new_id("ev_") for _ in range(1000)]
    assert all(re.fullmatch(r"ev_[0-9a-f]{16}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    # The counted half orders them (a wrap of the 8 digits is 2**31 ids away).
    assert [i[3:11] for i in ids] == sorted(i[3:11] for i in ids)
    assert {"cp_", "exe_"} <= RECORD_PREFIXES


def test_other_ids_stay_wholly_random() -> None:
    # Tokens and gate ids may be shown to people: no counted part.
    tokens = [new_id("tok_") for _ in range(200)]
    heads = [t[4:12] for t in tokens]
    assert heads != sorted(heads)
    assert len(set(heads)) == len(heads)


def test_a_forked_child_counts_from_a_fresh_start() -> None:
    read, write = os.pipe()
    before = new_id("ev_")
    pid = os.fork()
    if pid == 0:  # the child: one id, then leave at once
        os.write(write, new_id("ev_").encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    mine = new_id("ev_")
    # Without the reseed the child's count would go on from the parent's
    # (the same value as ``mine``'s first half, or one below it).
    assert abs(int(child[3:11], 16) - int(before[3:11], 16)) > 16
    assert child != mine


async def test_a_sessions_record_ids_increase_in_seq_order() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, stepping(5)) as s:
            await s.submit("go")
            await s.wait_idle()
            records = [r async for r in journal.read(s.id)]
    # ev_ and exe_ ids draw from one count: compare the digits after the prefix.
    loops = [r.id[r.id.index("_") + 1 :] for r in records]
    assert len(loops) > 20
    # Ids chosen before their commit (a message's, named by its calls) may
    # come a little out of seq order; random ids would ascend half the time.
    ascending = sum(a < b for a, b in itertools.pairwise(loops))
    assert ascending >= 0.85 * (len(loops) - 1)


def _fingerprint(system: str, messages: list[Message], tools: list[ToolSchema], mt: int) -> str:
    # The rule written out: the history chain's head, then system, tools, max_tokens.
    encode = msgspec.msgpack.Encoder().encode
    head = b""
    for m in messages:
        head = hashlib.blake2b(head + encode(m), digest_size=8).digest()
    return hashlib.blake2b(head + encode((system, tuple(tools), mt)), digest_size=8).hexdigest()


def test_a_request_fingerprint_follows_each_of_its_parts() -> None:
    one = ToolSchema(name="a", description="A.", input_schema={"type": "object"})
    two = ToolSchema(name="b", description="B.", input_schema={"type": "object"})
    messages = [Message(role="user", blocks=(Text(text="hi"),))]
    builder = RequestBuilder()
    seen = set()
    for system, tools, mt in [
        ("s", [one], 100),
        ("s", [one], 100),  # the same parts again: the encoding kept
        ("t", [one], 100),
        ("t", [one, two], 100),
        ("t", [two], 100),
        # An equal schema that is another object: encoded anew, same print.
        ("t", [ToolSchema(name="b", description="B.", input_schema={"type": "object"})], 100),
        ("t", [two], 200),
    ]:
        request, fp = builder.build(system=system, messages=messages, tools=tools, max_tokens=mt)
        assert fp == _fingerprint(system, messages, tools, mt)
        assert request.tools == tuple(tools)
        assert (request.system, request.max_tokens) == (system, mt)
        seen.add(fp)
        messages = [*messages, Message(role="assistant", blocks=(Text(text="ok"),))]
    assert len(seen) == 7


def test_unchanged_tools_are_encoded_once() -> None:
    schema = ToolSchema(name="a", description="A.", input_schema={"type": "object"})
    builder = RequestBuilder()
    messages = [Message(role="user", blocks=(Text(text="hi"),))]
    first, _ = builder.build(system="s", messages=messages, tools=[schema], max_tokens=10)
    again, _ = builder.build(system="s", messages=messages, tools=[schema], max_tokens=10)
    # The held tuple (and its encoding) serves the second request.
    assert again.tools is first.tools
    other, _ = builder.build(system="s", messages=messages, tools=[schema], max_tokens=11)
    assert other.tools is not first.tools


class _CallerSteps(trio.abc.Instrument):
    """Counts the task steps of one task (the caller's)."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def test_a_submit_wakes_its_caller_once() -> None:
    """The sender of a command is woken by its reply alone: the mailbox's put
    is no second checkpoint (it cost every command's sender a task step)."""
    turns = 20
    async with open_journal("memory:") as journal:
        async with Session.create(journal, stepping(1)) as s:
            counted = _CallerSteps(trio.lowlevel.current_task())
            trio.lowlevel.add_instrument(counted)
            submits = 0
            for _ in range(turns):
                before = counted.steps
                await s.submit("go")
                submits += counted.steps - before
                await s.wait_idle()
            trio.lowlevel.remove_instrument(counted)
            assert (await s.snapshot()).turn_index == turns
    assert submits == turns


async def test_a_turn_binds_its_logger_only_for_a_line_that_is_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Binding the loop's logger and running structlog's processors cost more
    than a step's fold: the line every turn ends with is made only when the
    standard logger the loop writes to keeps debug lines."""
    binds = 0
    real = Loop.log

    def counted(self: Loop) -> Any:
        nonlocal binds
        binds += 1
        return real.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(Loop, "log", property(counted))
    wrapper = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        async with open_journal("memory:") as journal:
            async with Session.create(journal, stepping(1)) as s:
                caplog.set_level(logging.WARNING, logger="loopruntime.actor")
                with structlog.testing.capture_logs() as quiet:
                    await s.submit("go")
                    await s.wait_idle()
                assert binds == 0 and quiet == []
                caplog.set_level(logging.DEBUG, logger="loopruntime.actor")
                with structlog.testing.capture_logs() as kept:
                    await s.submit("again")
                    await s.wait_idle()
    finally:
        structlog.configure(wrapper_class=wrapper)
    assert binds == 1
    assert [e["event"] for e in kept] == ["turn_finished"]
    assert kept[0]["turn"] == 2 and kept[0]["outcome"] == "completed"


def _history(n: int) -> list[Message]:
    return [
        Message(role="assistant" if i % 2 else "user", blocks=(Text(text=f"m{i}"),))
        for i in range(n)
    ]


async def test_each_model_call_receives_the_merged_history_of_its_moment() -> None:
    definition = stepping(6)
    model = definition.model
    assert isinstance(model, ScriptedModel)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("go")
            await s.wait_idle()
            history = (await s.snapshot()).messages
    # Read after the whole turn: what each call was sent has not moved since.
    assert len(model.requests) == 7
    for i, request in enumerate(model.requests):
        # The question, then a reply and its results per step before it.
        sent = merged(history[: 1 + 2 * i])
        assert request.messages == sent and sent == request.messages
        assert tuple(request.messages) == sent
        assert [m.role for m in request.messages] == ["user", "assistant"] * i + ["user"]


def test_a_merge_into_a_lent_message_leaves_the_earlier_request_as_it_was() -> None:
    ask = Message(role="user", blocks=(Text(text="first"),))
    more = Message(role="user", blocks=(Text(text="second"),))
    builder = RequestBuilder()
    first, _ = builder.build(system="s", messages=[ask], tools=[], max_tokens=10)
    # The model call failed and the user spoke again: one user message, merged.
    second, _ = builder.build(system="s", messages=[ask, more], tools=[], max_tokens=10)
    assert first.messages == (ask,)
    assert second.messages == merged([ask, more])
    assert second.messages[0].blocks == (*ask.blocks, *more.blocks)
    # The builder goes on from its copy: later appends reach only later requests.
    reply = Message(role="assistant", blocks=(Text(text="ok"),))
    third, _ = builder.build(system="s", messages=[ask, more, reply], tools=[], max_tokens=10)
    assert len(second.messages) == 1 and len(third.messages) == 2
    assert third.messages[:1] == second.messages[:1]


def test_a_request_is_plain_data_msgspec_encodes() -> None:
    """A recording model or a log line encodes the request as it is."""
    builder = RequestBuilder()
    history = _history(5)
    request, _ = builder.build(system="s", messages=history, tools=[], max_tokens=10)
    assert type(request.messages) is tuple and request.messages == merged(history)
    decoded = msgspec.json.decode(msgspec.json.encode(request), type=ModelRequest)
    assert decoded == request
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(request), type=ModelRequest) == request
