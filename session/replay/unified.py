"""The unified conversation model: one versioned JSON document in the seed's words.

Nodes sit on one containment spine (conversation → session → stream → epoch
→ talk → run → step); everything else is a typed relation carrying its
correlation quality and the ids that joined its ends.  The document is built
from the conversation tree (``tree_builder``) plus the few facts the tree
does not keep, read from the same records: pure, like every projection.
docs/replay.md describes it field by field.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

UNIFIED_SCHEMA = "loopruntime.replay.unified"

UNIFIED_VERSION = 1
"""Bumped when a field changes meaning or type, or a kind goes; new fields get
defaults and keep the version (docs/replay.md)."""

DEFAULT_CONTENT_LIMIT = 64 * 1024
"""Bytes of one payload the document holds inline; a longer one is
``size_only`` (docs/boundaries.md)."""

NodeKind = Literal[
    "conversation",
    "segment",
    "session",
    "stream",
    "epoch",
    "talk",
    "run",
    "message.external",
    "message.assistant",
    "message.synthetic",
    "context.injection",
    "llm.call",
    "thinking",
    "tool",
    "agent.call",
    "agent.launch_ack",
    "agent.output",
    "runtime.notification",
    "epoch.boundary",
    "epoch.summary",
    "error.api",
    "control.interrupt",
    "control.permission",
    "control.command",
    "control.notice",
    "turn.duration",
]
STRUCTURAL_KINDS: tuple[NodeKind, ...] = (
    "conversation",
    "segment",
    "session",
    "stream",
    "epoch",
    "talk",
    "run",
)
RelationType = Literal[
    "starts",
    "reports",
    "ends_with",
    "result_of",
    "follows",
    "summarizes",
    "in_segment",
    "retries",
    "cancels",
    "input_of",
]
Quality = Literal[
    "exact_unique",
    "exact_ambiguous",
    "strong_inference",
    "weak_inference",
    "unresolved",
    "conflict",
]
ClaimState = Literal["observed_replayable", "observed_report_only", "proposed", "unavailable"]
ContentState = Literal[
    "available", "redacted", "omitted", "hash_only", "size_only", "truncated", "unavailable"
]
StreamRole = Literal["main", "child", "auxiliary", "judge"]
Trigger = Literal["external", "notification", "unknown"]


def starts_talk(trigger: Trigger) -> bool:
    """Only external input begins a talk: a child finishing and the parent
    resuming is the same interaction going on."""
    return trigger == "external"


def counts_as_agent_output(kind: NodeKind) -> bool:
    """Only ``message.assistant`` is output the agent produced: a synthetic
    message or a runtime notice carries no model's words."""
    return kind == "message.assistant"


def owned_by_child_stream(kind: NodeKind) -> bool:
    """``agent.output`` belongs to the child that produced it, not to the
    parent that waited for it."""
    return kind == "agent.output"


class Manifest(msgspec.Struct, kw_only=True):
    """What one ``llm.call``'s input was made of, as the fold built it."""

    after: str | None = None
    """The ``epoch.summary`` the input starts with (None: the epoch's first
    input, or a fork's inherited context)."""
    inherited: bool = False
    """The input begins with context a fork inherited from its source, whose
    records are not in this document."""
    seqs: list[int] = []
    """The records whose content the input held, in the order it holds them."""
    nodes: list[str] = []
    """The nodes of those records, each once, in the same order."""
    request: ContentState = "unavailable"
    """The request as sent: ``hash_only`` (the journal keeps its digest,
    ``fingerprint``) or ``unavailable`` (a journal from before digests)."""
    fingerprint: str = ""


class Node(msgspec.Struct, kw_only=True):
    """One node: structural (conversation … run) or a step (a leaf)."""

    id: str
    kind: NodeKind
    parent: str | None
    """The one containment parent (None for the conversation only)."""
    seqs: list[int] = []
    """The records this node came from, ascending."""
    claim: ClaimState = "observed_replayable"
    content: ContentState | None = None
    """The state of the node's payload; None when it carries none."""
    text: str = ""
    """The payload, when ``content`` is ``available``, ``redacted`` or ``truncated``."""
    size: int = 0
    """The payload's length in UTF-8 bytes (also when not held)."""
    role: StreamRole | None = None
    """For a stream."""
    trigger: Trigger | None = None
    """For a talk: what began it."""
    attrs: dict[str, Any] = {}
    """Runtime facts named in loopruntime's words (turn, outcome, tool name…)."""
    manifest: Manifest | None = None
    """For an ``llm.call``: what its input was made of."""


class Relation(msgspec.Struct, kw_only=True):
    """A typed edge read as a sentence: ``from`` <type> ``to``."""

    type: RelationType
    from_: str = msgspec.field(name="from")
    to: str
    quality: Quality
    via: list[str] = []
    """The ids (or the rule, for an inference) that joined the two ends."""


class Document(msgspec.Struct, kw_only=True):
    """The whole conversation a session belongs to, as far as its records say."""

    schema: str
    version: int
    session: str
    head: int
    """The last seq read."""
    content_limit: int
    nodes: list[Node] = []
    relations: list[Relation] = []


def unified_json(document: Document) -> bytes:
    """The document in the JSON format of docs/replay.md."""
    return msgspec.json.encode(document)


def unified_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``unified_json``'s output, generated from the Structs."""
    return msgspec.json.schema(Document)
