"""Build the unified conversation model from a session's records (pure).

The conversation tree already folds runs, steps, epochs and talks; this
module names them in the seed's vocabulary, level by level down the spine,
with what the tree does not keep read by ``unified_facts`` and the joins
across streams made by ``unified_links``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from journal import Record
from journal.events import ChildStarted

from .tree import Epoch, InputNode, ModelStep, NoticeNode, Run, Stream, Talk, ToolStep
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
    StreamRole,
    Trigger,
)
from .unified_facts import RESULT_MARKER, read_facts, segment_windows
from .unified_inputs import injection_id, read_call_inputs, steer_id
from .unified_links import NodeTable


class _Assembler(NodeTable):
    """Turns the tree into nodes and relations (one method per level)."""

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
                    # Its records are another session's: deliberately not here.
                    content="omitted",
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
        if stream.loop in self.facts.judges:
            return "judge"
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
                    **self.allowance(stream.loop),
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
            self.notice(stream, epoch.id, notice)
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
                    **self.direct_of(stream, run),
                },
            )
        )
        inputs = [i for i in stream.inputs if i.run == run.id and run.segment == 0]
        for node in inputs:
            self.input(node, run.id, run)
        for steer, text in zip(run.steer_ids, run.steering, strict=False):
            self.steer(stream, run, steer, text)
        for notice in run.notices:
            self.notice(stream, run.id, notice)
        previous: ModelStep | None = None
        for step in run.steps:
            if isinstance(step, ModelStep):
                call = self.model_step(stream, run, step)
                if previous is not None and previous.failed and previous.index == step.index:
                    self.relate(
                        "retries",
                        call,
                        self.call_id(stream, previous),
                        "strong_inference",
                        "the same step after a failed call",
                    )
                previous = step
            else:
                self.tool_step(stream, run, step)
        self.turn_end(stream, run)

    def steer(self, stream: Stream, run: Run, steer: str, text: str) -> None:
        """A person's steering is external input; what the runtime steers
        with (its reminder of a typed answer, its word that a budget ended
        the turn) is context it injected."""
        seqs = self.facts.steers.get(steer, [run.first_seq])
        source = self.facts.reminders.get(steer)
        self.add(
            Node(
                id=injection_id(stream.loop, seqs[0]) if source else steer_id(stream.loop, steer),
                kind="context.injection" if source else "message.external",
                parent=run.id,
                seqs=seqs,
                attrs={"steer_id": steer, "source": source or "steer"},
                **self.payload(text),
            )
        )

    def input(self, node: InputNode, parent: str, run: Run | None) -> None:
        kind: NodeKind = "message.external"
        if node.trigger in ("notification", "subagent"):
            kind = "runtime.notification"
        elif node.synthetic:
            kind = "context.injection"  # the model reads it; no person wrote it
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
        only in the input's text.  A record whose field and text name
        different children is a ``conflict``: neither is taken for the other."""
        recorded = self.facts.reports.get(node.input_id)
        written = None
        if node.text.startswith(RESULT_MARKER):
            written = node.text[len(RESULT_MARKER) :].split("]", 1)[0].split(" (", 1)[0]
        if recorded is not None and written is not None and written != recorded:
            for child in (recorded, written):
                self.pending_reports.append((node.id, child, "conflict", "field and text differ"))
        elif recorded is not None:
            self.pending_reports.append((node.id, recorded, "exact_unique", recorded))
        elif written:
            self.pending_reports.append((node.id, written, "strong_inference", "input text"))

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
                id=self.call_id(stream, step),
                kind="llm.call",
                parent=run.id,
                seqs=list(step.seqs),
                content="available" if step.committed or step.failed else "unavailable",
                manifest=self.manifest(step.effect_id),
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
                    id=f"{call.id}:error",
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
                    id=f"{call.id}:thinking",
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
                    id=f"{call.id}:message",
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
                    id=f"{call.id}:message",
                    kind="message.assistant",
                    parent=run.id,
                    seqs=[seq],
                    attrs={"notice": step.notice},
                    **self.payload(step.text, state),
                )
            )
        return call.id

    def call_id(self, stream: Stream, step: ModelStep) -> str:
        """By effect id: a call retried at the same turn and step is another
        attempt, another node."""
        node_id = f"call:{stream.loop}:{step.effect_id}"
        self.tree_ids[step.id] = node_id
        return node_id

    def tool_step(self, stream: Stream, run: Run, step: ToolStep) -> str:
        """One tool use is ONE step: request, execution and result."""
        launches = self.facts.launches.get(step.execution_id, []) if step.execution_id else []
        kind: NodeKind = "agent.call" if launches else "tool"
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
                    "progress": [
                        {
                            "seq": p.seq,
                            "fraction": p.fraction,
                            "coalesced": p.coalesced,
                            **self.payload(p.message),
                        }
                        for p in step.progress
                    ],
                },
                **self.payload(step.result, state),
            )
        )
        if step.execution_id:
            self.by_execution[step.execution_id] = node.id
        for seq, started in launches:
            # A restore may record a child's start again under the same call.
            if node.id not in self.call_of_child[started.child_loop]:
                self.call_of_child[started.child_loop].append(node.id)
            self.launch(run, node.id, seq, started)
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

    def launch(self, run: Run, call: str, seq: int, started: ChildStarted) -> None:
        """The child.started record: the launch acknowledged, and the call
        starts the child's stream."""
        child = started.child_loop
        ack = self.add(
            Node(
                id=f"launch:{child}:{seq}",
                kind="agent.launch_ack",
                parent=run.id,
                seqs=[seq],
                attrs={
                    "child_loop": child,
                    "background": started.background,
                    "token_allowance": started.provenance.token_allowance,
                },
                **self.payload(f"started child loop {child} ({started.definition})"),
            )
        )
        execution = started.provenance.execution_id
        self.relate("result_of", ack.id, call, "exact_unique", execution)
        self.relate("starts", call, f"stream:{child}", "exact_unique", execution)

    def direct_of(self, stream: Stream, run: Run) -> dict[str, Any]:
        """The direct tools' uses a run's ``turn.ended`` names (on the part
        that ends the turn); a completed one answers with their results."""
        ids = self.facts.direct.get((stream.loop, run.turn), ()) if run.outcome else ()
        if not ids:
            return {}
        if run.outcome == "completed":
            self.pending_answers.append((run.id, stream.loop, ids))
        return {"direct": list(ids)}

    def allowance(self, loop: str) -> dict[str, Any]:
        """A child's share of its parent's token budgets, as its start recorded it."""
        started = self.facts.started.get(loop)
        if not started:
            return {}
        return {"token_allowance": started[-1][1].provenance.token_allowance}

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
            # The tree joins the input the interrupt dropped to the run it ended.
            dropped = {
                rel.target
                for rel in self.tree.relations
                if rel.kind == "cancels" and rel.source == run.id
            }
            for node in stream.inputs:
                if node.id in dropped and node.reason == "turn_interrupted":
                    self.relate("cancels", interrupt.id, node.id, "strong_inference", node.input_id)

    def notice(self, stream: Stream, parent: str, notice: NoticeNode) -> None:
        """The runtime's words to the reader, or, for a hook's ``context``
        decision, words it put into the model context."""
        hook = self.facts.injected.get(notice.seq)
        if hook is not None:
            self.add(
                Node(
                    id=injection_id(stream.loop, notice.seq),
                    kind="context.injection",
                    parent=parent,
                    seqs=[notice.seq],
                    attrs={"source": "hook", "hook": hook.hook, "point": hook.point},
                    **self.payload(hook.text),
                )
            )
            return
        self.add(
            Node(
                id=notice.id,
                kind="control.notice",
                parent=parent,
                seqs=[notice.seq],
                attrs={"code": notice.code},
                **self.payload(notice.text),
            )
        )


def build_unified(
    session_id: str,
    records: Iterable[Record],
    *,
    content_limit: int = DEFAULT_CONTENT_LIMIT,
    omit_content: bool = False,
) -> Document:
    """The unified conversation model of one session's records (pure).

    Records must be one session's, in seq order (a prefix is fine).  A payload
    longer than ``content_limit`` bytes is held as ``size_only``; with
    ``omit_content`` no payload is held (each is ``omitted``, its size kept).
    A ``content_limit`` that is not a whole number of bytes, zero or more, or
    records of another session or out of seq order, are a ``ValueError``."""
    if type(content_limit) is not int or content_limit < 0:
        raise ValueError(
            f"content_limit must be a whole number of bytes >= 0, not {content_limit!r}"
        )
    seen = list(records)
    tree = build_tree(session_id, seen)  # refuses another session's records, or disorder
    facts = read_facts(seen)
    calls = read_call_inputs(seen, facts.reminders)
    assembler = _Assembler(tree, facts, calls, content_limit, omit_content)
    assembler.spine()
    assembler.orphan_results()
    assembler.direct_answers()
    assembler.refusals()
    assembler.cross_stream()
    assembler.inputs()
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
