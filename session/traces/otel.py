"""OpenTelemetry traces from a session's records (the optional extra ``otel``).

* ``SpanBuilder`` is pure: records in, finished spans out, following the
  OpenTelemetry GenAI conventions: ``invoke_agent`` per turn (the model's
  ``run``, or the parts a compaction cut it into), ``chat`` per ``llm.call``,
  ``execute_tool`` per tool use; gates and their reviews, hook decisions,
  notices, compactions, mode changes and unknown effects are span events.
* The trace's structure is the unified model's, never its own: a span's
  parent is read, when it closes, from the fold the model's spine is named
  from (``replay.TreeFold``): a step under the turn span of the run that holds
  it; a child stream's runs under the ``execute_tool`` span of the call that
  ``starts`` the stream (docs/traces.md, "Structure").
* A span is finished by the record that closes it, once.  Its ids are derived
  from the session, loop and record ids alone, so the same journal always
  gives the same trace: a restored session's spans (or an export made later
  from the journal) land in the trace the first process started.
* ``Exporter`` hands the finished spans to an SDK ``TracerProvider``, live
  (``follow``) or from the journal (``export``).  Message content is left out
  unless ``capture_content``.
* Who gave a command (its principal) is ``enduser.id``: on the turn its
  input started, on a gate's resolution, on an unknown outcome's resolution
  (whose tool span also gets ``loopruntime.resolved_principal``); an
  interrupt's is ``loopruntime.interrupted_by`` on the turn it ended.

The module is one piece: ``SpanBuilder`` dispatches every kind of record in
one ``match`` to a method per part of the trace (turns, model calls, tool
calls, gates, markers), all sharing the spans still open, and the exporter
is the thin shell that feeds it.

docs/traces.md tells the whole story.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, assert_never

import msgspec
import trio
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from journal import JournalError, Record
from journal import events as ev
from journal.content import Message, Text, Thinking, ToolResult, ToolUse

from ..embedded.checkpoints import fork_base
from ..embedded.runtime import Session
from ..replay import TreeFold

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "Exporter",
    "FinishedSpan",
    "SpanBuilder",
    "otlp_json",
    "provider_of",
    "send_otlp",
    "service_resource",
    "span_id_of",
    "spans_of",
    "trace_id_of",
]

_SCOPE = "loopruntime"


def trace_id_of(session_id: str) -> int:
    """The trace of a session: 128 bits derived from its id (never 0)."""
    return _derive(16, "trace", session_id) or 1


def span_id_of(session_id: str, *parts: str) -> int:
    """A span's id: 64 bits derived from the session and what the span is for."""
    return _derive(8, "span", session_id, *parts) or 1


def _derive(size: int, *parts: str) -> int:
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=size).digest()
    return int.from_bytes(digest, "big")


@dataclass
class FinishedSpan:
    """A span as the journal gives it, ready for any tracer."""

    name: str
    span_id: int
    parent_id: int | None
    start: int
    end: int
    kind: SpanKind
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    """The status description of a span that ended in error (None: ok)."""
    closed_by: int = 0
    """seq of the record that closed it."""
    shows: tuple[str, str, str] = ("", "", "")
    """What of the unified model it shows, as (what, loop, key): a run
    (``turn``, its turn), an ``llm.call`` (``call``, its effect id) or a tool
    use (``tool``, its tool_use id); its parent is read from there."""


@dataclass
class _Loop:
    definition: str = ""
    model: str = ""
    turn: FinishedSpan | None = None
    held: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    """Events between turns: they go on the next turn's span."""


class SpanBuilder:
    """Records of one session, in seq order, in; finished spans out (pure).

    ``feed`` returns the spans the record closes.  A span still open at the
    last record fed (a running turn) is not returned: a later record closes
    it.  Records of other streams (checkpoints, collaborations) add nothing."""

    def __init__(self, session_id: str, *, capture_content: bool = False) -> None:
        self.session = session_id
        self.capture_content = capture_content
        self.loops: dict[str, _Loop] = {}
        self.calls: dict[str, FinishedSpan] = {}
        self.tools: dict[str, FinishedSpan] = {}
        self.inputs: dict[str, tuple[Message, ...]] = {}
        self.principals: dict[str, str] = {}
        """input id -> who queued it, until a turn takes it."""
        self.forked: ev.SessionForked | None = None
        self.structure = TreeFold(session_id, statuses=False)
        """Where the unified model places each run and step (its spine's fold)."""

    def _span_id(self, *parts: str) -> int:
        return span_id_of(self.session, *parts)

    def _parent(self, span: FinishedSpan) -> int | None:
        """The span's parent, read from the model: a call's or a tool's is the
        turn span of the run that holds it; a run's (and a step the model puts
        in no run) is the execute_tool span of the call that ``starts`` its
        stream, or none (cross-stream ``starts`` drawn as OpenTelemetry's
        parent: docs/decisions.md)."""
        what, loop, key = span.shows
        run = None
        if what == "call":
            run = self.structure.run_of_call(loop, key)
        elif what == "tool":
            run = self.structure.run_of_tool(loop, key)
        if run is not None:
            return self._span_id("turn", loop, str(run.turn))
        starter = self.structure.starter_of(loop)
        if starter is None:
            return None
        parent_loop, step = starter
        return self._span_id("tool", parent_loop, step.execution_id)

    def _close(self, span: FinishedSpan, r: Record) -> FinishedSpan:
        span.parent_id = self._parent(span)
        return _close(span, r)

    def _event(self, loop: _Loop, name: str, at: int, attributes: dict[str, Any]) -> None:
        if loop.turn is not None:
            loop.turn.events.append((name, at, attributes))
        else:
            loop.held.append((name, at, attributes))

    def feed(self, r: Record) -> list[FinishedSpan]:
        self.structure.feed(r)
        return self._feed(r)

    def _feed(self, r: Record) -> list[FinishedSpan]:
        e = r.event
        if r.loop == ev.CHECKPOINT_STREAM:
            if isinstance(e, ev.SessionForked) and r.seq == 1:
                self.forked = e
            elif r.seq == 2 and self.forked is not None:
                self._start_fork(r)
            return []
        loop = self.loops.setdefault(r.loop, _Loop())
        done: list[FinishedSpan] = []
        match e:
            case ev.LoopStarted() | ev.InputQueued():
                self._loop_input(r, e, loop)
            case ev.TurnStarted() | ev.TurnEnded():
                self._turn(r, e, loop, done)
            case ev.ModelCallStarted() | ev.ModelMessageCommitted() | ev.ModelCallFailed():
                self._model_call(r, e, loop, done)
            case ev.ToolStarted() | ev.ToolCompleted():
                self._tool_call(r, e, loop, done)
            case ev.ToolAbandoned() | ev.ToolResolved():
                self._unsettled_call(r, e, loop, done)
            case ev.ToolProgress():
                self._progress(r, e)
            case (
                ev.GateOpened()
                | ev.GateResolved()
                | ev.GateCancelled()
                | ev.GateReviewed()
                | ev.HookDecided()
            ):
                self._gate(r, e, loop)
            case (
                ev.Notice()
                | ev.CompactionCommitted()
                | ev.CompactionRejected()
                | ev.LoopModeChanged()
                | ev.LoopPaused()
                | ev.LoopResumed()
                | ev.ChildFinished()
            ):
                self._marker(r, e, loop)
            case (
                ev.InputCancelled()
                | ev.SteerQueued()
                | ev.SteerApplied()
                | ev.TurnRejected()
                | ev.CommandKeyed()
                | ev.ModelOutput()
                | ev.ContextMeasured()
                | ev.ToolsLoaded()
                | ev.DeadlinePassed()
                | ev.CompactionStarted()
                | ev.LoopStopped()
                | ev.LoopConfigured()
                | ev.LoopReconfigured()
                | ev.LoopInferenceChanged()
                | ev.LoopToolsReplaced()
                | ev.ChildStarted()
                | ev.SessionLevelEvent()
            ):
                pass  # input bookkeeping, stream pieces, measures: no span, no event
            case _:
                assert_never(e)
        return done

    def _loop_input(self, r: Record, e: ev.LoopStarted | ev.InputQueued, loop: _Loop) -> None:
        """A loop's definition and parent; who queued an input, and what it said."""
        match e:
            case ev.LoopStarted():
                loop.definition, loop.model = e.definition, e.model
            case ev.InputQueued():
                if self.capture_content:
                    self.inputs[e.input_id] = e.messages
                if e.principal is not None:
                    self.principals[e.input_id] = e.principal
            case _:
                assert_never(e)

    def _turn(
        self, r: Record, e: ev.TurnStarted | ev.TurnEnded, loop: _Loop, done: list[FinishedSpan]
    ) -> None:
        """A turn's ``invoke_agent`` span: opened, closed."""
        match e:
            case ev.TurnStarted():
                attributes: dict[str, Any] = {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": loop.definition,
                    "gen_ai.agent.id": r.loop,
                    "gen_ai.conversation.id": self.session,
                    "loopruntime.turn": e.turn,
                }
                who = [p for i in e.input_ids if (p := self.principals.pop(i, None))]
                if who:
                    attributes["enduser.id"] = who[0]
                if self.forked is not None:
                    attributes["loopruntime.forked_from"] = self.forked.source
                    attributes["loopruntime.forked_at"] = self.forked.seq
                if self.capture_content:
                    messages = [m for i in e.input_ids for m in self.inputs.pop(i, ())]
                    attributes["gen_ai.input.messages"] = _messages_json(messages)
                loop.turn = FinishedSpan(
                    name=f"invoke_agent {loop.definition}",
                    span_id=self._span_id("turn", r.loop, str(e.turn)),
                    parent_id=None,
                    shows=("turn", r.loop, str(e.turn)),
                    start=r.at,
                    end=0,
                    kind=SpanKind.INTERNAL,
                    attributes=attributes,
                    events=loop.held,
                )
                loop.held = []
            case ev.TurnEnded():
                turn = loop.turn
                if turn is not None:
                    turn.attributes["loopruntime.outcome"] = e.outcome
                    if e.principal is not None:
                        turn.attributes["loopruntime.interrupted_by"] = e.principal
                    if e.outcome in ("failed", "crashed"):
                        _fail(turn, e.code or e.outcome)
                    done.append(self._close(turn, r))
                    loop.turn = None
            case _:
                assert_never(e)

    def _model_call(
        self,
        r: Record,
        e: ev.ModelCallStarted | ev.ModelMessageCommitted | ev.ModelCallFailed,
        loop: _Loop,
        done: list[FinishedSpan],
    ) -> None:
        """A model call's ``chat`` span: opened, closed by its message or its failure."""
        match e:
            case ev.ModelCallStarted():
                self.calls[e.effect_id] = FinishedSpan(
                    name=f"chat {e.model}",
                    span_id=self._span_id("call", r.loop, e.effect_id),
                    parent_id=None,
                    shows=("call", r.loop, e.effect_id),
                    start=r.at,
                    end=0,
                    kind=SpanKind.CLIENT,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": provider_of(e.model),
                        "gen_ai.request.model": e.model,
                        "gen_ai.conversation.id": self.session,
                        "loopruntime.step": e.step,
                    },
                )
            case ev.ModelMessageCommitted():
                call = self.calls.pop(e.effect_id, None)
                if call is not None:
                    if e.usage is not None:
                        call.attributes["gen_ai.usage.input_tokens"] = e.usage.input_tokens
                        call.attributes["gen_ai.usage.output_tokens"] = e.usage.output_tokens
                    reason = e.notice or e.stop_reason
                    if reason:
                        call.attributes["gen_ai.response.finish_reasons"] = (reason,)
                    if self.capture_content:
                        call.attributes["gen_ai.output.messages"] = _messages_json([e.message])
                    done.append(self._close(call, r))
            case ev.ModelCallFailed():
                call = self.calls.pop(e.effect_id, None)
                if call is not None:
                    _fail(call, e.code, f"{e.code}: {e.detail}" if e.detail else e.code)
                    done.append(self._close(call, r))
            case _:
                assert_never(e)

    def _tool_call(
        self, r: Record, e: ev.ToolStarted | ev.ToolCompleted, loop: _Loop, done: list[FinishedSpan]
    ) -> None:
        """A tool call's ``execute_tool`` span: opened, closed (a call rejected
        before it ran is a span of no length)."""
        match e:
            case ev.ToolStarted():
                attributes = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": e.name,
                    "gen_ai.tool.call.id": e.tool_use_id,
                    "loopruntime.execution_id": e.execution_id,
                }
                if self.capture_content:
                    attributes["gen_ai.tool.call.arguments"] = json.dumps(e.input)
                self.tools[e.execution_id] = FinishedSpan(
                    name=f"execute_tool {e.name}",
                    span_id=self._span_id("tool", r.loop, e.execution_id),
                    parent_id=None,
                    shows=("tool", r.loop, e.tool_use_id),
                    start=r.at,
                    end=0,
                    kind=SpanKind.INTERNAL,
                    attributes=attributes,
                )
            case ev.ToolCompleted():
                tool = self.tools.pop(e.execution_id, None) if e.execution_id else None
                if tool is None:
                    # Rejected before it ran (denied, unknown, invalid): a span
                    # of no length, so the call still shows in the trace.
                    tool = FinishedSpan(
                        name="execute_tool",
                        span_id=self._span_id("rejected", r.loop, e.tool_use_id),
                        parent_id=None,
                        shows=("tool", r.loop, e.tool_use_id),
                        start=r.at,
                        end=0,
                        kind=SpanKind.INTERNAL,
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.call.id": e.tool_use_id,
                        },
                    )
                tool.attributes["loopruntime.disposition"] = e.disposition
                if e.disposition != "succeeded":
                    _fail(tool, e.disposition)
                if self.capture_content:
                    tool.attributes["gen_ai.tool.call.result"] = _result_text(e.content)
                done.append(self._close(tool, r))
            case _:
                assert_never(e)

    def _progress(self, r: Record, e: ev.ToolProgress) -> None:
        """A running call's report: an event on its ``execute_tool`` span."""
        tool = self.tools.get(e.execution_id)
        if tool is None:
            return  # a report of a call whose start this trace never saw
        attributes: dict[str, Any] = {"loopruntime.progress.message": e.message}
        if e.fraction is not None:
            attributes["loopruntime.progress.fraction"] = e.fraction
        if e.coalesced:
            attributes["loopruntime.progress.coalesced"] = e.coalesced
        tool.events.append(("loopruntime.tool.progress", r.at, attributes))

    def _unsettled_call(
        self,
        r: Record,
        e: ev.ToolAbandoned | ev.ToolResolved,
        loop: _Loop,
        done: list[FinishedSpan],
    ) -> None:
        """A tool call cut short: closed when interrupted, left open while its
        outcome is unknown, closed by its resolution."""
        match e:
            case ev.ToolAbandoned():
                attributes = {
                    "loopruntime.execution_id": e.execution_id,
                    "gen_ai.tool.call.id": e.tool_use_id,
                    "loopruntime.reason": e.reason,
                }
                tool = self.tools.get(e.execution_id)
                if e.reason == "interrupted":
                    self._event(loop, "loopruntime.tool.interrupted", r.at, attributes)
                    if tool is not None:
                        del self.tools[e.execution_id]
                        _fail(tool, "interrupted")
                        done.append(self._close(tool, r))
                else:
                    # Unknown until the host resolves it: the span stays open.
                    self._event(loop, "loopruntime.unknown_effect", r.at, attributes)
                    if tool is not None:
                        tool.events.append(("loopruntime.unknown_effect", r.at, attributes))
            case ev.ToolResolved():
                attributes = {"loopruntime.execution_id": e.execution_id, "loopruntime.by": e.by}
                if e.principal is not None:
                    attributes["enduser.id"] = e.principal
                self._event(loop, "loopruntime.unknown_effect.resolved", r.at, attributes)
                tool = self.tools.pop(e.execution_id, None)
                if tool is not None:
                    tool.attributes["loopruntime.resolved_by"] = e.by
                    if e.principal is not None:
                        tool.attributes["loopruntime.resolved_principal"] = e.principal
                    if e.is_error:
                        _fail(tool, "resolved_as_error", "resolved as an error")
                    if self.capture_content:
                        tool.attributes["gen_ai.tool.call.result"] = _result_text(e.content)
                    done.append(self._close(tool, r))
            case _:
                assert_never(e)

    def _gate(
        self,
        r: Record,
        e: ev.GateOpened | ev.GateResolved | ev.GateCancelled | ev.GateReviewed | ev.HookDecided,
        loop: _Loop,
    ) -> None:
        """Gates, their reviews and hook decisions: events of the turn."""
        match e:
            case ev.GateOpened():
                self._event(
                    loop,
                    "loopruntime.gate.opened",
                    r.at,
                    {
                        "loopruntime.gate_id": e.gate_id,
                        "loopruntime.gate.kind": e.kind,
                        "gen_ai.tool.name": e.tool_name,
                        "loopruntime.execution_id": e.execution_id,
                    }
                    | ({"loopruntime.gate.prompt": e.prompt} if self.capture_content else {}),
                )
            case ev.GateResolved():
                attributes: dict[str, Any] = {
                    "loopruntime.gate_id": e.gate_id,
                    "loopruntime.gate.kind": e.kind,
                }
                if e.allow is not None:
                    attributes["loopruntime.gate.allow"] = e.allow
                    attributes["loopruntime.gate.scope"] = e.scope or ""
                if e.answer is not None and self.capture_content:
                    attributes["loopruntime.gate.answer"] = e.answer
                if e.principal is not None:
                    attributes["enduser.id"] = e.principal
                self._event(loop, "loopruntime.gate.resolved", r.at, attributes)
            case ev.GateCancelled():
                self._event(
                    loop,
                    "loopruntime.gate.cancelled",
                    r.at,
                    {"loopruntime.gate_id": e.gate_id, "loopruntime.reason": e.reason},
                )
            case ev.GateReviewed():
                self._event(
                    loop,
                    "loopruntime.gate.reviewed",
                    r.at,
                    {
                        "loopruntime.classifier": e.classifier,
                        "loopruntime.verdict": e.verdict,
                        "loopruntime.failed": e.failed,
                        "gen_ai.tool.name": e.tool_name,
                        "gen_ai.tool.call.id": e.tool_use_id,
                    }
                    | ({"loopruntime.reason": e.reason} if self.capture_content else {}),
                )
            case ev.HookDecided():
                self._event(
                    loop,
                    "loopruntime.hook.decided",
                    r.at,
                    {
                        "loopruntime.hook": e.hook,
                        "loopruntime.hook.point": e.point,
                        "loopruntime.hook.action": e.action,
                        "gen_ai.tool.call.id": e.tool_use_id,
                    }
                    | ({"loopruntime.reason": e.reason} if self.capture_content else {}),
                )
            case _:
                assert_never(e)

    def _marker(
        self,
        r: Record,
        e: ev.Notice
        | ev.CompactionCommitted
        | ev.CompactionRejected
        | ev.LoopModeChanged
        | ev.LoopPaused
        | ev.LoopResumed
        | ev.ChildFinished,
        loop: _Loop,
    ) -> None:
        """What else a reader of the trace wants marked: events of the turn."""
        match e:
            case ev.Notice():
                self._event(
                    loop,
                    "loopruntime.notice",
                    r.at,
                    {"loopruntime.notice.code": e.code, "loopruntime.notice.refs": e.refs}
                    | ({"loopruntime.notice.text": e.text} if self.capture_content else {}),
                )
            case ev.CompactionCommitted():
                self._event(
                    loop,
                    "loopruntime.compaction.committed",
                    r.at,
                    {
                        "loopruntime.compaction.replaced": e.replaced,
                        "loopruntime.compaction.retained": e.retained,
                    },
                )
            case ev.CompactionRejected():
                self._event(
                    loop,
                    "loopruntime.compaction.rejected",
                    r.at,
                    {"loopruntime.reason": e.reason},
                )
            case ev.LoopModeChanged():
                self._event(
                    loop, "loopruntime.mode_changed", r.at, {"loopruntime.mode": e.mode or ""}
                )
            case ev.LoopPaused() | ev.LoopResumed():
                name = "paused" if isinstance(e, ev.LoopPaused) else "resumed"
                who = {"loopruntime.principal": e.principal} if e.principal is not None else {}
                self._event(loop, f"loopruntime.loop.{name}", r.at, who)
            case ev.ChildFinished():
                self._event(
                    loop,
                    "loopruntime.child.finished",
                    r.at,
                    {"gen_ai.agent.id": e.child_loop, "loopruntime.outcome": e.status},
                )
            case _:
                assert_never(e)

    def _start_fork(self, r: Record) -> None:
        """A fork's loops come from its base (seq 2), not from ``loop.started``;
        a turn, model call or tool call open there goes on in the fork, so its
        span starts where the fork does."""
        try:
            base = fork_base(r)
        except JournalError:
            return  # the checker reports it; the spans go without the base
        for loop_id, state in base.items():
            loop = self.loops.setdefault(loop_id, _Loop())
            loop.definition, loop.model = state.definition, state.model
            # What was open there is open in the fork: its spans start at the fork.
            opened: list[Any] = []
            if state.turn_open:
                opened.append(ev.TurnStarted(turn=state.turn_index))
            if state.open_call is not None:
                opened.append(
                    ev.ModelCallStarted(
                        effect_id=state.open_call,
                        turn=state.turn_index,
                        step=state.step,
                        model=state.model,
                    )
                )
            opened.extend((*state.running.values(), *state.unknown.values()))
            for event in opened:
                # The spans only: the model's fold read the fork's own records.
                self._feed(msgspec.structs.replace(r, loop=loop_id, event=event))

    def feed_all(self, records: Iterable[Record]) -> list[FinishedSpan]:
        return [span for r in records for span in self.feed(r)]


def provider_of(model: str) -> str:
    """``gen_ai.provider.name`` of a model's name: the part before its first
    colon, as the adapters name their models ("anthropic" for
    ``anthropic:claude-...``, "scripted" for ``scripted:demo``), else the
    whole name ("scripted"); "_OTHER" for an empty one."""
    return model.partition(":")[0] or "_OTHER"


def _fail(span: FinishedSpan, error_type: str, description: str | None = None) -> None:
    """A span that ended in error: its status and the ``error.type`` the
    conventions ask for beside it (a short, low-cardinality code)."""
    span.attributes["error.type"] = error_type
    span.error = description or error_type


def _close(span: FinishedSpan, r: Record) -> FinishedSpan:
    span.end = max(r.at, span.start)
    span.closed_by = r.seq
    return span


def _result_text(blocks: Sequence[Any]) -> str:
    return " ".join(b.text for b in blocks if isinstance(b, Text))


def _messages_json(messages: Sequence[Message]) -> str:
    """Messages in the conventions' JSON shape (role and parts)."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        for b in m.blocks:
            if isinstance(b, Text):
                parts.append({"type": "text", "content": b.text})
            elif isinstance(b, Thinking):
                parts.append({"type": "reasoning", "content": b.thinking})
            elif isinstance(b, ToolUse):
                parts.append(
                    {"type": "tool_call", "id": b.id, "name": b.name, "arguments": b.input}
                )
            elif isinstance(b, ToolResult):
                parts.append(
                    {
                        "type": "tool_call_response",
                        "id": b.tool_use_id,
                        "response": _result_text(b.content),
                    }
                )
        out.append({"role": m.role, "parts": parts})
    return msgspec.json.encode(out).decode()


class _GivenIds(IdGenerator):
    """Hands out the ids the journal decided, one span at a time."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id


class Exporter:
    """Turns a session's committed records into spans on ``tracer_provider``
    (an SDK ``TracerProvider``; None: the global one).

    ``follow`` is a session subscriber; ``export`` reads records already in
    hand (a journal).  Either way each span is handed to the provider when
    the record that closes it is fed, once per ``Exporter``.  Message
    content (inputs, replies, tool arguments and results, gate prompts and
    answers) is recorded only with ``capture_content``."""

    def __init__(self, tracer_provider: Any = None, *, capture_content: bool = False) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer(_SCOPE)
        self.capture_content = capture_content
        # The SDK's tracer takes each new span's ids from its generator: this
        # one gives the ids derived from the journal (the tracer is ours).
        self._ids = _GivenIds()
        if hasattr(self._tracer, "id_generator"):
            self._tracer.id_generator = self._ids
        self._builders: dict[str, SpanBuilder] = {}

    def export(self, session_id: str, records: Iterable[Record], *, after: int = 0) -> int:
        """Emit the spans closed by ``records`` (those with seq > ``after``:
        an earlier exporter emitted the others); returns how many."""
        builder = self._builder(session_id)
        count = 0
        for r in records:
            for span in builder.feed(r):
                if span.closed_by > after:
                    self._emit(session_id, span)
                    count += 1
        return count

    async def follow(self, session: Session, after: int | None = None) -> None:
        """Emit spans as ``session`` commits the records that close them,
        until it closes.  The history is read first (to know the spans open
        at ``after``) and only spans closed after ``after`` are emitted: pass
        the journal's head from before ``Session.restore`` so the records
        restore settles are traced too; None: the head now."""
        if after is None:
            after = await session.journal.head(session.id)
        builder = self._builder(session.id)
        async for item in session.subscribe(0):
            if not isinstance(item, Record):
                continue
            for span in builder.feed(item):
                if span.closed_by > after:
                    self._emit(session.id, span)

    def _builder(self, session_id: str) -> SpanBuilder:
        builder = self._builders.get(session_id)
        if builder is None:
            builder = self._builders[session_id] = SpanBuilder(
                session_id, capture_content=self.capture_content
            )
        return builder

    def _emit(self, session_id: str, span: FinishedSpan) -> None:
        trace_id = trace_id_of(session_id)
        self._ids.trace_id, self._ids.span_id = trace_id, span.span_id
        parent = None
        if span.parent_id is not None:
            parent = trace.set_span_in_context(
                NonRecordingSpan(
                    SpanContext(
                        trace_id=trace_id,
                        span_id=span.parent_id,
                        is_remote=False,
                        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                    )
                )
            )
        else:
            # A root span: an empty context, never the caller's current span.
            parent = trace.set_span_in_context(trace.INVALID_SPAN)
        out = self._tracer.start_span(
            span.name,
            context=parent,
            kind=span.kind,
            attributes=span.attributes,
            start_time=span.start,
        )
        for name, at, attributes in span.events:
            out.add_event(name, attributes, timestamp=at)
        if span.error is not None:
            out.set_status(Status(StatusCode.ERROR, span.error))
        out.end(end_time=span.end)


DEFAULT_SERVICE_NAME = "loopruntime"
"""``service.name`` of the traces ``spans_of`` makes, unless the environment
names one (``OTEL_SERVICE_NAME``, or ``service.name`` in
``OTEL_RESOURCE_ATTRIBUTES``) or the caller does."""


def service_resource(service_name: str | None = None) -> Resource:
    """The resource traces are made under: ``service_name``, else the one the
    environment names, else ``DEFAULT_SERVICE_NAME`` (never the SDK's
    ``unknown_service``), with the SDK's other detected attributes."""
    detected = Resource.create()
    named = str(detected.attributes.get(SERVICE_NAME, ""))
    if service_name is None and named and not named.startswith("unknown_service"):
        return detected
    return detected.merge(Resource({SERVICE_NAME: service_name or DEFAULT_SERVICE_NAME}))


def spans_of(
    session_id: str,
    records: Iterable[Record],
    *,
    capture_content: bool = False,
    service_name: str | None = None,
) -> tuple[ReadableSpan, ...]:
    """Every span the records close, as the SDK's finished spans (for an
    export of a past session: ``replay --otlp`` / ``--format otel-json``),
    under ``service_resource(service_name)``."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=service_resource(service_name))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    Exporter(provider, capture_content=capture_content).export(session_id, records)
    provider.shutdown()
    return memory.get_finished_spans()


def otlp_json(spans: Sequence[ReadableSpan]) -> str:
    """The spans as an OTLP/JSON ``ExportTraceServiceRequest`` (ids in hex,
    as the OTLP/JSON encoding wants them)."""
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    data = MessageToDict(encode_spans(spans))
    for resource in data.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _b64_hex(span[key])
    return json.dumps(data, indent=2, ensure_ascii=False)


async def send_otlp(spans: Sequence[ReadableSpan], endpoint: str) -> str | None:
    """Export ``spans`` to an OTLP/HTTP traces endpoint (``http://host:4318/v1/traces``);
    None when it accepted them, else what went wrong."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=10)
    try:
        # The exporter blocks on HTTP (with its own retries): off trio's thread.
        result = await trio.to_thread.run_sync(exporter.export, list(spans))
    finally:
        exporter.shutdown()
    if result is SpanExportResult.SUCCESS:
        return None
    return "the endpoint refused it or could not be reached (the log above says which)"


def _b64_hex(value: str) -> str:
    import base64

    return base64.b64decode(value).hex()
