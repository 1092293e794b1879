"""The journal replay tool: transcript, conversation tree, time travel, checker.

Everything here only reads.  The projections are pure functions over records
(no I/O, no clock), so they are tested without trio and give the same answer
for a journal read from any backend:

* ``render_transcript`` / ``TranscriptRenderer`` — the conversation as a
  person reads it, one line per thing that happened, children indented.
  The renderer is incremental, so ``--follow`` prints records as they come.
* ``build_tree`` — the unified conversation model (session → stream → epoch
  → talk → run → step) with typed relations; ``render_tree`` prints it and
  ``tree_json`` encodes it in the versioned schema ``TREE_SCHEMA`` /
  ``TREE_VERSION`` (documented in docs/replay.md).
* ``states_at`` / ``render_states`` — time travel: each loop's ``LoopState``
  folded over the records up to a seq.
* ``check`` / ``check_records`` — the journal checker of DESIGN.md §11: every
  rule it enforces is named in ``RULES``; a report names the first bad seq.

``open_for_replay`` resolves a journal URL for the CLI without creating
anything: a SQLite path that does not exist, or that is not a journal, is
refused before the backend (which creates files on open) ever sees it.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, assert_never
from urllib.parse import unquote

import msgspec

from journal import Journal, JournalError, Record, SessionNotFoundError, open_journal
from journal.codec import GENESIS, chain, encode_event
from journal.content import (
    Image,
    Message,
    RedactedThinking,
    Text,
    Thinking,
    ToolResult,
    ToolUse,
)
from journal.events import (
    CHECKPOINT_STREAM,
    ChildFinished,
    ChildStarted,
    CollabControlled,
    CollabEnded,
    CollabStarted,
    CollabTaskFinished,
    CollabTaskStarted,
    CollabTurn,
    CompactionCommitted,
    CompactionRejected,
    CompactionStarted,
    ContextMeasured,
    GateCancelled,
    GateOpened,
    GateResolved,
    InputCancelled,
    InputQueued,
    LoopImage,
    LoopModeChanged,
    LoopStarted,
    LoopStopped,
    ModelCallFailed,
    ModelCallStarted,
    ModelMessageCommitted,
    ModelOutput,
    Notice,
    SessionCheckpoint,
    SteerApplied,
    SteerQueued,
    ToolAbandoned,
    ToolCompleted,
    ToolResolved,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from loopruntime import LoopState, fold
from loopruntime.host import FoldError, image_state, merged, unanswered_tool_uses

__all__ = [
    "RULES",
    "TREE_SCHEMA",
    "TREE_VERSION",
    "CheckReport",
    "Epoch",
    "GateNode",
    "InputNode",
    "ModelStep",
    "NoticeNode",
    "Problem",
    "Relation",
    "ReplayInputError",
    "Run",
    "Stats",
    "Stream",
    "Talk",
    "ToolStep",
    "TranscriptRenderer",
    "Tree",
    "build_tree",
    "check",
    "check_records",
    "open_for_replay",
    "read_session",
    "render_states",
    "render_transcript",
    "render_tree",
    "replay_command",
    "states_at",
    "tree_json",
    "tree_json_schema",
]


# -- shared helpers -------------------------------------------------------------------


def _short(value: object, limit: int = 160) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _blocks_text(blocks: Iterable[object]) -> str:
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, Text):
            parts.append(b.text)
        elif isinstance(b, Image):
            parts.append(f"[image {b.media_type}]")
    return " ".join(parts)


def _agent_text(event: ModelMessageCommitted) -> str:
    """The text the model produced, without the runtime's notice block.

    A notice is the last text block of a message committed with ``notice``
    set (DESIGN.md §5); it is the runtime speaking, never the agent."""
    texts = [b.text for b in event.message.blocks if isinstance(b, Text)]
    if event.notice is not None and texts:
        texts = texts[:-1]
    if event.message.synthetic:
        return ""
    return "".join(texts)


def _notice_text(event: ModelMessageCommitted) -> str:
    if event.notice is None:
        return ""
    texts = [b.text for b in event.message.blocks if isinstance(b, Text)]
    return texts[-1] if texts else ""


# -- transcript ---------------------------------------------------------------------

_COLOURS = {
    "user": "\x1b[1;34m",
    "assistant": "\x1b[1;32m",
    "tool": "\x1b[33m",
    "gate": "\x1b[35m",
    "notice": "\x1b[1;31m",
    "dim": "\x1b[2m",
}
_RESET = "\x1b[0m"


class TranscriptRenderer:
    """Renders records one at a time into transcript lines.

    Stateful only to remember what later records refer to (a tool's name for
    its result, a child loop's indentation), so feeding a journal record by
    record — as ``--follow`` does — prints exactly what ``render_transcript``
    prints for the whole journal.  Colour uses ANSI codes when ``color``.
    """

    def __init__(self, *, color: bool = False) -> None:
        self.color = color
        self._depth: dict[str, int] = {}
        self._tools: dict[str, ToolStarted] = {}
        self._names: dict[str, str] = {}
        """tool_use id -> tool name, from committed assistant messages."""

    def paint(self, kind: str, text: str) -> str:
        return f"{_COLOURS[kind]}{text}{_RESET}" if self.color else text

    def feed(self, r: Record) -> list[str]:
        """The lines for one record (often none: bookkeeping records are silent)."""
        e = r.event
        paint = self.paint
        pad = "    " * self._depth.get(r.loop, 0)
        prefix = f"{paint('dim', f'{r.seq:>5} ')}{pad}"
        lines: list[str] = []
        match e:
            case LoopStarted():
                parent = f", child of {e.parent.parent_loop}" if e.parent else ""
                lines.append(
                    prefix
                    + paint("dim", f"loop {r.loop} started ({e.definition}, {e.model}{parent})")
                )
            case LoopStopped():
                lines.append(prefix + paint("dim", f"loop {r.loop} stopped ({e.reason})"))
            case InputQueued():
                who = "user" if e.trigger == "external" else e.trigger
                for m in e.messages:
                    mark = " (synthetic)" if m.synthetic else ""
                    lines.append(prefix + paint("user", f"{who}{mark}: ") + _blocks_text(m.blocks))
            case InputCancelled():
                lines.append(prefix + paint("dim", f"(input {e.input_id} cancelled: {e.reason})"))
            case SteerQueued():
                lines.append(prefix + paint("user", "steer: ") + e.text)
            case SteerApplied():
                lines.append(prefix + paint("dim", f"(steering applied: {len(e.steer_ids)})"))
            case TurnStarted():
                lines.append(prefix + paint("dim", f"── turn {e.turn} ──"))
            case TurnEnded():
                why = f" ({e.code})" if e.code else ""
                lines.append(prefix + paint("dim", f"── turn {e.turn} {e.outcome}{why} ──"))
            case ModelMessageCommitted():
                lines.extend(self._message(prefix, e))
            case ModelCallFailed():
                lines.append(prefix + paint("notice", f"model call failed: {e.code} {e.detail}"))
            case ToolStarted():
                self._tools[e.execution_id] = e
                lines.append(
                    prefix
                    + paint("tool", f"→ {e.name} ")
                    + _short(e.input)
                    + paint("dim", f"  [{e.execution_id}]")
                )
            case ToolCompleted():
                started = self._tools.get(e.execution_id)
                name = started.name if started else self._names.get(e.tool_use_id, "call")
                took = f", {e.duration_ns / 1e6:.0f} ms" if e.duration_ns else ""
                cut = f", {e.truncated_bytes} bytes cut" if e.truncated_bytes else ""
                lines.append(
                    prefix
                    + paint("tool", f"← {name} ({e.disposition}{took}{cut}): ")
                    + _short(_blocks_text(e.content))
                )
            case ToolAbandoned():
                lines.append(
                    prefix
                    + paint("notice", f"✗ {e.execution_id} abandoned ({e.reason}): outcome unknown")
                )
            case ToolResolved():
                lines.append(
                    prefix
                    + paint("tool", f"← resolved by {e.by}{' (error)' if e.is_error else ''}: ")
                    + _short(_blocks_text(e.content))
                )
            case GateOpened():
                if e.kind == "user_input":
                    choices = f" {list(e.choices)}" if e.choices else ""
                    what = e.prompt + choices
                else:
                    what = f"{e.prompt} {_short(e.preview or {})}"
                lines.append(prefix + paint("gate", f"? gate {e.gate_id} ({e.kind}): {what}"))
            case GateResolved():
                if e.kind == "user_input":
                    lines.append(prefix + paint("gate", f"! answered: {e.answer}"))
                else:
                    verdict = "allowed" if e.allow else "denied"
                    lines.append(prefix + paint("gate", f"! {verdict} ({e.scope})"))
            case GateCancelled():
                lines.append(prefix + paint("gate", f"! gate {e.gate_id} cancelled ({e.reason})"))
            case Notice():
                lines.append(prefix + paint("notice", f"notice [{e.code}]: {e.text}"))
            case SessionCheckpoint():
                pass  # derived from the records before it; the tree lists them
            case CompactionStarted():
                pass
            case CompactionCommitted():
                lines.append(
                    prefix
                    + paint(
                        "dim",
                        f"══ compaction: {e.replaced} messages summarised, {e.retained} kept ══",
                    )
                )
            case CompactionRejected():
                lines.append(prefix + paint("dim", f"(compaction rejected: {e.reason} {e.detail})"))
            case ChildStarted():
                self._depth[e.child_loop] = self._depth.get(r.loop, 0) + 1
                lines.append(prefix + paint("dim", f"┌ child loop {e.child_loop} ({e.definition})"))
            case ChildFinished():
                lines.append(prefix + paint("dim", f"└ child loop {e.child_loop} {e.status}"))
            case LoopModeChanged():
                lines.append(prefix + paint("dim", f"(mode: {e.mode})"))
            case ModelCallStarted() | ModelOutput() | ContextMeasured():
                pass  # the committed message is what the transcript shows
            case CollabStarted():
                lines.append(
                    prefix
                    + paint("dim", f"◆ collaboration {e.collab_id}: ")
                    + f"coordinator {e.coordinator}, workers {', '.join(e.workers)}"
                )
            case CollabTurn():
                d = e.decision
                what = f"turn {e.number}: {d.mode}"
                if d.tasks:
                    what += "; start " + ", ".join(f"{t.key}→{t.worker}" for t in d.tasks)
                if d.controls:
                    what += "; " + ", ".join(f"{c.kind} {c.key}" for c in d.controls)
                lines.append(prefix + paint("dim", "◆ ") + what)
            case CollabTaskStarted():
                lines.append(prefix + paint("tool", f"◆ task {e.key} started on {e.child_loop}"))
            case CollabTaskFinished():
                lines.append(
                    prefix + paint("tool", f"◆ task {e.key} {e.status}: ") + _short(e.output)
                )
            case CollabControlled():
                lines.append(prefix + paint("dim", f"◆ {e.kind} {e.key}: {e.receipt}"))
            case CollabEnded():
                why = f" ({e.code})" if e.code else ""
                lines.append(
                    prefix + paint("dim", f"◆ collaboration {e.status}{why}: ") + _short(e.output)
                )
            case _:
                assert_never(e)
        return lines

    def _message(self, prefix: str, e: ModelMessageCommitted) -> list[str]:
        paint = self.paint
        out: list[str] = []
        blocks = list(e.message.blocks)
        notice = ""
        if e.notice is not None and blocks and isinstance(blocks[-1], Text):
            notice = blocks.pop().text  # type: ignore[union-attr]
        for b in blocks:
            if isinstance(b, Text):
                out.append(prefix + paint("assistant", "assistant: ") + b.text)
            elif isinstance(b, Thinking):
                out.append(prefix + paint("dim", f"(thinking, {len(b.thinking)} characters)"))
            elif isinstance(b, RedactedThinking):
                out.append(prefix + paint("dim", "(redacted thinking)"))
            elif isinstance(b, ToolUse):
                # The call itself is shown with its tool.started / result.
                self._names[b.id] = b.name
        if notice:
            out.append(prefix + paint("notice", notice))
        return out


def render_transcript(records: Sequence[Record], *, color: bool = False) -> str:
    """The conversation per loop, as committed (children indented)."""
    renderer = TranscriptRenderer(color=color)
    return "\n".join(line for r in records for line in renderer.feed(r))


# -- the conversation tree -----------------------------------------------------------

TREE_SCHEMA = "loopruntime.replay.tree"
TREE_VERSION = 1
"""Bumped when a field changes meaning or type; new fields get defaults and
keep the version (docs/replay.md)."""

Quality = Literal["exact", "inferred"]
RelationKind = Literal[
    "starts", "reports", "ends_with", "result_of", "follows", "summarizes", "cancels", "retries"
]

_S: dict[str, Any] = {"frozen": False, "kw_only": True, "omit_defaults": False}


class Relation(msgspec.Struct, frozen=True, kw_only=True):
    """A typed edge between two nodes of the tree, by node id.

    ``quality`` says how the two ends were joined: ``exact`` when by an id
    recorded in the journal (input id, tool_use id, attempt id, turn number,
    child loop id), ``inferred`` when by position or content."""

    kind: RelationKind
    source: str
    target: str
    quality: Quality
    via: str = ""
    """The id or the rule that joined the two ends."""


class NoticeNode(msgspec.Struct, **_S):
    """The runtime speaking (never agent output)."""

    id: str
    seq: int
    code: str
    text: str
    refs: list[str] = []


class GateNode(msgspec.Struct, **_S):
    id: str
    gate_id: str
    kind: str
    seq: int
    prompt: str = ""
    choices: list[str] | None = None
    status: Literal["open", "resolved", "cancelled"] = "open"
    closed_seq: int | None = None
    answer: str | None = None
    allow: bool | None = None
    scope: str | None = None
    reason: str | None = None


class InputNode(msgspec.Struct, **_S):
    id: str
    input_id: str
    seq: int
    trigger: str
    text: str
    synthetic: bool = False
    """Every message of the input was written by the runtime."""
    status: Literal["queued", "consumed", "cancelled"] = "queued"
    run: str | None = None
    cancelled_seq: int | None = None
    reason: str | None = None


class ModelStep(msgspec.Struct, tag="model", tag_field="kind", **_S):
    """One model call: request sent, streamed output, committed message."""

    id: str
    index: int
    effect_id: str
    model: str
    first_seq: int
    last_seq: int
    seqs: list[int] = []
    text: str = ""
    """The agent's text (notice excluded; empty for a synthetic message)."""
    thinking_chars: int = 0
    tool_use_ids: list[str] = []
    stop_reason: str | None = None
    notice: str | None = None
    """``truncated`` / ``interrupted`` when the reply did not complete."""
    notice_text: str = ""
    synthetic: bool = False
    committed: bool = False
    failed: str | None = None
    """The failure code of ``model.call_failed``."""
    input_tokens: int = 0
    output_tokens: int = 0


class ToolStep(msgspec.Struct, tag="tool", tag_field="kind", **_S):
    """One tool call: the request (tool_use), its execution and its result."""

    id: str
    tool_use_id: str
    name: str
    input: dict[str, Any]
    first_seq: int
    last_seq: int
    seqs: list[int] = []
    requested_seq: int | None = None
    execution_id: str = ""
    started_seq: int | None = None
    status: Literal[
        "requested",
        "running",
        "succeeded",
        "failed",
        "rejected",
        "interrupted",
        "unknown",
        "resolved",
    ] = "requested"
    result: str = ""
    is_error: bool = False
    duration_ns: int = 0
    truncated_bytes: int = 0
    resolved_by: str | None = None
    synthetic: bool = False
    """The result was written by the runtime or the host (rejected, not run,
    interrupted, resolved), not produced by running the tool."""
    gates: list[GateNode] = []


Step = ModelStep | ToolStep


class Run(msgspec.Struct, **_S):
    """One turn (or the part of it inside one epoch: ``segment`` > 0)."""

    id: str
    turn: int
    first_seq: int
    last_seq: int
    segment: int = 0
    outcome: str | None = None
    """None while the turn is open."""
    code: str | None = None
    input_ids: list[str] = []
    steer_ids: list[str] = []
    steering: list[str] = []
    steps: list[Step] = []
    notices: list[NoticeNode] = []


class Talk(msgspec.Struct, **_S):
    """Runs that answer one piece of external input, and what it set going."""

    id: str
    index: int
    first_seq: int
    opened_by: Literal["external", "first_input", "epoch"]
    """``external``: a person's input; ``first_input``: the stream's first
    input, whatever made it (a child's task); ``epoch``: the talk goes on
    after a compaction cut the epoch."""
    runs: list[Run] = []


class CompactionNode(msgspec.Struct, **_S):
    id: str
    attempt_id: str
    seq: int
    basis: int
    replaced: int
    retained: int
    summary: str
    obligations: list[str] = []


class Epoch(msgspec.Struct, **_S):
    """The stretch of a stream between two committed compactions."""

    id: str
    index: int
    first_seq: int
    last_seq: int
    compaction: CompactionNode | None = None
    """The compaction that began this epoch (None for the first)."""
    talks: list[Talk] = []
    notices: list[NoticeNode] = []
    """Notices outside any run."""


class Stats(msgspec.Struct, **_S):
    """Counts for a stream.  Synthetic records are never agent output."""

    agent_messages: int = 0
    agent_chars: int = 0
    tool_calls: int = 0
    """Tool calls that ran and whose result came from the tool."""
    synthetic_messages: int = 0
    synthetic_tool_results: int = 0
    notices: int = 0
    external_inputs: int = 0


class Stream(msgspec.Struct, **_S):
    """One loop's conversation."""

    id: str
    loop: str
    first_seq: int
    last_seq: int
    definition: str = ""
    model: str = ""
    parent_loop: str | None = None
    parent_execution: str | None = None
    status: str = "idle"
    epochs: list[Epoch] = []
    inputs: list[InputNode] = []
    stats: Stats = msgspec.field(default_factory=Stats)


class Tree(msgspec.Struct, **_S):
    """The whole session (``schema``/``version`` identify this format)."""

    schema: str
    version: int
    session: str
    head: int
    streams: list[Stream] = []
    relations: list[Relation] = []
    checkpoints: list[int] = []
    """seqs of the session's checkpoints (restore starts after the last)."""


class _StreamBuilder:
    """Folds one loop's records into its Stream (pure bookkeeping)."""

    def __init__(self, tree: _TreeBuilder, loop: str, seq: int) -> None:
        self.tree = tree
        self.loop = loop
        self.stream = Stream(id=f"stream:{loop}", loop=loop, first_seq=seq, last_seq=seq)
        self.epoch = Epoch(id=f"epoch:{loop}:0", index=0, first_seq=seq, last_seq=seq)
        self.stream.epochs.append(self.epoch)
        self.talk: Talk | None = None
        self.carried: Talk | None = None
        """A talk cut by a compaction, continued by the next non-external run."""
        self.talks = 0
        self.run: Run | None = None
        self.prev_run: Run | None = None
        self.inputs: dict[str, InputNode] = {}
        self.steers: dict[str, str] = {}
        self.tool_steps: dict[str, ToolStep] = {}
        self.by_execution: dict[str, ToolStep] = {}
        self.model_steps: dict[str, ModelStep] = {}
        self.gates: dict[str, GateNode] = {}
        self.compactions: dict[str, int] = {}
        self.last_step: Step | None = None
        self.cut_call = False
        """The last model reply had a tool call cut off: the next call retries."""
        self.state = LoopState()

    def relate(
        self, kind: RelationKind, source: str, target: str, quality: Quality, via: str = ""
    ) -> None:
        self.tree.relations.append(
            Relation(kind=kind, source=source, target=target, quality=quality, via=via)
        )

    def notice(self, r: Record, e: Notice) -> None:
        node = NoticeNode(
            id=f"notice:{r.seq}", seq=r.seq, code=e.code, text=e.text, refs=list(e.refs)
        )
        self.stream.stats.notices += 1
        (self.run.notices if self.run is not None else self.epoch.notices).append(node)

    def add_step(self, step: Step) -> None:
        assert self.run is not None
        if self.last_step is not None:
            self.relate("follows", step.id, self.last_step.id, "inferred", "position in the run")
        self.run.steps.append(step)
        self.last_step = step

    def feed(self, r: Record) -> None:
        e = r.event
        s = self.stream
        s.last_seq = self.epoch.last_seq = r.seq
        if self.run is not None:
            self.run.last_seq = r.seq
        match e:
            case LoopStarted():
                s.definition, s.model = e.definition, e.model
                if e.parent is not None:
                    s.parent_loop, s.parent_execution = e.parent.parent_loop, e.parent.execution_id
            case LoopModeChanged() | LoopStopped() | ContextMeasured() | CompactionRejected():
                pass
            case InputQueued():
                node = InputNode(
                    id=f"input:{self.loop}:{e.input_id}",
                    input_id=e.input_id,
                    seq=r.seq,
                    trigger=e.trigger,
                    text=" ".join(_blocks_text(m.blocks) for m in e.messages),
                    synthetic=bool(e.messages) and all(m.synthetic for m in e.messages),
                )
                self.inputs[e.input_id] = node
                s.inputs.append(node)
                if e.trigger == "external" and not node.synthetic:
                    s.stats.external_inputs += 1
                self.tree.child_report(self, node)
            case InputCancelled():
                found = self.inputs.get(e.input_id)
                if found is not None:
                    found.status, found.cancelled_seq, found.reason = "cancelled", r.seq, e.reason
                    source = (
                        self.prev_run.id
                        if e.reason in ("turn_failed", "turn_interrupted") and self.prev_run
                        else s.id
                    )
                    quality: Quality = "exact" if source == s.id else "inferred"
                    self.relate("cancels", source, found.id, quality, e.input_id)
            case SteerQueued():
                self.steers[e.steer_id] = e.text
            case SteerApplied():
                if self.run is not None:
                    self.run.steer_ids += e.steer_ids
                    self.run.steering += [self.steers.get(i, "") for i in e.steer_ids]
            case TurnStarted():
                self.start_run(r, e)
            case TurnEnded():
                if self.run is not None:
                    self.run.outcome, self.run.code = e.outcome, e.code
                    final = next(
                        (st for st in reversed(self.run.steps) if isinstance(st, ModelStep)), None
                    )
                    if final is not None:
                        self.relate("ends_with", self.run.id, final.id, "exact", f"turn {e.turn}")
                    self.prev_run, self.run = self.run, None
                    self.last_step = None
            case ModelCallStarted():
                if self.run is None:
                    return
                step = ModelStep(
                    id=f"step:{self.loop}:{e.turn}:m{e.step}",
                    index=e.step,
                    effect_id=e.effect_id,
                    model=e.model,
                    first_seq=r.seq,
                    last_seq=r.seq,
                    seqs=[r.seq],
                )
                previous = self.last_step
                self.model_steps[e.effect_id] = step
                self.add_step(step)
                if self.cut_call and isinstance(previous, (ModelStep, ToolStep)):
                    self.relate("retries", step.id, previous.id, "inferred", "tool call cut off")
                self.cut_call = False
            case ModelOutput():
                found_m = self.model_steps.get(e.effect_id)
                if found_m is not None:
                    found_m.seqs.append(r.seq)
                    found_m.last_seq = r.seq
            case ModelCallFailed():
                found_m = self.model_steps.get(e.effect_id)
                if found_m is not None:
                    found_m.failed = e.code
                    found_m.seqs.append(r.seq)
                    found_m.last_seq = r.seq
            case ModelMessageCommitted():
                self.message(r, e)
            case ToolStarted():
                step_t = self.tool_step(r, e.tool_use_id, e.name, e.input)
                step_t.execution_id, step_t.started_seq, step_t.status = (
                    e.execution_id,
                    r.seq,
                    "running",
                )
                self.by_execution[e.execution_id] = step_t
            case ToolCompleted():
                step_t = self.tool_step(r, e.tool_use_id, "", {})
                step_t.result = _blocks_text(e.content)
                step_t.status = e.disposition
                step_t.is_error = e.disposition != "succeeded"
                step_t.duration_ns, step_t.truncated_bytes = e.duration_ns, e.truncated_bytes
                # A rejected call never ran: its result is the runtime's words.
                step_t.synthetic = e.disposition == "rejected" or step_t.started_seq is None
                if step_t.synthetic:
                    s.stats.synthetic_tool_results += 1
                else:
                    s.stats.tool_calls += 1
                self.cut_call = self.cut_call or "emit the call again" in step_t.result
            case ToolAbandoned():
                step_t = self.tool_step(r, e.tool_use_id, "", {})
                if e.reason == "interrupted":
                    step_t.status, step_t.synthetic, step_t.is_error = "interrupted", True, True
                    s.stats.synthetic_tool_results += 1
                else:
                    step_t.status = "unknown"
            case ToolResolved():
                step_t = self.tool_step(r, e.tool_use_id, "", {})
                step_t.status, step_t.resolved_by = "resolved", e.by
                step_t.result, step_t.is_error = _blocks_text(e.content), e.is_error
                # A host's word for an outcome nobody saw; a replay-safe
                # re-run did run the tool.
                step_t.synthetic = e.by == "host"
                if step_t.synthetic:
                    s.stats.synthetic_tool_results += 1
                else:
                    s.stats.tool_calls += 1
            case GateOpened():
                gate = GateNode(
                    id=f"gate:{e.gate_id}",
                    gate_id=e.gate_id,
                    kind=e.kind,
                    seq=r.seq,
                    prompt=e.prompt,
                    choices=list(e.choices) if e.choices is not None else None,
                )
                self.gates[e.gate_id] = gate
                owner = self.by_execution.get(e.execution_id) if e.execution_id else None
                if owner is None and e.tool_use_id:
                    # A permission gate comes before the call starts.
                    owner = self.tool_step(r, e.tool_use_id, e.tool_name, {})
                if owner is not None:
                    owner.gates.append(gate)
                    if r.seq not in owner.seqs:
                        owner.seqs.append(r.seq)
                    owner.last_seq = r.seq
            case GateResolved():
                gate_r = self.gates.get(e.gate_id)
                if gate_r is not None:
                    gate_r.status, gate_r.closed_seq = "resolved", r.seq
                    gate_r.answer, gate_r.allow, gate_r.scope = e.answer, e.allow, e.scope
            case GateCancelled():
                gate_r = self.gates.get(e.gate_id)
                if gate_r is not None:
                    gate_r.status, gate_r.closed_seq, gate_r.reason = "cancelled", r.seq, e.reason
                    source = self.run.id if self.run is not None else s.id
                    self.relate("cancels", source, gate_r.id, "exact", e.gate_id)
            case CompactionStarted():
                self.compactions[e.attempt_id] = r.seq
            case CompactionCommitted():
                self.cut_epoch(r, e)
            case ChildStarted():
                self.tree.child_started(self, r, e)
            case ChildFinished():
                self.tree.child_finished(self, r, e)
            case Notice():
                self.notice(r, e)
            case SessionCheckpoint():
                pass  # _TreeBuilder keeps checkpoints out of the streams
            case (
                CollabStarted()
                | CollabTurn()
                | CollabTaskStarted()
                | CollabTaskFinished()
                | CollabControlled()
                | CollabEnded()
            ):
                pass  # the collaboration's own stream carries no turns or steps
            case _:
                assert_never(e)
        try:
            fold(self.state, r)
        except FoldError:
            pass  # the checker reports it; the tree shows what it can

    def start_run(self, r: Record, e: TurnStarted) -> None:
        taken = [self.inputs[i] for i in e.input_ids if i in self.inputs]
        external = any(i.trigger == "external" and not i.synthetic for i in taken)
        if not external and self.talk is None and self.carried is not None:
            self.continue_talk(r)
        if external or self.talk is None:
            self.carried = None
            self.talks += 1
            opened: Literal["external", "first_input", "epoch"] = (
                "external" if external else "first_input"
            )
            self.talk = Talk(
                id=f"talk:{self.loop}:{self.talks}",
                index=self.talks,
                first_seq=r.seq,
                opened_by=opened,
            )
            self.epoch.talks.append(self.talk)
        run = Run(
            id=f"run:{self.loop}:{e.turn}",
            turn=e.turn,
            first_seq=r.seq,
            last_seq=r.seq,
            input_ids=list(e.input_ids),
            steer_ids=list(e.steer_ids),
            steering=[self.steers.get(i, "") for i in e.steer_ids],
        )
        self.talk.runs.append(run)
        if len(self.talk.runs) > 1:
            before = self.talk.runs[-2]
            self.relate("follows", run.id, before.id, "inferred", "position in the talk")
        for node in taken:
            node.status, node.run = "consumed", run.id
            self.relate("starts", node.id, run.id, "exact", node.input_id)
            # The same words again after a run that did not complete: a retry.
            if self.prev_run is not None and self.prev_run.outcome in ("crashed", "failed"):
                earlier = [
                    i
                    for i in self.stream.inputs
                    if i.run == self.prev_run.id and i.text == node.text
                ]
                if earlier:
                    self.relate("retries", run.id, self.prev_run.id, "inferred", "same input text")
        self.run = run
        self.last_step = None

    def message(self, r: Record, e: ModelMessageCommitted) -> None:
        step = self.model_steps.get(e.effect_id)
        if step is None:
            return
        step.seqs.append(r.seq)
        step.last_seq = r.seq
        step.committed = True
        step.text = _agent_text(e)
        step.notice = e.notice
        step.notice_text = _notice_text(e)
        step.synthetic = e.message.synthetic
        step.stop_reason = e.stop_reason
        step.thinking_chars = sum(
            len(b.thinking) for b in e.message.blocks if isinstance(b, Thinking)
        )
        if e.usage is not None:
            step.input_tokens, step.output_tokens = e.usage.input_tokens, e.usage.output_tokens
        stats = self.stream.stats
        uses = [b for b in e.message.blocks if isinstance(b, ToolUse)]
        if step.synthetic:
            stats.synthetic_messages += 1
        elif step.text or uses:
            stats.agent_messages += 1
            stats.agent_chars += len(step.text)
        for use in uses:
            step.tool_use_ids.append(use.id)
            tool = self.tool_step(r, use.id, use.name, use.input)
            tool.requested_seq = r.seq
            self.relate("result_of", tool.id, step.id, "exact", use.id)

    def tool_step(self, r: Record, tool_use_id: str, name: str, input: dict[str, Any]) -> ToolStep:
        step = self.tool_steps.get(tool_use_id)
        if step is None:
            step = ToolStep(
                id=f"step:{self.loop}:{tool_use_id or r.seq}",
                tool_use_id=tool_use_id,
                name=name,
                input=dict(input),
                first_seq=r.seq,
                last_seq=r.seq,
            )
            self.tool_steps[tool_use_id] = step
            if self.run is not None:
                self.add_step(step)
        if r.seq not in step.seqs:
            step.seqs.append(r.seq)
        step.last_seq = r.seq
        step.name = step.name or name
        return step

    def cut_epoch(self, r: Record, e: CompactionCommitted) -> None:
        previous = self.epoch
        index = previous.index + 1
        self.epoch = Epoch(
            id=f"epoch:{self.loop}:{index}",
            index=index,
            first_seq=r.seq,
            last_seq=r.seq,
            compaction=CompactionNode(
                id=f"compaction:{e.attempt_id}",
                attempt_id=e.attempt_id,
                seq=r.seq,
                basis=e.basis,
                replaced=e.replaced,
                retained=e.retained,
                summary=_blocks_text(e.summary.blocks),
                obligations=list(e.obligations),
            ),
        )
        self.stream.epochs.append(self.epoch)
        quality: Quality = "exact" if e.attempt_id in self.compactions else "inferred"
        self.relate("summarizes", self.epoch.id, previous.id, quality, e.attempt_id)
        if self.talk is not None:
            # The talk goes on in the new epoch, with its next run (or with
            # the run that is open now).
            self.carried, self.talk = self.talk, None
            if self.run is not None:
                old = self.run
                self.run = Run(
                    id=f"{old.id}.{old.segment + 1}",
                    turn=old.turn,
                    first_seq=r.seq,
                    last_seq=r.seq,
                    segment=old.segment + 1,
                )
                self.continue_talk(r).runs.append(self.run)
                self.relate("follows", self.run.id, old.id, "exact", f"turn {old.turn}")

    def continue_talk(self, r: Record) -> Talk:
        """The talk carried over a compaction, opened in the current epoch."""
        assert self.carried is not None
        self.talks += 1
        self.talk = Talk(
            id=f"talk:{self.loop}:{self.talks}",
            index=self.talks,
            first_seq=r.seq,
            opened_by="epoch",
        )
        self.epoch.talks.append(self.talk)
        self.relate("follows", self.talk.id, self.carried.id, "inferred", "compaction cut")
        self.carried = None
        return self.talk


class _TreeBuilder:
    def __init__(self, session: str) -> None:
        self.session = session
        self.streams: dict[str, _StreamBuilder] = {}
        self.relations: list[Relation] = []
        self.children: dict[str, tuple[str, str]] = {}
        """child loop -> (parent stream builder loop, node id that started it)."""
        self.checkpoints: list[int] = []

    def feed(self, r: Record) -> None:
        if r.loop == CHECKPOINT_STREAM:
            # Derived from the records before it: no stream, no node.
            self.checkpoints.append(r.seq)
            return
        builder = self.streams.get(r.loop)
        if builder is None:
            builder = self.streams[r.loop] = _StreamBuilder(self, r.loop, r.seq)
        builder.feed(r)

    def child_started(self, parent: _StreamBuilder, r: Record, e: ChildStarted) -> None:
        exe = e.provenance.execution_id
        step = parent.by_execution.get(exe)
        if step is not None:
            source, quality = step.id, "exact"
        else:
            source, quality = (parent.run.id if parent.run else parent.stream.id), "inferred"
        self.children[e.child_loop] = (parent.loop, source)
        self.relations.append(
            Relation(
                kind="starts",
                source=source,
                target=f"stream:{e.child_loop}",
                quality=quality,  # type: ignore[arg-type]
                via=exe or e.child_loop,
            )
        )

    def child_finished(self, parent: _StreamBuilder, r: Record, e: ChildFinished) -> None:
        origin = self.children.get(e.child_loop)
        target = origin[1] if origin is not None else parent.stream.id
        self.relations.append(
            Relation(
                kind="reports",
                source=f"stream:{e.child_loop}",
                target=target,
                quality="exact",
                via=e.child_loop,
            )
        )

    def child_report(self, parent: _StreamBuilder, node: InputNode) -> None:
        """A child's result arrives as input text ``[result of child loop X]``
        (the actor's wording): joined by that text, so inferred."""
        if node.trigger not in ("subagent", "notification"):
            return
        marker = "[result of child loop "
        if node.text.startswith(marker):
            child = node.text[len(marker) :].split("]", 1)[0]
            self.relations.append(
                Relation(
                    kind="reports",
                    source=f"stream:{child}",
                    target=node.id,
                    quality="inferred",
                    via="input text",
                )
            )

    def build(self, head: int) -> Tree:
        streams = []
        for b in self.streams.values():
            b.stream.status = b.state.status.value
            streams.append(b.stream)
        return Tree(
            schema=TREE_SCHEMA,
            version=TREE_VERSION,
            session=self.session,
            head=head,
            streams=streams,
            relations=self.relations,
            checkpoints=self.checkpoints,
        )


def build_tree(session_id: str, records: Iterable[Record]) -> Tree:
    """The unified conversation model of a session's records (pure).

    Records must be one session's, in seq order (a prefix is fine: open runs
    and gates show as open).  The caller owns the returned tree."""
    builder = _TreeBuilder(session_id)
    head = 0
    for r in records:
        builder.feed(r)
        head = r.seq
    return builder.build(head)


def tree_json(tree: Tree) -> bytes:
    """The tree in the JSON format of docs/replay.md (``schema``/``version`` first)."""
    return msgspec.json.encode(tree)


def tree_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``tree_json``'s output, generated from the Structs."""
    return msgspec.json.schema(Tree)


def render_tree(tree: Tree, *, color: bool = False) -> str:
    """The tree as indented text, relations listed at the end."""

    def paint(kind: str, text: str) -> str:
        return f"{_COLOURS[kind]}{text}{_RESET}" if color else text

    out = [f"session {tree.session} (head seq {tree.head}, {TREE_SCHEMA}/{TREE_VERSION})"]
    for s in tree.streams:
        parent = f" child of {s.parent_loop} via {s.parent_execution}" if s.parent_loop else ""
        st = s.stats
        out.append(
            f"  stream {s.loop} ({s.definition}, {s.model}){parent} — {s.status}; "
            f"agent messages {st.agent_messages}, tool calls {st.tool_calls}, "
            f"synthetic {st.synthetic_messages + st.synthetic_tool_results + st.notices}"
        )
        for ep in s.epochs:
            cut = ""
            if ep.compaction is not None:
                c = ep.compaction
                cut = f" after compaction {c.attempt_id} ({c.replaced} replaced, {c.retained} kept)"
            out.append(
                paint("dim", f"    epoch {ep.index} (seq {ep.first_seq}-{ep.last_seq}){cut}")
            )
            for n in ep.notices:
                out.append("      " + paint("notice", f"notice [{n.code}] seq {n.seq}"))
            for talk in ep.talks:
                out.append(f"      talk {talk.index} ({talk.opened_by}, seq {talk.first_seq})")
                for run in talk.runs:
                    seg = f" part {run.segment + 1}" if run.segment else ""
                    outcome = run.outcome or "open"
                    out.append(
                        f"        run turn {run.turn}{seg}: {outcome}"
                        + (f" ({run.code})" if run.code else "")
                        + paint("dim", f"  seq {run.first_seq}-{run.last_seq}")
                    )
                    for text in run.steering:
                        out.append("          " + paint("user", "steer: ") + _short(text, 100))
                    for n in run.notices:
                        out.append("          " + paint("notice", f"notice [{n.code}] seq {n.seq}"))
                    for step in run.steps:
                        out.append("          " + _render_step(step, paint))
                        if isinstance(step, ToolStep):
                            for g in step.gates:
                                answer = (
                                    g.answer
                                    if g.kind == "user_input"
                                    else ("allowed" if g.allow else "denied")
                                )
                                closed = answer if g.status == "resolved" else g.status
                                out.append(
                                    "            "
                                    + paint(
                                        "gate", f"gate {g.kind}: {_short(g.prompt, 60)} → {closed}"
                                    )
                                )
        queued = [i for i in s.inputs if i.status == "queued"]
        for i in queued:
            out.append(f"    queued input {i.input_id} ({i.trigger}): {_short(i.text, 80)}")
    if tree.relations:
        counts = Counter(r.kind for r in tree.relations)
        out.append("  relations: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
        for rel in tree.relations:
            out.append(
                paint(
                    "dim", f"    {rel.kind}: {rel.source} → {rel.target} ({rel.quality}, {rel.via})"
                )
            )
    return "\n".join(out)


def _render_step(step: Step, paint: Callable[[str, str], str]) -> str:
    if isinstance(step, ModelStep):
        bits = []
        if step.text:
            bits.append(paint("assistant", _short(step.text, 100)))
        if step.thinking_chars:
            bits.append(paint("dim", f"(thinking {step.thinking_chars} chars)"))
        if step.tool_use_ids:
            bits.append(f"→ {len(step.tool_use_ids)} tool call(s)")
        if step.notice:
            bits.append(paint("notice", f"[{step.notice}]"))
        if step.failed:
            bits.append(paint("notice", f"failed {step.failed}"))
        if not step.committed and not step.failed:
            bits.append(paint("dim", "(in flight)"))
        return f"model step {step.index}: " + " ".join(bits)
    took = f", {step.duration_ns / 1e6:.0f} ms" if step.duration_ns else ""
    synthetic = " synthetic" if step.synthetic else ""
    result = f" → {_short(step.result, 80)}" if step.result else ""
    return (
        paint("tool", f"tool {step.name} ")
        + _short(step.input, 60)
        + f" [{step.status}{took}{synthetic}]"
        + result
    )


# -- time travel ---------------------------------------------------------------------


def states_at(records: Iterable[Record], seq: int) -> dict[str, LoopState]:
    """Each loop's state folded over the records with seq ≤ ``seq`` (pure).

    Raises ``FoldError`` when a record does not fit (``check`` says where)."""
    states: dict[str, LoopState] = {}
    for r in records:
        if r.seq > seq:
            break
        fold(states.setdefault(r.loop, LoopState()), r)
    return states


def _message_line(m: Message) -> str:
    parts: list[str] = []
    for b in m.blocks:
        if isinstance(b, Text):
            parts.append(_short(b.text, 120))
        elif isinstance(b, ToolUse):
            parts.append(f"[tool_use {b.name} {_short(b.input, 60)}]")
        elif isinstance(b, ToolResult):
            err = " error" if b.is_error else ""
            parts.append(f"[tool_result{err} {_short(_blocks_text(b.content), 60)}]")
        elif isinstance(b, Thinking):
            parts.append(f"[thinking {len(b.thinking)} chars]")
        elif isinstance(b, RedactedThinking):
            parts.append("[redacted thinking]")
        elif isinstance(b, Image):
            parts.append(f"[image {b.media_type}]")
    marks = "".join(
        f" ({w})" for w, on in (("synthetic", m.synthetic), ("derived", m.derived)) if on
    )
    return f"{m.role}{marks}: " + " ".join(parts)


def render_states(states: dict[str, LoopState], seq: int) -> str:
    """What each loop knew as of ``seq``: status, context, queue, gates, effects."""
    out = [f"state as of seq {seq}"]
    for loop, st in states.items():
        out.append(
            f"loop {loop} ({st.definition}) status {st.status.value}, turn {st.turn_index}"
            + (", turn open" if st.turn_open else "")
            + (f", last outcome {st.last_outcome}" if st.last_outcome else "")
            + f", last seq {st.last_seq}"
        )
        out.append(f"  messages ({len(st.messages)}):")
        out.extend(f"    {i}. {_message_line(m)}" for i, m in enumerate(st.messages))
        if st.open_call is not None:
            out.append(f"  model call in flight: {st.open_call} ({len(st.open_output)} pieces)")
        for q in st.queued:
            text = " ".join(_blocks_text(m.blocks) for m in q.messages)
            out.append(f"  queued input {q.input_id} ({q.trigger}): {_short(text, 80)}")
        for steer in st.steering:
            out.append(f"  queued steering {steer.steer_id}: {_short(steer.text, 80)}")
        for g in st.open_gates:
            out.append(f"  open gate {g.gate_id} ({g.kind}): {_short(g.prompt, 80)}")
        for u in st.unknown_effects:
            out.append(f"  unknown effect {u.execution_id}: {u.name} {_short(u.input, 60)}")
        for r in st.running.values():
            out.append(f"  running tool {r.execution_id}: {r.name} {_short(r.input, 60)}")
    return "\n".join(out)


# -- reading for the CLI ---------------------------------------------------------------


class ReplayInputError(Exception):
    """The journal or session named for replay cannot be read (a clear message)."""


def _sqlite_path(url: str) -> str | None:
    """The filesystem path of a SQLite journal URL or plain path, else None."""
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        rest = rest[3:] if rest.startswith("///") else rest.lstrip("/")
        return unquote(rest.split("?", 1)[0])
    if "://" in url or url.startswith("memory:"):
        return None
    return url


def _refuse_non_journal(path: str) -> None:
    """Refuse, without writing anything, a path that holds no journal.

    The SQLite backend creates a missing file and writes the schema into an
    empty database on open; replay must never write, so it looks first,
    through a read-only connection."""
    p = Path(path)
    if not p.exists():
        raise ReplayInputError(f"there is no journal at {path}: the file does not exist")
    if not p.is_file():
        raise ReplayInputError(f"{path} is not a journal file")
    if p.stat().st_size == 0:
        raise ReplayInputError(f"{path} is empty: it is not a loopruntime journal")
    try:
        conn = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM journal_meta WHERE key = 'format'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise ReplayInputError(f"{path} is not a loopruntime journal ({exc})") from exc
    if row is None or row[0] != "loopruntime-journal":
        raise ReplayInputError(f"{path} is not a loopruntime journal")


@asynccontextmanager
async def open_for_replay(url: str) -> AsyncIterator[Journal]:
    """Open a journal to read it, refusing a SQLite file that is missing or
    not a journal before anything could create it.  Backend errors (a
    newer schema, an unreachable server) are ``JournalError``s."""
    path = _sqlite_path(url)
    if path is not None:
        _refuse_non_journal(path)
    async with open_journal(url) as journal:
        yield journal


async def read_session(journal: Journal, session_id: str) -> AsyncIterator[Record]:
    """``journal.read`` with a clear error for a session that is not there."""
    try:
        async for record in journal.read(session_id):
            yield record
    except SessionNotFoundError as exc:
        raise _no_session(journal, session_id) from exc


# -- the checker --------------------------------------------------------------------

RULES = (
    "journal readable",
    "record belongs to the session",
    "seq gap-free",
    "digest chain intact",
    "tool started once",
    "settlement follows its start",
    "settlement names its call",
    "tool settled at most once",
    "result answers an open tool_use",
    "every tool_use answered exactly once",
    "every tool_use answered before the next call",
    "turn ends with every tool_use answered",
    "gate opened once",
    "gate closed after it opened",
    "gate closed at most once",
    "gate resolved with its kind",
    "turns numbered in order",
    "turn ended at most once",
    "turn.ended names the open turn",
    "compaction has a matching start",
    "compaction basis matches its start",
    "compaction basis is current",
    "compaction range valid",
    "fold succeeds",
    "checkpoint chain linked",
    "checkpoint equals the fold before it",
)
"""Every rule the checker enforces, by the name a ``Problem`` carries."""


@dataclass(frozen=True)
class Problem:
    seq: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.rule}: {self.detail}"


@dataclass
class CheckReport:
    session: str
    records: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_bad_seq(self) -> int | None:
        return min((p.seq for p in self.problems), default=None)

    def summary(self) -> str:
        if self.ok:
            return f"ok: {self.records} records of session {self.session}, every invariant holds"
        first = min(self.problems, key=lambda p: p.seq)
        return (
            f"FAILED at seq {self.first_bad_seq}: {first} "
            f"({len(self.problems)} problem(s) in {self.records} records)"
        )


async def check(journal: Journal, session_id: str) -> CheckReport:
    """Read a session and check every invariant (never writes).

    A record the backend cannot read (damaged bytes, a broken digest chain,
    a missing seq) is reported as ``journal readable`` at its seq, after
    every rule has been checked over the records before it.  The backend
    verified the stored bytes' digest chain while reading, so the records are
    not re-hashed here (re-encoding a record written by an older schema would
    not reproduce its bytes).  ``SessionNotFoundError`` propagates: a missing
    session is not a broken journal."""
    records: list[Record] = []
    try:
        async for record in journal.read(session_id):
            records.append(record)
    except SessionNotFoundError:
        raise
    except JournalError as exc:
        report = check_records(session_id, records, verify_digests=False)
        seq = getattr(exc, "seq", (records[-1].seq + 1) if records else 1)
        report.problems.append(Problem(seq, "journal readable", str(exc)))
        report.problems.sort(key=lambda p: p.seq)
        return report
    return check_records(session_id, records, verify_digests=False)


def check_records(
    session_id: str, records: Sequence[Record], *, verify_digests: bool = True
) -> CheckReport:
    """Check the invariants over records already read (pure).

    With ``verify_digests`` each record's digest is recomputed from the
    previous digest and the re-encoded event (exact for records written by
    this schema version).  Problems are sorted by seq."""
    return _Checker(session_id).run(records, verify_digests)


class _Checker:
    def __init__(self, session_id: str) -> None:
        self.session = session_id
        self.problems: list[Problem] = []
        self.states: dict[str, LoopState] = {}
        self.started: dict[str, ToolStarted] = {}
        self.settled: Counter[str] = Counter()
        self.abandoned: set[str] = set()
        self.unknown: set[str] = set()
        self.gates_open: dict[str, str] = {}
        self.gates_seen: set[str] = set()
        self.gates_closed: set[str] = set()
        self.turns_open: dict[str, int] = {}
        self.compactions: dict[str, int] = {}
        self.checkpoint_seq = 0
        self.checkpoint_messages: dict[str, list[Message]] = {}
        self.checkpoint_verified: dict[str, tuple[list[Message], int]] = {}
        """Per loop, the message list found equal at its last checkpoint, and its length."""

    def bad(self, seq: int, rule: str, detail: str) -> None:
        assert rule in RULES, rule
        self.problems.append(Problem(seq, rule, detail))

    def run(self, records: Sequence[Record], verify_digests: bool) -> CheckReport:
        expected = 1
        previous = GENESIS
        for r in records:
            if r.session != self.session:
                self.bad(r.seq, "record belongs to the session", f"record of session {r.session}")
            if r.seq != expected:
                self.bad(r.seq, "seq gap-free", f"expected seq {expected}")
            elif verify_digests and chain(previous, encode_event(r.event)) != r.digest:
                self.bad(r.seq, "digest chain intact", "digest does not chain from the previous")
            expected = r.seq + 1
            previous = r.digest
            state = self.states.setdefault(r.loop, LoopState())
            self.record(r, state)
            try:
                fold(state, r)
            except FoldError as exc:
                self.bad(r.seq, "fold succeeds", str(exc))
            except Exception as exc:
                self.bad(r.seq, "fold succeeds", repr(exc))
            self.after_fold(r, state)
        self.problems.sort(key=lambda p: p.seq)
        return CheckReport(session=self.session, records=len(records), problems=self.problems)

    def settle(self, seq: int, execution_id: str, tool_use_id: str) -> None:
        started = self.started.get(execution_id)
        if started is None:
            self.bad(seq, "settlement follows its start", f"{execution_id} never started")
            return
        if started.tool_use_id != tool_use_id:
            self.bad(
                seq,
                "settlement names its call",
                f"{execution_id} started for tool_use {started.tool_use_id}, not {tool_use_id}",
            )
        self.settled[execution_id] += 1
        if self.settled[execution_id] > 1:
            self.bad(seq, "tool settled at most once", execution_id)

    def answer(self, seq: int, tool_use_id: str, state: LoopState) -> None:
        """A record that gives the model a result for ``tool_use_id``."""
        if tool_use_id in state.results:
            self.bad(seq, "every tool_use answered exactly once", f"{tool_use_id} answered twice")
        elif tool_use_id not in state.tool_uses:
            self.bad(
                seq,
                "result answers an open tool_use",
                f"no committed assistant message awaits {tool_use_id}",
            )

    def record(self, r: Record, state: LoopState) -> None:
        """Rules checked against the state *before* ``r`` is folded."""
        e = r.event
        seq = r.seq
        match e:
            case ToolStarted():
                if e.execution_id in self.started:
                    self.bad(seq, "tool started once", e.execution_id)
                self.started[e.execution_id] = e
            case ToolCompleted():
                if e.execution_id:
                    self.settle(seq, e.execution_id, e.tool_use_id)
                self.answer(seq, e.tool_use_id, state)
            case ToolAbandoned():
                if e.execution_id not in self.started:
                    self.bad(seq, "settlement follows its start", f"{e.execution_id} never started")
                elif self.settled[e.execution_id] or e.execution_id in self.abandoned:
                    self.bad(seq, "tool settled at most once", f"{e.execution_id} abandoned late")
                elif e.reason == "interrupted":
                    self.settle(seq, e.execution_id, e.tool_use_id)
                    self.answer(seq, e.tool_use_id, state)
                else:
                    self.unknown.add(e.execution_id)
                self.abandoned.add(e.execution_id)
            case ToolResolved():
                if e.execution_id not in self.unknown:
                    self.bad(
                        seq,
                        "settlement follows its start",
                        f"{e.execution_id} was not abandoned with an unknown outcome",
                    )
                else:
                    self.unknown.discard(e.execution_id)
                    self.settle(seq, e.execution_id, e.tool_use_id)
                self.answer(seq, e.tool_use_id, state)
            case GateOpened():
                if e.gate_id in self.gates_seen:
                    self.bad(seq, "gate opened once", e.gate_id)
                self.gates_seen.add(e.gate_id)
                self.gates_open[e.gate_id] = e.kind
            case GateResolved() | GateCancelled():
                if e.gate_id in self.gates_closed:
                    self.bad(seq, "gate closed at most once", e.gate_id)
                elif e.gate_id not in self.gates_open:
                    self.bad(seq, "gate closed after it opened", e.gate_id)
                elif isinstance(e, GateResolved) and self.gates_open[e.gate_id] != e.kind:
                    self.bad(seq, "gate resolved with its kind", e.gate_id)
                self.gates_open.pop(e.gate_id, None)
                self.gates_closed.add(e.gate_id)
            case TurnStarted():
                if r.loop in self.turns_open:
                    self.bad(
                        seq, "turn ended at most once", f"turn {self.turns_open[r.loop]} still open"
                    )
                elif e.turn != state.turn_index + 1:
                    self.bad(
                        seq,
                        "turns numbered in order",
                        f"turn {e.turn} after turn {state.turn_index}",
                    )
                self.turns_open[r.loop] = e.turn
            case TurnEnded():
                open_turn = self.turns_open.pop(r.loop, None)
                if open_turn is None:
                    self.bad(seq, "turn ended at most once", f"turn {e.turn} is not open")
                elif open_turn != e.turn:
                    self.bad(seq, "turn.ended names the open turn", f"turn {e.turn} ≠ {open_turn}")
            case ModelCallStarted():
                _check_tail(seq, state.messages, self.bad)
            case CompactionStarted():
                self.compactions[e.attempt_id] = e.basis
            case CompactionCommitted():
                basis = self.compactions.pop(e.attempt_id, None)
                if basis is None:
                    self.bad(seq, "compaction has a matching start", e.attempt_id)
                elif basis != e.basis:
                    self.bad(
                        seq, "compaction basis matches its start", f"{e.basis} ≠ started {basis}"
                    )
                elif e.basis != state.history_seq:
                    self.bad(
                        seq,
                        "compaction basis is current",
                        f"basis {e.basis} but history changed at seq {state.history_seq}",
                    )
                if (
                    e.replaced < 1
                    or e.retained < 0
                    or e.replaced + e.retained != len(state.messages)
                ):
                    self.bad(
                        seq,
                        "compaction range valid",
                        f"replaced {e.replaced} + retained {e.retained} ≠ "
                        f"{len(state.messages)} messages in context",
                    )
            case CompactionRejected():
                self.compactions.pop(e.attempt_id, None)
            case SessionCheckpoint():
                self.checkpoint(seq, e)
            case (
                LoopStarted()
                | LoopModeChanged()
                | LoopStopped()
                | InputQueued()
                | InputCancelled()
                | SteerQueued()
                | SteerApplied()
                | ModelOutput()
                | ModelMessageCommitted()
                | ModelCallFailed()
                | ContextMeasured()
                | ChildStarted()
                | ChildFinished()
                | Notice()
                | CollabStarted()
                | CollabTurn()
                | CollabTaskStarted()
                | CollabTaskFinished()
                | CollabControlled()
                | CollabEnded()
            ):
                pass
            case _:
                assert_never(e)

    def checkpoint(self, seq: int, e: SessionCheckpoint) -> None:
        """A checkpoint must be exactly the fold of every record before it,
        or a restore that starts from it would start from a lie."""
        if e.previous == 0:
            # A new chain: every loop must be in it, in full.
            self.checkpoint_seq = 0
            self.checkpoint_messages = {}
            self.checkpoint_verified = {}
        elif e.previous != self.checkpoint_seq:
            self.bad(
                seq,
                "checkpoint chain linked",
                f"previous {e.previous}, but the last checkpoint is at seq {self.checkpoint_seq}",
            )
        imaged = set()
        for image in e.loops:
            imaged.add(image.loop)
            # The messages this image holds are proven only if it passes: a
            # later delta keeping them must not count them as checked.
            verified = self.checkpoint_verified.pop(image.loop, None)
            held = self.checkpoint_messages.setdefault(image.loop, [])
            if not 0 <= image.kept <= len(held):
                self.bad(
                    seq,
                    "checkpoint chain linked",
                    f"loop {image.loop} keeps {image.kept} of {len(held)} messages",
                )
            del held[image.kept :]
            held.extend(image.messages)
            folded = self.states.get(image.loop)
            try:
                pictured = image_state(image.state)
            except msgspec.DecodeError as exc:
                self.bad(seq, "checkpoint equals the fold before it", f"loop {image.loop}: {exc}")
                continue
            if folded is None or not self._same(image, held, pictured, folded, verified):
                differ = (
                    ["the whole loop (it has no records)"]
                    if folded is None
                    else [
                        f
                        for f in LoopState.__struct_fields__
                        if getattr(pictured, f) != getattr(folded, f)
                    ]
                )
                self.bad(
                    seq,
                    "checkpoint equals the fold before it",
                    f"loop {image.loop} differs in {', '.join(differ)}",
                )
            else:
                self.checkpoint_verified[image.loop] = (folded.messages, len(folded.messages))
        for loop_id, state in self.states.items():
            if state.loop and loop_id not in imaged and state.last_seq > self.checkpoint_seq:
                self.bad(
                    seq,
                    "checkpoint equals the fold before it",
                    f"loop {loop_id} changed since the previous checkpoint but is left out",
                )
        self.checkpoint_seq = seq

    def _same(
        self,
        image: LoopImage,
        held: list[Message],
        pictured: LoopState,
        folded: LoopState,
        verified: tuple[list[Message], int] | None,
    ) -> bool:
        """Whether the image (messages rebuilt from the chain: ``held``) is the fold.

        Linear over a whole journal: when the loop's message list is the very
        list checked equal at its previous checkpoint, grown only by appends
        (the fold never changes a message in place), the messages the image
        keeps were proven then and only the ones it adds are compared now."""
        messages = folded.messages
        if (
            verified is not None
            and verified[0] is messages
            and image.kept <= verified[1] <= len(messages)
        ):
            same_messages = len(held) == len(messages) and messages[image.kept :] == list(
                image.messages
            )
        else:
            same_messages = held == messages
        # The rest of the state, with the messages already settled.
        pictured.messages = messages
        equal = same_messages and pictured == folded
        if not equal:
            pictured.messages = list(held)
        return equal

    def after_fold(self, r: Record, state: LoopState) -> None:
        if isinstance(r.event, TurnEnded) and state.awaiting:
            self.bad(
                r.seq,
                "turn ends with every tool_use answered",
                "unanswered: " + ", ".join(state.awaiting),
            )


def _check_tail(
    seq: int, messages: Sequence[Message], bad: Callable[[int, str, str], None]
) -> None:
    """The context about to be sent answers the newest assistant message's
    tool calls exactly once (older ones were checked at earlier calls, so
    this stays O(tail) per call)."""
    start = len(messages)
    while start > 0 and messages[start - 1].role != "assistant":
        start -= 1
    start = max(0, start - 1)
    tail = merged(messages[start:])
    missing = unanswered_tool_uses(tail)
    if missing:
        bad(seq, "every tool_use answered before the next call", ", ".join(missing))
    seen: Counter[str] = Counter(
        b.tool_use_id for m in tail for b in m.blocks if isinstance(b, ToolResult)
    )
    twice = [k for k, n in seen.items() if n > 1]
    if twice:
        bad(seq, "every tool_use answered exactly once", ", ".join(twice))


# -- the command ----------------------------------------------------------------------

Format = Literal["transcript", "tree", "json"]


async def replay_command(
    url: str,
    session_id: str,
    *,
    fmt: Format = "transcript",
    check_only: bool = False,
    follow: bool = False,
    at: int | None = None,
    color: bool = False,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = print,
) -> int:
    """``loopruntime replay``: 0 when the output is complete (or the check
    passed), 1 when the journal is damaged or fails the check, 2 when the
    journal or session cannot be read at all.  Never writes to the journal."""
    if follow and (check_only or at is not None or fmt != "transcript"):
        err("loopruntime replay: --follow works with the transcript format only")
        return 2
    if at is not None and at < 0:
        err(f"loopruntime replay: --at takes a seq (0 or more), not {at}")
        return 2
    try:
        async with open_for_replay(url) as journal:
            if check_only:
                try:
                    report = await check(journal, session_id)
                except SessionNotFoundError as exc:
                    raise _no_session(journal, session_id) from exc
                for problem in report.problems:
                    err(str(problem))
                out(report.summary())
                return 0 if report.ok else 1
            if follow:
                return await _follow(journal, session_id, color, out, err)
            records: list[Record] = []
            damage: JournalError | None = None
            try:
                async for record in read_session(journal, session_id):
                    records.append(record)
            except ReplayInputError:
                raise
            except JournalError as exc:
                # Show everything before the damage, then say where it is.
                damage = exc
            if at is not None:
                try:
                    out(
                        render_states(
                            states_at(records, at), min(at, records[-1].seq if records else 0)
                        )
                    )
                except FoldError as exc:
                    err(f"loopruntime replay: {exc}; `replay --check` reports every problem")
                    return 1
            elif fmt == "transcript":
                out(render_transcript(records, color=color))
            elif fmt == "tree":
                out(render_tree(build_tree(session_id, records), color=color))
            else:
                out(tree_json(build_tree(session_id, records)).decode())
            if damage is not None:
                err(
                    f"loopruntime replay: the journal is damaged: {damage}; "
                    "`replay --check` names the first bad seq"
                )
                return 1
            return 0
    except ReplayInputError as exc:
        err(f"loopruntime replay: {exc}")
        return 2


def _no_session(journal: Journal, session_id: str) -> ReplayInputError:
    return ReplayInputError(
        f"there is no session {session_id} in journal {journal.url}; "
        "`loopruntime sessions` lists the sessions there are"
    )


async def _follow(
    journal: Journal,
    session_id: str,
    color: bool,
    out: Callable[[str], None],
    err: Callable[[str], None],
) -> int:
    """Print the transcript, then every record appended later, until the
    journal closes (or the reader is interrupted)."""
    renderer = TranscriptRenderer(color=color)
    try:
        async for record in journal.tail(session_id):
            for line in renderer.feed(record):
                out(line)
    except SessionNotFoundError as exc:
        raise _no_session(journal, session_id) from exc
    except JournalError as exc:
        err(f"loopruntime replay: the journal is damaged: {exc}")
        return 1
    return 0
