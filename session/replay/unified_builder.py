"""Build the unified conversation model from a session's records (pure).

The conversation tree already folds runs, steps, epochs and talks; this
module names them in the seed's vocabulary, adds what the tree does not keep
(who a result reports, redacted inputs, children's outputs, activity
segments) from one more pass over the same records, and qualifies every join.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import msgspec

from journal import Record
from journal.events import (
    ChildFinished,
    ChildStarted,
    CollabStarted,
    InputCancelled,
    InputQueued,
    ModelCallFailed,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)

from .tree import Epoch, InputNode, ModelStep, Run, Stream, Talk, ToolStep, Tree
from .tree_builder import build_tree
from .unified import (
    DEFAULT_CONTENT_LIMIT,
    UNIFIED_SCHEMA,
    UNIFIED_VERSION,
    ClaimState,
    ContentState,
    Document,
    Node,
    NodeKind,
    Quality,
    Relation,
    RelationType,
    StreamRole,
    Trigger,
)

RESULT_MARKER = "[result of child loop "
"""How the runtime words a child's result input (the join old journals need)."""


class _Facts(msgspec.Struct, kw_only=True):
    """What the tree does not keep, read from the records in one pass."""

    redacted: set[str] = msgspec.field(default_factory=set)
    """tool_use ids whose recorded input is the redacted form."""
    reports: dict[str, str] = {}
    """input id -> the child loop it reports, as the record says."""
    started: dict[str, list[tuple[int, ChildStarted]]] = {}
    """child loop -> the child.started records that name it."""
    finished: dict[str, tuple[int, ChildFinished]] = {}
    failed_calls: dict[str, tuple[int, str]] = {}
    """effect id -> (seq, code) of its model.call_failed."""
    turn_at: dict[tuple[str, int], list[tuple[int, int]]] = {}
    """(loop, turn) -> [(seq, at)] of its turn.started and turn.ended."""
    auxiliary: set[str] = msgspec.field(default_factory=set)
    input_seq: dict[str, int] = {}
    """input id -> the seq that cancelled it by request."""


def _facts(records: list[Record]) -> _Facts:
    f = _Facts()
    f.started = defaultdict(list)
    f.turn_at = defaultdict(list)
    for r in records:
        e = r.event
        if isinstance(e, ToolStarted) and e.input_digest:
            f.redacted.add(e.tool_use_id)
        elif isinstance(e, InputQueued) and e.child_loop is not None:
            f.reports[e.input_id] = e.child_loop
        elif isinstance(e, ChildStarted):
            f.started[e.child_loop].append((r.seq, e))
        elif isinstance(e, ChildFinished):
            f.finished[e.child_loop] = (r.seq, e)
        elif isinstance(e, ModelCallFailed):
            f.failed_calls[e.effect_id] = (r.seq, e.code)
        elif isinstance(e, (TurnStarted, TurnEnded)):
            f.turn_at[(r.loop, e.turn)].append((r.seq, r.at))
        elif isinstance(e, CollabStarted):
            f.auxiliary.add(r.loop)
        elif isinstance(e, InputCancelled) and e.reason == "requested":
            f.input_seq[e.input_id] = r.seq
    return f


def segment_windows(records: list[Record]) -> list[tuple[int, int]]:
    """The session's activity windows as (first seq, last seq).

    A window opens at an external input queued while the session is quiet and
    closes at the record after which no loop has a turn open or an input
    queued; a window still open at the head ends at the head."""
    open_turns: set[str] = set()
    queued: set[str] = set()
    windows: list[tuple[int, int]] = []
    start: int | None = None
    for r in records:
        e = r.event
        if isinstance(e, InputQueued):
            queued.add(e.input_id)
            if start is None and e.trigger == "external":
                start = r.seq
        elif isinstance(e, InputCancelled):
            queued.discard(e.input_id)
        elif isinstance(e, TurnStarted):
            open_turns.add(r.loop)
            queued.difference_update(e.input_ids)
            if start is None:
                start = r.seq
        elif isinstance(e, TurnEnded):
            open_turns.discard(r.loop)
        if start is not None and not open_turns and not queued:
            windows.append((start, r.seq))
            start = None
    if start is not None and records:
        windows.append((start, records[-1].seq))
    return windows


class _Assembler:
    """Turns the tree into nodes and relations (one method per level)."""

    def __init__(self, tree: Tree, facts: _Facts, limit: int) -> None:
        self.tree = tree
        self.facts = facts
        self.limit = limit
        self.nodes: dict[str, Node] = {}
        self.relations: list[Relation] = []
        self.by_execution: dict[str, str] = {}
        """execution id -> the tool node that ran it."""
        self.call_of_child: dict[str, list[str]] = defaultdict(list)
        """child loop -> the agent.call nodes that started it."""
        root = tree.forked_from.session if tree.forked_from is not None else tree.session
        self.conversation = f"conversation:{root}"
        self.session = f"session:{tree.session}"
        self.pending_reports: list[tuple[str, str, Quality, str]] = []
        """(notification, child loop, quality, via): joined once every stream is in."""

    # -- helpers ---------------------------------------------------------------

    def add(self, node: Node) -> Node:
        node.seqs = sorted(set(node.seqs))
        self.nodes[node.id] = node
        return node

    def relate(
        self, type: RelationType, source: str, target: str, quality: Quality, *via: str
    ) -> None:
        self.relations.append(
            Relation(type=type, from_=source, to=target, quality=quality, via=list(via))
        )

    def join(self, type: RelationType, source: str, targets: list[str], key: str) -> None:
        """A join by an exact key: unique, or ambiguous to every candidate
        (never resolved by choosing one)."""
        quality: Quality = "exact_unique" if len(targets) == 1 else "exact_ambiguous"
        for target in targets:
            self.relate(type, source, target, quality, key)

    def payload(self, text: str, state: ContentState = "available") -> dict[str, Any]:
        size = len(text.encode())
        if state in ("available", "truncated") and size > self.limit:
            return {"content": "size_only", "text": "", "size": size}
        return {"content": state, "text": text, "size": size}

    # -- the spine -------------------------------------------------------------

    def spine(self) -> None:
        tree = self.tree
        self.add(Node(id=self.conversation, kind="conversation", parent=None))
        attrs: dict[str, Any] = {"checkpoints": list(tree.checkpoints)}
        if tree.forked_from is not None:
            source = tree.forked_from
            # Known from the fork record only: its own records are another session's.
            self.add(
                Node(
                    id=f"session:{source.session}",
                    kind="session",
                    parent=self.conversation,
                    seqs=[1],
                    claim="observed_report_only",
                    attrs={"fork_seq": source.seq},
                )
            )
            attrs["forked_from"] = {"session": source.session, "seq": source.seq}
        self.add(
            Node(
                id=self.session,
                kind="session",
                parent=self.conversation,
                seqs=[1] if tree.head else [],
                attrs=attrs,
            )
        )
        for stream in tree.streams:
            self.stream(stream)
        self.unseen_children()
        for stream in tree.streams:
            self.child_ends(stream)

    def role(self, stream: Stream) -> StreamRole:
        if stream.loop in self.facts.auxiliary:
            return "auxiliary"
        return "child" if stream.parent_loop else "main"

    def stream(self, stream: Stream) -> None:
        self.add(
            Node(
                id=stream.id,
                kind="stream",
                parent=self.session,
                seqs=[stream.first_seq, stream.last_seq],
                role=self.role(stream),
                attrs={
                    "loop": stream.loop,
                    "definition": stream.definition,
                    "model": stream.model,
                    "status": stream.status,
                },
            )
        )
        previous: Epoch | None = None
        for epoch in stream.epochs:
            self.epoch(stream, epoch, previous)
            previous = epoch
        for node in stream.inputs:
            if node.run is None:
                self.input(node, self.epoch_at(stream, node.seq), None)

    def epoch_at(self, stream: Stream, seq: int) -> str:
        return next(
            (e.id for e in reversed(stream.epochs) if e.first_seq <= seq), stream.epochs[0].id
        )

    def epoch(self, stream: Stream, epoch: Epoch, previous: Epoch | None) -> None:
        self.add(
            Node(
                id=epoch.id,
                kind="epoch",
                parent=stream.id,
                seqs=[epoch.first_seq, epoch.last_seq],
                attrs={"index": epoch.index},
            )
        )
        cut = epoch.compaction
        if cut is not None and previous is not None:
            boundary = self.add(
                Node(
                    id=f"boundary:{cut.attempt_id}",
                    kind="epoch.boundary",
                    parent=epoch.id,
                    seqs=[cut.seq],
                    attrs={"basis": cut.basis, "replaced": cut.replaced, "retained": cut.retained},
                )
            )
            summary = self.add(
                Node(
                    id=f"summary:{cut.attempt_id}",
                    kind="epoch.summary",
                    parent=epoch.id,
                    seqs=[cut.seq],
                    attrs={"obligations": list(cut.obligations)},
                    **self.payload(cut.summary),
                )
            )
            self.relate("summarizes", summary.id, boundary.id, "exact_unique", cut.attempt_id)
            self.relate("follows", epoch.id, previous.id, "exact_unique", cut.attempt_id)
        for notice in epoch.notices:
            self.notice(notice.id, epoch.id, notice.seq, notice.code, notice.text)
        for config in epoch.configs:
            if config.kind in ("loop.configured", "tools.loaded"):
                continue  # how the loop began, not a command
            self.add(
                Node(
                    id=config.id,
                    kind="control.command",
                    parent=epoch.id,
                    seqs=[config.seq],
                    attrs={"record": config.kind},
                    **self.payload(config.text),
                )
            )
        for talk in epoch.talks:
            self.talk(stream, epoch, talk)

    def talk(self, stream: Stream, epoch: Epoch, talk: Talk) -> None:
        trigger: Trigger = "unknown"
        if talk.opened_by == "external":
            trigger = "external"
        elif talk.opened_by == "epoch":
            trigger = "notification" if self.opened_by_notice(stream, talk) else "unknown"
        seqs = [talk.first_seq] + [r.last_seq for r in talk.runs]
        self.add(Node(id=talk.id, kind="talk", parent=epoch.id, seqs=seqs, trigger=trigger))
        for run in talk.runs:
            self.run(stream, talk, run)

    def opened_by_notice(self, stream: Stream, talk: Talk) -> bool:
        ids = {i for run in talk.runs for i in run.input_ids}
        return any(i.input_id in ids and i.trigger != "external" for i in stream.inputs)

    # -- a run and its steps ---------------------------------------------------

    def run(self, stream: Stream, talk: Talk, run: Run) -> None:
        self.add(
            Node(
                id=run.id,
                kind="run",
                parent=talk.id,
                seqs=[run.first_seq, run.last_seq],
                attrs={
                    "turn": run.turn,
                    "part": run.segment,
                    "outcome": run.outcome,
                    "code": run.code,
                },
            )
        )
        inputs = [i for i in stream.inputs if i.run == run.id and run.segment == 0]
        for node in inputs:
            self.input(node, run.id, run)
        for n, text in enumerate(run.steering):
            self.add(
                Node(
                    id=f"{run.id}:steer:{n}",
                    kind="message.external",
                    parent=run.id,
                    seqs=[run.first_seq],
                    attrs={"steer_id": run.steer_ids[n] if n < len(run.steer_ids) else ""},
                    **self.payload(text),
                )
            )
        for notice in run.notices:
            self.notice(notice.id, run.id, notice.seq, notice.code, notice.text)
        pending: list[str] = [f"input:{stream.loop}:{i.input_id}" for i in inputs]
        first_call = True
        for step in run.steps:
            if isinstance(step, ModelStep):
                call = self.model_step(stream, run, step)
                for source in pending:
                    exact = first_call and source.startswith("input:")
                    quality: Quality = "exact_unique" if exact else "strong_inference"
                    via = source.split(":", 2)[2] if exact else "position in the run"
                    self.relate("input_of", source, call, quality, via)
                pending, first_call = self.outputs_of(step), False
            else:
                pending.append(self.tool_step(stream, run, step))
        self.turn_end(stream, run)

    def input(self, node: InputNode, parent: str, run: Run | None) -> None:
        kind: NodeKind = "message.external"
        if node.trigger in ("notification", "subagent"):
            kind = "runtime.notification"
        elif node.synthetic:
            kind = "control.notice"
        attrs: dict[str, Any] = {"input_id": node.input_id, "trigger": node.trigger}
        attrs["status"] = node.status
        self.add(
            Node(
                id=node.id,
                kind=kind,
                parent=parent,
                seqs=[node.seq] + ([node.cancelled_seq] if node.cancelled_seq else []),
                attrs=attrs,
                **self.payload(node.text),
            )
        )
        if kind == "runtime.notification":
            self.report(node)
        if node.status == "cancelled":
            self.cancelled_input(node, parent)

    def report(self, node: InputNode) -> None:
        """The notification reports the child it names; old journals name it
        only in the input's text."""
        child = self.facts.reports.get(node.input_id)
        quality: Quality = "exact_unique"
        via = child or ""
        if child is None and node.text.startswith(RESULT_MARKER):
            child = node.text[len(RESULT_MARKER) :].split("]", 1)[0].split(" (", 1)[0]
            quality, via = "strong_inference", "input text"
        if not child:
            return
        self.pending_reports.append((node.id, child, quality, via))

    def cancelled_input(self, node: InputNode, parent: str) -> None:
        if node.reason == "turn_interrupted" and parent.startswith("epoch:"):
            return  # the interrupt of the run before it cancels it (see turn_end)
        seq = self.facts.input_seq.get(node.input_id)
        if node.reason == "requested" and seq is not None:
            command = self.add(
                Node(
                    id=f"command:{seq}",
                    kind="control.command",
                    parent=parent,
                    seqs=[seq],
                    attrs={"record": "input.cancelled", "input_id": node.input_id},
                )
            )
            self.relate("cancels", command.id, node.id, "exact_unique", node.input_id)

    def model_step(self, stream: Stream, run: Run, step: ModelStep) -> str:
        """One provider attempt (``llm.call``) and what it produced."""
        call = self.add(
            Node(
                id=step.id,
                kind="llm.call",
                parent=run.id,
                seqs=list(step.seqs),
                content="available" if step.committed or step.failed else "unavailable",
                attrs={
                    "effect_id": step.effect_id,
                    "model": step.model,
                    "step": step.index,
                    "stop_reason": step.stop_reason,
                    "input_tokens": step.input_tokens,
                    "output_tokens": step.output_tokens,
                },
            )
        )
        failed = self.facts.failed_calls.get(step.effect_id)
        if failed is not None:
            self.add(
                Node(
                    id=f"{step.id}:error",
                    kind="error.api",
                    parent=run.id,
                    seqs=[failed[0]],
                    attrs={"code": failed[1]},
                )
            )
        if not step.committed:
            return call.id
        seq = step.last_seq
        if step.thinking_chars:
            self.add(
                Node(
                    id=f"{step.id}:thinking",
                    kind="thinking",
                    parent=run.id,
                    seqs=[seq],
                    content="size_only",
                    size=step.thinking_chars,
                )
            )
        if step.synthetic:
            self.add(
                Node(
                    id=f"{step.id}:message",
                    kind="message.synthetic",
                    parent=run.id,
                    seqs=[seq],
                    attrs={"notice": step.notice},
                    **self.payload(step.notice_text or step.text),
                )
            )
        elif step.text:
            state: ContentState = "truncated" if step.notice else "available"
            self.add(
                Node(
                    id=f"{step.id}:message",
                    kind="message.assistant",
                    parent=run.id,
                    seqs=[seq],
                    attrs={"notice": step.notice},
                    **self.payload(step.text, state),
                )
            )
        return call.id

    def outputs_of(self, step: ModelStep) -> list[str]:
        """What of a reply the next call reads (its tool results join later)."""
        message = f"{step.id}:message"
        return [message] if message in self.nodes else []

    def tool_step(self, stream: Stream, run: Run, step: ToolStep) -> str:
        """One tool use is ONE step: request, execution and result."""
        children = [
            c
            for c, starts in self.facts.started.items()
            if any(
                s.provenance.execution_id == step.execution_id and step.execution_id
                for _, s in starts
            )
        ]
        kind: NodeKind = "agent.call" if children else "tool"
        claim: ClaimState = "observed_replayable"
        if step.status == "requested":
            claim = "proposed"  # the model asked; nothing ran or answered
        elif step.status == "resolved" and step.synthetic:
            claim = "observed_report_only"  # the host's word for an unseen outcome
        state: ContentState = "available"
        if step.tool_use_id in self.facts.redacted:
            state = "redacted"
        elif step.truncated_bytes:
            state = "truncated"
        elif step.status in ("unknown", "requested", "running"):
            state = "unavailable"
        node = self.add(
            Node(
                id=step.id,
                kind=kind,
                parent=run.id,
                seqs=list(step.seqs),
                claim=claim,
                attrs={
                    "tool_use_id": step.tool_use_id,
                    "execution_id": step.execution_id,
                    "name": step.name,
                    "input": step.input,
                    "status": step.status,
                    "is_error": step.is_error,
                    "synthetic": step.synthetic,
                    "duration_ns": step.duration_ns,
                },
                **self.payload(step.result, state),
            )
        )
        if step.execution_id:
            self.by_execution[step.execution_id] = node.id
        for child in children:
            self.call_of_child[child].append(node.id)
            self.launch(run, node.id, child)
        for gate in step.gates:
            self.add(
                Node(
                    id=gate.id,
                    kind="control.permission",
                    parent=run.id,
                    seqs=[gate.seq] + ([gate.closed_seq] if gate.closed_seq else []),
                    claim="proposed" if gate.status == "open" else "observed_replayable",
                    attrs={
                        "gate_kind": gate.kind,
                        "status": gate.status,
                        "tool_use_id": step.tool_use_id,
                        "allow": gate.allow,
                        "answer": gate.answer,
                    },
                    **self.payload(gate.prompt),
                )
            )
        return node.id

    def launch(self, run: Run, call: str, child: str) -> None:
        """The child.started record: the launch acknowledged, and the call
        starts the child's stream."""
        for seq, started in self.facts.started[child]:
            ack = self.add(
                Node(
                    id=f"launch:{child}:{seq}",
                    kind="agent.launch_ack",
                    parent=run.id,
                    seqs=[seq],
                    attrs={"child_loop": child, "background": started.background},
                    **self.payload(f"started child loop {child} ({started.definition})"),
                )
            )
            self.relate("result_of", ack.id, call, "exact_unique", started.provenance.execution_id)
        self.relate("starts", call, f"stream:{child}", "exact_unique", child)

    def turn_end(self, stream: Stream, run: Run) -> None:
        """turn.duration, and the interrupt that ended the run."""
        if run.outcome is None:
            return  # open, or a part a compaction cut: the last part ends the turn
        marks = self.facts.turn_at.get((stream.loop, run.turn), [])
        if len(marks) >= 2:
            (first, began), (last, ended) = marks[0], marks[-1]
            self.add(
                Node(
                    id=f"{run.id}:duration",
                    kind="turn.duration",
                    parent=run.id,
                    seqs=[first, last],
                    # The records' clock is informational: reported, not replayed.
                    claim="observed_report_only",
                    attrs={"duration_ns": max(0, ended - began)},
                )
            )
        if run.outcome == "interrupted" and marks:
            interrupt = self.add(
                Node(
                    id=f"{run.id}:interrupt",
                    kind="control.interrupt",
                    parent=run.id,
                    seqs=[marks[-1][0]],
                    attrs={"code": run.code},
                )
            )
            self.relate("cancels", interrupt.id, run.id, "exact_unique", f"turn {run.turn}")
            for step in run.steps:
                if isinstance(step, ToolStep) and step.status == "interrupted":
                    self.relate(
                        "cancels", interrupt.id, step.id, "strong_inference", step.execution_id
                    )
            for node in stream.inputs:
                if node.status == "cancelled" and node.reason == "turn_interrupted":
                    if node.cancelled_seq is not None and node.cancelled_seq >= run.first_seq:
                        self.relate(
                            "cancels", interrupt.id, node.id, "strong_inference", node.input_id
                        )

    def notice(self, id: str, parent: str, seq: int, code: str, text: str) -> None:
        self.add(
            Node(
                id=id,
                kind="control.notice",
                parent=parent,
                seqs=[seq],
                attrs={"code": code},
                **self.payload(text),
            )
        )

    # -- across streams --------------------------------------------------------

    def unseen_children(self) -> None:
        """A child the records start but never show is unavailable, never
        made up."""
        for child in self.facts.started:
            sid = f"stream:{child}"
            if sid not in self.nodes:
                self.add(
                    Node(
                        id=sid,
                        kind="stream",
                        parent=self.session,
                        seqs=[seq for seq, _ in self.facts.started[child]],
                        role="child",
                        claim="unavailable",
                        attrs={"loop": child},
                    )
                )

    def child_ends(self, stream: Stream) -> None:
        """The child's output (owned by the child), and what points at it."""
        finished = self.facts.finished.get(stream.loop)
        if finished is None or not stream.parent_loop:
            return
        seq, event = finished
        last_run = next(
            (
                r.id
                for e in reversed(stream.epochs)
                for t in reversed(e.talks)
                for r in reversed(t.runs)
            ),
            None,
        )
        output = self.add(
            Node(
                id=f"output:{stream.loop}",
                kind="agent.output",
                parent=last_run or stream.epochs[-1].id,
                seqs=[seq],
                attrs={"status": event.status, "rejected": event.rejected},
                **self.payload(event.output),
            )
        )
        self.relate("ends_with", stream.id, output.id, "exact_unique", stream.loop)

    def cross_stream(self) -> None:
        for note, child, quality, via in self.pending_reports:
            target = f"stream:{child}"
            if target not in self.nodes:
                continue
            self.relate("reports", note, target, quality, via)
            calls = self.call_of_child.get(child, [])
            if quality == "exact_unique":
                self.join("result_of", note, calls, child)
            else:
                for call in calls:
                    self.relate("result_of", note, call, quality, via)
        self.stream_retries()

    def stream_retries(self) -> None:
        """A child started again with the same definition by the same parent
        after the first one failed: by that coincidence only, so weak."""
        streams = [s for s in self.tree.streams if s.parent_loop]
        for later in streams:
            for earlier in streams:
                done = self.facts.finished.get(earlier.loop)
                if (
                    earlier is not later
                    and done is not None
                    and done[1].status in ("failed", "crashed")
                    and earlier.parent_loop == later.parent_loop
                    and earlier.definition == later.definition
                    and done[0] < later.first_seq
                ):
                    self.relate(
                        "retries",
                        later.id,
                        earlier.id,
                        "weak_inference",
                        "same definition after failure",
                    )
                    break

    def run_retries(self) -> None:
        """The tree's retries, qualified: a call cut off is retried by the next
        (strong); the same words after a failed run (weak)."""
        for rel in self.tree.relations:
            if (
                rel.kind != "retries"
                or rel.source not in self.nodes
                or rel.target not in self.nodes
            ):
                continue
            quality: Quality = (
                "weak_inference" if rel.via == "same input text" else "strong_inference"
            )
            self.relate("retries", rel.source, rel.target, quality, rel.via)

    def segments(self, windows: list[tuple[int, int]]) -> None:
        talks = [n for n in self.nodes.values() if n.kind == "talk"]
        for index, (first, last) in enumerate(windows, 1):
            seg = self.add(
                Node(
                    id=f"segment:{self.tree.session}:{index}",
                    kind="segment",
                    parent=self.conversation,
                    seqs=[first, last],
                )
            )
            for talk in talks:
                if talk.seqs and first <= talk.seqs[0] <= last:
                    self.relate(
                        "in_segment", talk.id, seg.id, "exact_unique", f"seq {first}-{last}"
                    )


def build_unified(
    session_id: str, records: Iterable[Record], *, content_limit: int = DEFAULT_CONTENT_LIMIT
) -> Document:
    """The unified conversation model of one session's records (pure).

    Records must be one session's, in seq order (a prefix is fine).  A payload
    longer than ``content_limit`` bytes is held as ``size_only``."""
    seen = list(records)
    tree = build_tree(session_id, seen)
    assembler = _Assembler(tree, _facts(seen), content_limit)
    assembler.spine()
    assembler.cross_stream()
    assembler.run_retries()
    assembler.segments(segment_windows(seen))
    return Document(
        schema=UNIFIED_SCHEMA,
        version=UNIFIED_VERSION,
        session=session_id,
        head=tree.head,
        content_limit=content_limit,
        nodes=list(assembler.nodes.values()),
        relations=assembler.relations,
    )
