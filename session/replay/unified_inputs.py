"""What each model call's input was made of: the unified model's manifests.

The fold builds a loop's model context; this pass folds each stream again and
remembers which record put each message there, so a call's input is named by
the records (and the document's nodes) it was built from, exactly as the fold
held it when the call started.  The node ids follow ``unified_builder``'s.
"""

from __future__ import annotations

from collections.abc import Container
from typing import NamedTuple

import msgspec

from journal import JournalError, Record
from journal.content import Message, ToolResult
from journal.events import (
    CHECKPOINT_STREAM,
    CompactionCommitted,
    HookDecided,
    InputQueued,
    ModelCallStarted,
    ModelMessageCommitted,
    SessionForked,
    SteerApplied,
    SteerQueued,
    ToolAbandoned,
    ToolCompleted,
    ToolResolved,
    TurnStarted,
)
from loopruntime import LoopState, fold
from loopruntime.host import FoldError, copy_state

from ..embedded.checkpoints import fork_base


class Source(NamedTuple):
    """A record that put (part of) a message into the context, and its node."""

    seq: int
    node: str


class CallInput(msgspec.Struct, kw_only=True):
    """A call's input as the fold held it when the call started."""

    after: str | None
    inherited: bool
    sources: list[Source]
    fingerprint: str


def injection_id(loop: str, seq: int) -> str:
    """The node of context the runtime injected, by the record that holds it."""
    return f"injection:{loop}:{seq}"


def steer_id(loop: str, steer: str) -> str:
    return f"steer:{loop}:{steer}"


class _StreamInputs:
    """One loop's context, with the source of every message in it."""

    def __init__(self, loop: str, state: LoopState, reminders: Container[str]) -> None:
        self.loop = loop
        self.state = state
        self.reminders = reminders
        self.sources: dict[int, list[Source]] = {}
        """id() of a message -> the records it came from."""
        self.held: list[Message] = list(state.messages)
        """Every message ever seen, so no id() is reused while this pass runs."""
        self.inherited = {id(m) for m in state.messages}
        self.steers: dict[str, Source] = {}
        self.results: dict[str, int] = {}
        """tool_use id -> the seq of the record that answered it."""
        self.summary: str | None = None

    def feed(self, r: Record, calls: dict[str, CallInput]) -> None:
        e = r.event
        self.expect(r)
        before = self.state.messages
        count = len(before)
        # A hook's rewrite replaces a message in place: it keeps its source.
        by_index = [id(m) for m in before] if isinstance(e, HookDecided) else []
        try:
            fold(self.state, r)
        except FoldError:
            return  # the checker reports it; the manifests show what the fold holds
        after = self.state.messages
        fresh = after[count:] if after is before and not by_index else after
        for index, message in enumerate(fresh):
            if id(message) in self.sources or id(message) in self.inherited:
                continue
            self.held.append(message)
            was = by_index[index] if index < len(by_index) else None
            if was in self.inherited:
                self.inherited.add(id(message))
            elif was in self.sources:
                self.sources[id(message)] = self.sources[was]
            else:
                self.sources[id(message)] = self.made_by(r, message)
        if isinstance(e, ModelCallStarted):
            calls[e.effect_id] = self.call_input(e)

    def expect(self, r: Record) -> None:
        """Remember the sources of messages a record carries before the fold
        moves them into the context (now or at a later record)."""
        e = r.event
        if isinstance(e, InputQueued):
            for message in e.messages:
                self.held.append(message)
                self.sources[id(message)] = [Source(r.seq, f"input:{self.loop}:{e.input_id}")]
        elif isinstance(e, SteerQueued):
            node = (
                injection_id(self.loop, r.seq)
                if e.steer_id in self.reminders
                else steer_id(self.loop, e.steer_id)
            )
            self.steers[e.steer_id] = Source(r.seq, node)
        elif isinstance(e, ModelMessageCommitted):
            self.held.append(e.message)
            self.sources[id(e.message)] = [Source(r.seq, f"call:{self.loop}:{e.effect_id}")]
        elif isinstance(e, CompactionCommitted):
            self.summary = f"summary:{e.attempt_id}"
            self.held.append(e.summary)
            self.sources[id(e.summary)] = [Source(r.seq, self.summary)]
        elif isinstance(e, ToolCompleted | ToolResolved | ToolAbandoned):
            self.results[e.tool_use_id] = r.seq

    def made_by(self, r: Record, message: Message) -> list[Source]:
        """The sources of a message the fold wrote at ``r``."""
        e = r.event
        if isinstance(e, TurnStarted | SteerApplied):
            return [self.steers[s] for s in e.steer_ids if s in self.steers]
        if isinstance(e, HookDecided):
            return [Source(r.seq, injection_id(self.loop, r.seq))]
        uses = [b.tool_use_id for b in message.blocks if isinstance(b, ToolResult)]
        if uses:
            return [
                Source(self.results.get(u, r.seq), f"step:{self.loop}:{u or r.seq}") for u in uses
            ]
        return [Source(r.seq, "")]

    def call_input(self, e: ModelCallStarted) -> CallInput:
        sources: list[Source] = []
        inherited = False
        for message in self.state.messages:
            if id(message) in self.inherited:
                inherited = True
            sources.extend(self.sources.get(id(message), ()))
        return CallInput(
            after=self.summary, inherited=inherited, sources=sources, fingerprint=e.fingerprint
        )


def read_call_inputs(records: list[Record], reminders: Container[str]) -> dict[str, CallInput]:
    """effect id -> what that model call's input was made of.

    ``reminders``: the steer ids the runtime wrote (``unified_facts``)."""
    streams: dict[str, _StreamInputs] = {}
    base: dict[str, LoopState] = {}
    calls: dict[str, CallInput] = {}
    forked = False
    for r in records:
        if r.loop == CHECKPOINT_STREAM:
            forked = forked or (r.seq == 1 and isinstance(r.event, SessionForked))
            if forked and r.seq == 2:
                try:
                    base = fork_base(r)
                except JournalError:
                    pass  # the checker reports it; the streams fold from nothing
            continue
        stream = streams.get(r.loop)
        if stream is None:
            start = base.get(r.loop)
            state = copy_state(start) if start is not None else LoopState()
            stream = streams[r.loop] = _StreamInputs(r.loop, state, reminders)
        stream.feed(r, calls)
    return calls
