"""The conversation tree: its nodes and relations, its JSON format, its text form.

session → stream → epoch → talk → run → step (docs/replay.md).  The JSON
format is versioned (``TREE_SCHEMA``/``TREE_VERSION``): a new field gets a
default and keeps the version; a field that changes type or meaning, or a
kind that goes, bumps it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from .causes import Cause
from .text import painted, short

TREE_SCHEMA = "loopruntime.replay.tree"

TREE_VERSION = 2
"""Bumped when a field changes meaning or type; new fields get defaults and
keep the version (docs/replay.md).  2: ``reports`` runs from the input
carrying a child's result to the child's stream, as in the unified model."""

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


class ConfigNode(msgspec.Struct, **_S):
    """What the loop runs under was recorded or changed: ``kind`` is the
    record's tag (``loop.configured``, ``loop.reconfigured``,
    ``loop.inference_changed``, ``loop.tools_replaced``)."""

    id: str
    seq: int
    kind: str
    text: str


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
    form: dict[str, Any] | None = None
    """A form question's JSON Schema (its answer is JSON that fits it)."""
    url: str | None = None
    """The URL a person was asked to open and confirm."""
    answered_by: str | None = None
    """The principal that answered, when the command said."""


class ProgressNode(msgspec.Struct, **_S):
    """A running tool call's report of how far it got (``tool.progress``)."""

    seq: int
    message: str
    fraction: float | None = None
    coalesced: int = 0
    """Reports this one replaced, made faster than the loop records them."""


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
    principal: str | None = None
    """Who queued it, when the command said."""


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
    progress: list[ProgressNode] = []
    """The call's progress reports, in order (``tool.progress``)."""


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
    configs: list[ConfigNode] = []
    """Configuration recorded or changed in this epoch (deploys, choices)."""


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
    forked_from: Lineage | None = None
    """Where this session was cut from, when it is a fork."""
    causes: list[Cause] = []
    """Every record that names a cause, with the seq of that cause."""
    writers: list[WriterNode] = []
    """Who appended the records, in seq order (``Journal.writers``); empty
    for a journal that kept no writers when they were written."""


class WriterNode(msgspec.Struct, **_S):
    """The records from ``first_seq`` up to the next writer's were appended
    under the lease of ``incarnation``, held by ``host`` (null for a lease
    taken without a host, by an embedded session)."""

    first_seq: int
    incarnation: int
    host: str | None = None


class Lineage(msgspec.Struct, **_S):
    """A fork's source: the session and the seq it was cut at."""

    session: str
    seq: int


def tree_json(tree: Tree) -> bytes:
    """The tree in the JSON format of docs/replay.md (``schema``/``version`` first)."""
    return msgspec.json.encode(tree)


def tree_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``tree_json``'s output, generated from the Structs."""
    return msgspec.json.schema(Tree)


# Reads top to bottom as the text it prints (streams, then their epochs,
# talks, runs and steps, then the relations): split, the layout would scatter.
def render_tree(tree: Tree, *, color: bool = False) -> str:
    """The tree as indented text, relations listed at the end."""

    def paint(kind: str, text: str) -> str:
        return painted(kind, text, color=color)

    out = [f"session {tree.session} (head seq {tree.head}, {TREE_SCHEMA}/{TREE_VERSION})"]
    if tree.forked_from is not None:
        out.append(
            f"  forked from session {tree.forked_from.session} at seq {tree.forked_from.seq}"
        )
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
            for cfg in ep.configs:
                mark = "⟳ " if cfg.kind == "loop.reconfigured" else ""
                out.append(
                    "      "
                    + paint("dim", f"{mark}{cfg.kind} seq {cfg.seq}: ")
                    + short(cfg.text, 160)
                )
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
                        out.append("          " + paint("user", "steer: ") + short(text, 100))
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
                                        "gate", f"gate {g.kind}: {short(g.prompt, 60)} → {closed}"
                                    )
                                )
                            if step.progress:
                                out.append("            " + _render_progress(step.progress))
        queued = [i for i in s.inputs if i.status == "queued"]
        for i in queued:
            out.append(f"    queued input {i.input_id} ({i.trigger}): {short(i.text, 80)}")
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


def _render_progress(reports: list[ProgressNode]) -> str:
    """The newest report of a call, and how many it made (the tree keeps all)."""
    last = reports[-1]
    done = f" {last.fraction:.0%}" if last.fraction is not None else ""
    return f"progress{done}: {short(last.message, 80)} ({len(reports)} recorded)"


def _render_step(step: Step, paint: Callable[[str, str], str]) -> str:
    if isinstance(step, ModelStep):
        bits = []
        if step.text:
            bits.append(paint("assistant", short(step.text, 100)))
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
    result = f" → {short(step.result, 80)}" if step.result else ""
    return (
        paint("tool", f"tool {step.name} ")
        + short(step.input, 60)
        + f" [{step.status}{took}{synthetic}]"
        + result
    )
