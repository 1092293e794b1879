"""The unified model's node table, and the joins that cross streams.

A child's stream, its output and the notification that reports it are made
from different streams' records: they are joined once every stream's nodes
are in, each join qualified by how it was made.  So are the joins whose ends
are only all known at the end (a direct answer's tool steps, the run or epoch
a refused command falls in).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .tree import Stream, Tree
from .unified import ContentState, Manifest, Node, Quality, Relation, RelationType
from .unified_facts import Facts
from .unified_inputs import CallInput

EXACT_INPUTS = ("message.external", "runtime.notification", "context.injection", "epoch.summary")
"""Kinds a call's input holds by an id its records name (an input or steer id,
a hook's step, a compaction's attempt); the rest by the fold's order."""


class NodeTable:
    """The document's nodes and relations as they are made, and the joins
    made once every stream is in."""

    def __init__(
        self,
        tree: Tree,
        facts: Facts,
        calls: dict[str, CallInput],
        limit: int,
        omit_content: bool = False,
    ) -> None:
        self.tree = tree
        self.facts = facts
        self.calls = calls
        """effect id -> what the call's input was made of."""
        self.limit = limit
        self.omit_content = omit_content
        self.nodes: dict[str, Node] = {}
        self.relations: list[Relation] = []
        self.edges: dict[tuple[str, str, str], Relation] = {}
        self.by_execution: dict[str, str] = {}
        """execution id -> the tool node that ran it."""
        self.call_of_child: dict[str, list[str]] = defaultdict(list)
        """child loop -> the agent.call nodes that started it."""
        self.conversation = f"conversation:{facts.root or tree.session}"
        self.session = f"session:{tree.session}"
        self.tree_ids: dict[str, str] = {}
        """The tree's id of a model step -> its llm.call node."""
        self.pending_reports: list[tuple[str, str, Quality, str]] = []
        """(notification, child loop, quality, via): joined once every stream is in."""
        self.pending_answers: list[tuple[str, str, tuple[str, ...]]] = []
        """(run, loop, tool_use ids) of runs answered by direct tools: joined
        once every result is in."""

    # -- helpers ---------------------------------------------------------------

    def add(self, node: Node) -> Node:
        assert node.id not in self.nodes, f"two nodes named {node.id}"
        node.seqs = sorted(set(node.seqs))
        self.nodes[node.id] = node
        return node

    def relate(
        self, type: RelationType, source: str, target: str, quality: Quality, *via: str
    ) -> None:
        """One relation per (type, from, to): a second record joining the same
        ends (a restore recording a child's start again) adds to its ``via``."""
        made = self.edges.get((type, source, target))
        if made is not None:
            made.via.extend(v for v in via if v not in made.via)
            return
        relation = Relation(type=type, from_=source, to=target, quality=quality, via=list(via))
        self.edges[(type, source, target)] = relation
        self.relations.append(relation)

    def join(self, type: RelationType, source: str, targets: list[str], key: str) -> None:
        """A join by an exact key: unique, or ambiguous to every candidate
        (never resolved by choosing one)."""
        quality: Quality = "exact_unique" if len(targets) == 1 else "exact_ambiguous"
        for target in targets:
            self.relate(type, source, target, quality, key)

    def payload(self, text: str, state: ContentState = "available") -> dict[str, Any]:
        size = len(text.encode())
        if self.omit_content:
            return {"content": "omitted", "text": "", "size": size}
        if state in ("available", "truncated") and size > self.limit:
            return {"content": "size_only", "text": "", "size": size}
        return {"content": state, "text": text, "size": size}

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

    def orphan_results(self) -> None:
        """A tool result whose tool use no reply in the journal asked for
        (a fork's call requested in its source, a damaged journal): kept,
        with an ``unresolved`` join to an ``unavailable`` stand-in for the use."""
        for (loop, tool_use_id), (seq, text) in self.facts.answers.items():
            if (loop, tool_use_id) in self.facts.requested:
                continue
            node_id = f"step:{loop}:{tool_use_id or seq}"
            node = self.nodes.get(node_id)
            if node is None:
                where = self.holder(loop, seq)
                if where is None:
                    continue  # no stream of that loop: nothing here to place it in
                node = self.add(
                    Node(
                        id=node_id,
                        kind="tool",
                        parent=where,
                        seqs=[seq],
                        attrs={"tool_use_id": tool_use_id},
                        **self.payload(text),
                    )
                )
            use = self.add(
                Node(
                    id=f"use:{loop}:{tool_use_id}",
                    kind="tool",
                    parent=node.parent,
                    seqs=list(node.seqs),
                    claim="unavailable",
                    content="unavailable",
                    attrs={"tool_use_id": tool_use_id},
                )
            )
            self.relate("result_of", node.id, use.id, "unresolved", tool_use_id)

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
                attrs={"status": event.status, "rejected": event.rejected, "tokens": event.tokens},
                **self.payload(event.output),
            )
        )
        self.relate("ends_with", stream.id, output.id, "exact_unique", stream.loop)

    def cross_stream(self) -> None:
        """Notifications to the children they report, and to the calls whose
        result they carry."""
        self.finished_in_place()
        for note, child, quality, via in self.pending_reports:
            target = f"stream:{child}"
            if target not in self.nodes:
                self.unresolved_stream(note, child)
                quality, via = "unresolved", f"no record starts or shows child loop {child}"
            self.relate("reports", note, target, quality, via)
            calls = self.call_of_child.get(child, [])
            if not calls:
                calls = [self.unresolved_call(note, child)]
                quality, via = "unresolved", f"no tool call started child loop {child}"
            if quality == "exact_unique":
                self.join("result_of", note, calls, child)
            else:
                for call in calls:
                    self.relate("result_of", note, call, quality, via)
        self.stream_retries()

    def unresolved_stream(self, note: str, child: str) -> None:
        """The child a notification names, absent from the journal: shown
        ``unavailable`` so the join stays visible, never dropped or guessed."""
        self.add(
            Node(
                id=f"stream:{child}",
                kind="stream",
                parent=self.session,
                seqs=list(self.nodes[note].seqs),
                role="child",
                claim="unavailable",
                attrs={"loop": child},
            )
        )

    def unresolved_call(self, note: str, child: str) -> str:
        """The call a child's result answers, when no record says which call
        started it: ``unavailable``, beside the notification (the only place
        the records put it)."""
        node_id = f"call-of:{child}"
        if node_id not in self.nodes:
            self.add(
                Node(
                    id=node_id,
                    kind="agent.call",
                    parent=self.nodes[note].parent,
                    seqs=list(self.nodes[note].seqs),
                    claim="unavailable",
                    content="unavailable",
                    attrs={"child_loop": child},
                )
            )
        return node_id

    def finished_in_place(self) -> None:
        """A child whose result went back as its call's result (a foreground
        delegate) has no result input: its ``child.finished`` record is the
        runtime's word to the parent, in the run of the call."""
        reported = {child for _, child, _, _ in self.pending_reports}
        for child, (seq, event) in self.facts.finished.items():
            calls = self.call_of_child.get(child, [])
            where = (
                self.nodes[calls[0]].parent
                if len(calls) == 1
                else self.holder(self.facts.finished_in[child], seq)
            )
            if child in reported or where is None:
                continue
            note = self.add(
                Node(
                    id=f"finished:{child}:{seq}",
                    kind="runtime.notification",
                    parent=where,
                    seqs=[seq],
                    attrs={"child_loop": child, "status": event.status, "tokens": event.tokens},
                    **self.payload(event.output),
                )
            )
            self.pending_reports.append((note.id, child, "exact_unique", child))

    def epoch_at(self, stream: Stream, seq: int) -> str:
        return next(
            (e.id for e in reversed(stream.epochs) if e.first_seq <= seq), stream.epochs[0].id
        )

    def direct_answers(self) -> None:
        """A run answered by direct tools ``ends_with`` each tool step whose
        result is the answer, joined by the tool_use id its ``turn.ended``
        names; a use the journal does not show is an ``unavailable`` stand-in,
        ``unresolved``."""
        for run_id, loop, ids in self.pending_answers:
            for tool_use_id in ids:
                target = f"step:{loop}:{tool_use_id}"
                if target in self.nodes:
                    self.relate("ends_with", run_id, target, "exact_unique", tool_use_id)
                    continue
                target = f"use:{loop}:{tool_use_id}"
                if target not in self.nodes:
                    self.add(
                        Node(
                            id=target,
                            kind="tool",
                            parent=run_id,
                            seqs=list(self.nodes[run_id].seqs[-1:]),
                            claim="unavailable",
                            content="unavailable",
                            attrs={"tool_use_id": tool_use_id},
                        )
                    )
                self.relate("ends_with", run_id, target, "unresolved", tool_use_id)

    def refusals(self) -> None:
        """A submit the runtime refused (``turn.rejected``: a full queue, a
        shutdown, a spent budget) is a command that started nothing; the
        words it carried are not in the journal."""
        for loop, seq, refused in self.facts.refused:
            stream = next((s for s in self.tree.streams if s.loop == loop), None)
            if stream is None:
                continue
            self.add(
                Node(
                    id=f"refused:{loop}:{seq}",
                    kind="control.command",
                    parent=self.holder(loop, seq) or self.epoch_at(stream, seq),
                    seqs=[seq],
                    content="unavailable",
                    attrs={
                        "record": "turn.rejected",
                        "status": "refused",
                        "input_id": refused.input_id,
                        "reason": refused.reason,
                        "principal": refused.principal,
                    },
                )
            )

    def holder(self, loop: str, seq: int) -> str | None:
        """The run (or else the epoch) of ``loop``'s stream whose records span ``seq``."""
        for stream in self.tree.streams:
            if stream.loop != loop:
                continue
            for epoch in stream.epochs:
                for talk in epoch.talks:
                    for run in talk.runs:
                        if run.first_seq <= seq <= run.last_seq:
                            return run.id
                if epoch.first_seq <= seq <= epoch.last_seq:
                    return epoch.id
        return None

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

    # -- inputs ------------------------------------------------------------------

    def manifest(self, effect_id: str) -> Manifest | None:
        """The call's input: the records the fold put in it, their nodes."""
        found = self.calls.get(effect_id)
        if found is None:
            return None
        return Manifest(
            after=found.after,
            inherited=found.inherited,
            seqs=[source.seq for source in found.sources],
            nodes=list(dict.fromkeys(source.node for source in found.sources if source.node)),
            request="hash_only" if found.fingerprint else "unavailable",
            fingerprint=found.fingerprint,
        )

    def inputs(self) -> None:
        """``input_of`` from each node a call's input held to the first call
        that read it (a reply stands for its message when it has one)."""
        read: set[str] = set()
        calls = [n for n in self.nodes.values() if n.kind == "llm.call" and n.manifest]
        for call in sorted(calls, key=lambda n: n.seqs[0] if n.seqs else 0):
            assert call.manifest is not None
            kept = [self.reply_of(n) for n in call.manifest.nodes if n in self.nodes]
            call.manifest.nodes = kept
            for node_id in kept:
                if node_id in read:
                    continue
                read.add(node_id)
                if self.nodes[node_id].kind in EXACT_INPUTS:
                    self.relate("input_of", node_id, call.id, "exact_unique", node_id)
                else:
                    self.relate(
                        "input_of", node_id, call.id, "strong_inference", "the fold's order"
                    )

    def reply_of(self, node_id: str) -> str:
        """An earlier call in an input stands for its reply: its message when
        the reply had text, else the call itself (a reply of tool uses only)."""
        message = f"{node_id}:message"
        return (
            message if self.nodes[node_id].kind == "llm.call" and message in self.nodes else node_id
        )
