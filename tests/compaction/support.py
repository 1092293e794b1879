"""Compactors and helpers shared by the compaction tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from journal import Journal, Record
from journal.content import Message, Text
from journal.events import CompactionCommitted, CompactionRejected, Event
from loopruntime.errors import ModelError
from loopruntime.model import Model
from loopruntime.summary import SECTIONS
from session import Session
from tests.support.loops import events_of


def summary(goal: str = "ship the release", state: str = "tests pass", **rest: str) -> str:
    """A valid summary text; sections given raw (already escaped)."""
    body = {"goal": goal, "constraints": "", "decisions": "", "state": state, "open_items": ""}
    body.update(rest)
    inner = "\n".join(f"<{s}>{body[s]}</{s}>" for s in SECTIONS)
    return f"<conversation_summary>\n{inner}\n</conversation_summary>"


class Call:
    """One ``summarize`` call as the compactor saw it."""

    def __init__(self, messages: Sequence[Message], obligations: Sequence[str], model: Model):
        self.messages = list(messages)
        self.obligations = list(obligations)
        self.model = model


class TestCompactor:
    """Answers with ``text`` after ``delay`` seconds of trio time, or raises
    ``error``.  Records every call."""

    __test__ = False  # not a pytest class

    def __init__(
        self, text: str | Any = "", *, delay: float = 0.0, error: BaseException | None = None
    ) -> None:
        self.text = text
        self.delay = delay
        self.error = error
        self.calls: list[Call] = []
        self.entered = trio.Event()

    async def summarize(
        self, messages: Sequence[Message], obligations: Sequence[str], *, model: Model
    ) -> str:
        self.calls.append(Call(messages, obligations, model))
        self.entered.set()
        if self.delay:
            await trio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.text


def overloaded() -> ModelError:
    return ModelError("the compaction model is overloaded", kind="overloaded", retryable=True)


async def wait_for(session: Session, kind: type[Event], *, after: int = 0) -> Record:
    """The first record of ``kind`` after seq ``after`` (waits for it)."""
    async for item in session.subscribe(after=after):
        if isinstance(item, Record) and isinstance(item.event, kind):
            return item
    raise AssertionError(f"the session closed before a {kind.__name__} record")


async def outcome(journal: Journal, session_id: str) -> CompactionCommitted | CompactionRejected:
    """The end record of the session's only compaction attempt."""
    ends = [
        *await events_of(journal, session_id, CompactionCommitted),
        *await events_of(journal, session_id, CompactionRejected),
    ]
    assert len(ends) == 1, ends
    return ends[0]


def texts(message: Message) -> list[str]:
    return [b.text for b in message.blocks if isinstance(b, Text)]
