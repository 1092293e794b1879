"""Driving a model adapter from a test: one call's deltas, its error, the
assembled reply, and one turn of a session over it.  The adapters' tests
share these so that each says only what its provider does differently."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from journal import open_journal
from journal.content import Message, Text
from journal.events import Event, ModelMessageCommitted, TurnEnded
from loopruntime import TRUNCATED_NOTICE, LoopDefinition, LoopState, ToolContext, tool
from loopruntime.errors import ModelError
from loopruntime.model import Accumulator, Delta, Model, ModelRequest
from session import Session
from session.replay import CheckReport, check

HELLO = ModelRequest(
    system="Be brief.", messages=(Message(role="user", blocks=(Text(text="hi"),)),)
)
"""The smallest request: a system prompt and one user message."""


async def collect(model: Model, request: ModelRequest = HELLO) -> list[Delta]:
    """Every delta of one call that ends well."""
    out: list[Delta] = []
    async with model.stream(request) as deltas:
        async for delta in deltas:
            out.append(delta)
    return out


async def collect_until_error(
    model: Model, request: ModelRequest = HELLO
) -> tuple[list[Delta], ModelError]:
    """The deltas of one call that fails, and the ``ModelError`` it ends with."""
    out: list[Delta] = []
    with pytest.raises(ModelError) as caught:
        async with model.stream(request) as deltas:
            async for delta in deltas:
                out.append(delta)
    return out, caught.value


def assemble(deltas: list[Delta]) -> Accumulator:
    """The reply the deltas make, as the turn assembles it."""
    acc = Accumulator()
    acc.feed_all(deltas)
    return acc


async def one_turn_records(model: Model, prompt: str) -> list[Event]:
    """The events a session over ``model`` records for one turn on ``prompt``,
    in a memory journal."""
    definition = LoopDefinition(name="adapter", model=model)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit(prompt)
            await s.wait_idle()
        return [r.event async for r in journal.read(s.id)]


@tool(permission="allow")
async def weather(ctx: ToolContext, *, city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: sunny"


class WeatherTurn(NamedTuple):
    """What one turn with the ``weather`` tool left behind."""

    state: LoopState
    report: CheckReport
    stored: bytes
    """Every record's id and event as text: what a key must never appear in."""


async def weather_turn(model: Model) -> WeatherTurn:
    """One turn asking for Oslo's weather with the ``weather`` tool offered,
    the session verified and its journal checked."""
    definition = LoopDefinition(name="adapter", model=model, system="Be brief.", tools=[weather])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("Weather in Oslo?")
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        report = await check(journal, s.id)
        stored = b"".join(
            [r.id.encode() + repr(r.event).encode() async for r in journal.read(s.id)]
        )
    return WeatherTurn(state, report, stored)


def assert_cut_short(records: list[Event], shown: str) -> None:
    """The turn of ``records`` failed on a stream that died after showing
    ``shown``: the reply keeps it, marked truncated."""
    [message] = [e for e in records if isinstance(e, ModelMessageCommitted)]
    assert message.notice == "truncated"
    assert message.message.blocks == (Text(text=shown), Text(text=TRUNCATED_NOTICE))
    [ended] = [e for e in records if isinstance(e, TurnEnded)]
    assert ended.outcome == "failed" and ended.kind == "model"
