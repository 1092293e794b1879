"""Build the conversation tree from a session's records.

Pure: one session's records in seq order (a prefix is fine: what is open
shows as open).  The builder folds each stream too, for its status; a record
the fold refuses is left to the checker.

The builder is one piece on purpose: one pass over the records keeps every
open node (run, step, call, gate) of every stream, and the relations between
them are made as each record arrives.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Literal, assert_never

from journal import JournalError, Record
from journal import events as ev
from journal.content import Thinking, ToolUse
from loopruntime import LoopState, fold
from loopruntime.host import FoldError, copy_state

from ..embedded.checkpoints import fork_base
from .causes import causes_of
from .text import (
    agent_text,
    blocks_text,
    config_text,
    deadline_text,
    hook_text,
    notice_text,
    review_text,
)
from .tree import (
    TREE_SCHEMA,
    TREE_VERSION,
    CompactionNode,
    ConfigNode,
    Epoch,
    GateNode,
    InputNode,
    Lineage,
    ModelStep,
    NoticeNode,
    ProgressNode,
    Quality,
    Relation,
    RelationKind,
    Run,
    Step,
    Stream,
    Talk,
    ToolStep,
    Tree,
)


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
        self.run_of: dict[str, Run] = {}
        """step id -> the run that holds it."""
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

    def notice(self, r: Record, e: ev.Notice) -> None:
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
        self.run_of[step.id] = self.run
        self.last_step = step

    # One ``match`` over the event union (the type checker proves it whole);
    # each case is a line or two, the longer ones call a method of their own.
    def feed(self, r: Record) -> None:
        e = r.event
        s = self.stream
        s.last_seq = self.epoch.last_seq = r.seq
        if self.run is not None:
            self.run.last_seq = r.seq
        match e:
            case ev.ModelCallStarted() if self.run is None:
                return  # a call outside any run: kept out of the tree and of its fold
            case (
                ev.LoopStarted()
                | ev.LoopConfigured()
                | ev.LoopReconfigured()
                | ev.LoopInferenceChanged()
                | ev.LoopToolsReplaced()
                | ev.ToolsLoaded()
            ):
                self._loop_config(r, e)
            case ev.InputQueued() | ev.InputCancelled() | ev.SteerQueued() | ev.SteerApplied():
                self._input(r, e)
            case (
                ev.TurnStarted()
                | ev.TurnEnded()
                | ev.ModelCallStarted()
                | ev.ModelOutput()
                | ev.ModelCallFailed()
                | ev.ModelMessageCommitted()
            ):
                self._run_step(r, e)
            case ev.ToolStarted() | ev.ToolCompleted() | ev.ToolAbandoned() | ev.ToolResolved():
                self._tool_call(r, e)
            case ev.ToolProgress():
                found = self.by_execution.get(e.execution_id)
                if found is not None:
                    found.progress.append(
                        ProgressNode(
                            seq=r.seq, message=e.message, fraction=e.fraction, coalesced=e.coalesced
                        )
                    )
                    found.seqs.append(r.seq)
                    found.last_seq = r.seq
            case ev.GateOpened() | ev.GateResolved() | ev.GateCancelled():
                self._gate(r, e)
            case (
                ev.CompactionStarted()
                | ev.CompactionCommitted()
                | ev.ChildStarted()
                | ev.ChildFinished()
                | ev.Notice()
                | ev.DeadlinePassed()
                | ev.HookDecided()
                | ev.GateReviewed()
            ):
                self._marker(r, e)
            case (
                ev.LoopModeChanged()
                | ev.LoopPaused()
                | ev.LoopResumed()
                | ev.LoopStopped()
                | ev.ContextMeasured()
                | ev.CompactionRejected()
            ):
                pass  # nothing the tree draws (the transcript shows a pause)
            case ev.SessionCheckpoint() | ev.SessionForked():
                pass  # _TreeBuilder keeps the session's own records out of the streams
            case ev.CommandKeyed() | ev.TurnRejected():
                pass  # a command's bookkeeping: the records it made tell the story
            case (
                ev.CollabStarted()
                | ev.CollabTurn()
                | ev.CollabTaskStarted()
                | ev.CollabTaskFinished()
                | ev.CollabControlled()
                | ev.CollabEnded()
            ):
                pass  # the collaboration's own stream carries no turns or steps
            case _:
                assert_never(e)
        if not self.tree.statuses:
            return  # structure only: the status is the tree's presentation
        try:
            fold(self.state, r)
        except FoldError:
            pass  # the checker reports it; the tree shows what it can

    def _loop_config(
        self,
        r: Record,
        e: ev.LoopStarted
        | ev.LoopConfigured
        | ev.LoopReconfigured
        | ev.LoopInferenceChanged
        | ev.LoopToolsReplaced
        | ev.ToolsLoaded,
    ) -> None:
        """Who the loop is, and the configuration changes of its epoch."""
        s = self.stream
        match e:
            case ev.LoopStarted():
                s.definition, s.model = e.definition, e.model
                if e.parent is not None:
                    s.parent_loop, s.parent_execution = e.parent.parent_loop, e.parent.execution_id
            case (
                ev.LoopConfigured()
                | ev.LoopReconfigured()
                | ev.LoopInferenceChanged()
                | ev.LoopToolsReplaced()
                | ev.ToolsLoaded()
            ):
                kind = type(e).__struct_config__.tag
                assert isinstance(kind, str)
                self.epoch.configs.append(
                    ConfigNode(id=f"config:{r.seq}", seq=r.seq, kind=kind, text=config_text(e))
                )
            case _:
                assert_never(e)

    def _input(
        self, r: Record, e: ev.InputQueued | ev.InputCancelled | ev.SteerQueued | ev.SteerApplied
    ) -> None:
        """Inputs and steering: queued, cancelled, taken by a run."""
        s = self.stream
        match e:
            case ev.InputQueued():
                node = InputNode(
                    id=f"input:{self.loop}:{e.input_id}",
                    input_id=e.input_id,
                    seq=r.seq,
                    trigger=e.trigger,
                    text=" ".join(blocks_text(m.blocks) for m in e.messages),
                    synthetic=bool(e.messages) and all(m.synthetic for m in e.messages),
                    principal=e.principal,
                )
                self.inputs[e.input_id] = node
                s.inputs.append(node)
                if e.trigger == "external" and not node.synthetic:
                    s.stats.external_inputs += 1
                self.tree.child_report(node, e.child_loop)
            case ev.InputCancelled():
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
            case ev.SteerQueued():
                self.steers[e.steer_id] = e.text
            case ev.SteerApplied():
                if self.run is not None:
                    self.run.steer_ids += e.steer_ids
                    self.run.steering += [self.steers.get(i, "") for i in e.steer_ids]
            case _:
                assert_never(e)

    def _run_step(
        self,
        r: Record,
        e: ev.TurnStarted
        | ev.TurnEnded
        | ev.ModelCallStarted
        | ev.ModelOutput
        | ev.ModelCallFailed
        | ev.ModelMessageCommitted,
    ) -> None:
        """A run (a turn) and its model steps."""
        match e:
            case ev.TurnStarted():
                self.start_run(r, e)
            case ev.TurnEnded():
                if self.run is not None:
                    self.run.outcome, self.run.code = e.outcome, e.code
                    final = next(
                        (st for st in reversed(self.run.steps) if isinstance(st, ModelStep)), None
                    )
                    if final is not None:
                        self.relate("ends_with", self.run.id, final.id, "exact", f"turn {e.turn}")
                    self.prev_run, self.run = self.run, None
                    self.last_step = None
            case ev.ModelCallStarted():
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
            case ev.ModelOutput():
                found_m = self.model_steps.get(e.effect_id)
                if found_m is not None:
                    found_m.seqs.append(r.seq)
                    found_m.last_seq = r.seq
            case ev.ModelCallFailed():
                found_m = self.model_steps.get(e.effect_id)
                if found_m is not None:
                    found_m.failed = e.code
                    found_m.seqs.append(r.seq)
                    found_m.last_seq = r.seq
            case ev.ModelMessageCommitted():
                self.message(r, e)
            case _:
                assert_never(e)

    def _tool_call(
        self, r: Record, e: ev.ToolStarted | ev.ToolCompleted | ev.ToolAbandoned | ev.ToolResolved
    ) -> None:
        """A tool step: started, completed, cut short, resolved."""
        s = self.stream
        match e:
            case ev.ToolStarted():
                step_t = self.tool_step(r, e.tool_use_id, e.name, e.input)
                step_t.execution_id, step_t.started_seq, step_t.status = (
                    e.execution_id,
                    r.seq,
                    "running",
                )
                self.by_execution[e.execution_id] = step_t
            case ev.ToolCompleted():
                step_t = self.tool_step(r, e.tool_use_id, "", {})
                step_t.result = blocks_text(e.content)
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
            case ev.ToolAbandoned():
                step_t = self.tool_step(r, e.tool_use_id, "", {})
                if e.reason == "interrupted":
                    step_t.status, step_t.synthetic, step_t.is_error = "interrupted", True, True
                    s.stats.synthetic_tool_results += 1
                else:
                    step_t.status = "unknown"
            case ev.ToolResolved():
                step_t = self.tool_step(r, e.tool_use_id, "", {})
                step_t.status, step_t.resolved_by = "resolved", e.by
                step_t.result, step_t.is_error = blocks_text(e.content), e.is_error
                # A host's word for an outcome nobody saw; a replay-safe
                # re-run did run the tool.
                step_t.synthetic = e.by == "host"
                if step_t.synthetic:
                    s.stats.synthetic_tool_results += 1
                else:
                    s.stats.tool_calls += 1
            case _:
                assert_never(e)

    def _gate(self, r: Record, e: ev.GateOpened | ev.GateResolved | ev.GateCancelled) -> None:
        """A gate: opened on its tool step, resolved or cancelled."""
        s = self.stream
        match e:
            case ev.GateOpened():
                gate = GateNode(
                    id=f"gate:{e.gate_id}",
                    gate_id=e.gate_id,
                    kind=e.kind,
                    seq=r.seq,
                    prompt=e.prompt,
                    choices=list(e.choices) if e.choices is not None else None,
                    form=e.form,
                    url=e.url,
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
            case ev.GateResolved():
                gate_r = self.gates.get(e.gate_id)
                if gate_r is not None:
                    gate_r.status, gate_r.closed_seq = "resolved", r.seq
                    gate_r.answer, gate_r.allow, gate_r.scope = e.answer, e.allow, e.scope
                    gate_r.answered_by = e.principal
            case ev.GateCancelled():
                gate_r = self.gates.get(e.gate_id)
                if gate_r is not None:
                    gate_r.status, gate_r.closed_seq, gate_r.reason = "cancelled", r.seq, e.reason
                    source = self.run.id if self.run is not None else s.id
                    self.relate("cancels", source, gate_r.id, "exact", e.gate_id)
            case _:
                assert_never(e)

    def _marker(
        self,
        r: Record,
        e: ev.CompactionStarted
        | ev.CompactionCommitted
        | ev.ChildStarted
        | ev.ChildFinished
        | ev.Notice
        | ev.DeadlinePassed
        | ev.HookDecided
        | ev.GateReviewed,
    ) -> None:
        """Epochs, children, and the runtime's words (notices, deadlines, hooks,
        reviews)."""
        match e:
            case ev.CompactionStarted():
                self.compactions[e.attempt_id] = r.seq
            case ev.CompactionCommitted():
                self.cut_epoch(r, e)
            case ev.ChildStarted():
                self.tree.child_started(self, r, e)
            case ev.ChildFinished():
                pass  # the unified model's notification: the tree has no node for it
            case ev.Notice():
                self.notice(r, e)
            case ev.DeadlinePassed():
                # The runtime's word on what a deadline cut; the tool step or
                # turn shows the consequence (unknown, failed, limit).
                self.notice(
                    r,
                    ev.Notice(
                        code=f"deadline.{e.deadline}",
                        text=deadline_text(e),
                        refs=(e.ref,) if e.ref else (),
                    ),
                )
            case ev.HookDecided():
                # The host's hook on what happens; the step shows the consequence.
                refs = tuple(x for x in (e.tool_use_id, e.execution_id) if x)
                self.notice(r, ev.Notice(code=f"hook.{e.action}", text=hook_text(e), refs=refs))
            case ev.GateReviewed():
                self.notice(
                    r,
                    ev.Notice(
                        code=f"gate.reviewed.{e.verdict}",
                        text=review_text(e),
                        refs=(e.tool_use_id,),
                    ),
                )
            case _:
                assert_never(e)

    def resume(self, r: Record, state: LoopState) -> None:
        """A fork cut inside a turn: the run open at the cut goes on in the
        fork, with the model call and the tool calls open there (the fork's
        own records close them), so its steps have the run they belong to."""
        if not state.turn_open:
            return
        self.start_run(r, ev.TurnStarted(turn=state.turn_index))
        if state.open_call is not None:
            call = ModelStep(
                id=f"step:{self.loop}:{state.turn_index}:m{state.step}",
                index=state.step,
                effect_id=state.open_call,
                model=state.model,
                first_seq=r.seq,
                last_seq=r.seq,
                seqs=[r.seq],
            )
            self.model_steps[state.open_call] = call
            self.add_step(call)
        unknown = set(state.unknown)
        for started in (*state.running.values(), *state.unknown.values()):
            tool = self.tool_step(r, started.tool_use_id, started.name, started.input)
            tool.execution_id, tool.started_seq = started.execution_id, r.seq
            tool.status = "unknown" if started.execution_id in unknown else "running"
            self.by_execution[started.execution_id] = tool

    def start_run(self, r: Record, e: ev.TurnStarted) -> None:
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

    def message(self, r: Record, e: ev.ModelMessageCommitted) -> None:
        step = self.model_steps.get(e.effect_id)
        if step is None:
            return
        step.seqs.append(r.seq)
        step.last_seq = r.seq
        step.committed = True
        step.text = agent_text(e)
        step.notice = e.notice
        step.notice_text = notice_text(e)
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

    def cut_epoch(self, r: Record, e: ev.CompactionCommitted) -> None:
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
                summary=blocks_text(e.summary.blocks),
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
    def __init__(self, session: str, *, statuses: bool = True) -> None:
        self.session = session
        self.statuses = statuses
        """Fold each stream for its status (the tree shows it; structure needs it not)."""
        self.streams: dict[str, _StreamBuilder] = {}
        self.relations: list[Relation] = []
        self.children: dict[str, str] = {}
        """child loop -> the loop whose call started it."""
        self.starters: dict[str, list[ToolStep]] = defaultdict(list)
        """child loop -> the tool steps that start its stream (joined by execution id)."""
        self.checkpoints: list[int] = []
        self.forked_from: Lineage | None = None
        self.base: dict[str, LoopState] = {}
        """A fork's starting states: its streams fold onto them."""

    def feed(self, r: Record) -> None:
        if r.loop == ev.CHECKPOINT_STREAM:
            if r.seq == 1 and isinstance(r.event, ev.SessionForked):
                self.forked_from = Lineage(session=r.event.source, seq=r.event.seq)
                return
            if r.seq == 2 and self.forked_from is not None:
                try:
                    self.base = fork_base(r)
                except JournalError:
                    pass  # the checker reports it; the streams fold from nothing
            # Derived from the records before it: no stream, no node.
            self.checkpoints.append(r.seq)
            return
        builder = self.streams.get(r.loop)
        if builder is None:
            builder = self.streams[r.loop] = _StreamBuilder(self, r.loop, r.seq)
            start = self.base.get(r.loop)
            if start is not None:
                builder.state = copy_state(start)
                builder.resume(r, start)
        builder.feed(r)

    def child_started(self, parent: _StreamBuilder, r: Record, e: ev.ChildStarted) -> None:
        """The call that ran the delegate ``starts`` the child's stream, joined
        by the execution id of the child's provenance; a start no call of a
        run matches relates nothing (as in the unified model)."""
        exe = e.provenance.execution_id
        step = parent.by_execution.get(exe)
        if step is None or step.id not in parent.run_of:
            return
        self.children[e.child_loop] = parent.loop
        self.starters[e.child_loop].append(step)
        self.relations.append(
            Relation(
                kind="starts",
                source=step.id,
                target=f"stream:{e.child_loop}",
                quality="exact",
                via=exe,
            )
        )

    def child_report(self, node: InputNode, recorded: str | None) -> None:
        """The input carrying a child's result ``reports`` the child: exact
        when the record names it (``input.queued.child_loop``), else inferred
        from the actor's wording ``[result of child loop X (status)]``."""
        if node.trigger not in ("subagent", "notification"):
            return
        child, quality, via = recorded, "exact", recorded or ""
        marker = "[result of child loop "
        if child is None and node.text.startswith(marker):
            child = node.text[len(marker) :].split("]", 1)[0].split(" (", 1)[0]
            quality, via = "inferred", "input text"
        if child:
            self.relations.append(
                Relation(
                    kind="reports",
                    source=node.id,
                    target=f"stream:{child}",
                    quality=quality,  # type: ignore[arg-type]
                    via=via,
                )
            )

    def build(self, head: int) -> Tree:
        streams = []
        for b in self.streams.values():
            b.stream.status = b.state.status.value
            if b.state.model:
                b.stream.model = b.state.model  # the model in use at the head
            streams.append(b.stream)
        return Tree(
            schema=TREE_SCHEMA,
            version=TREE_VERSION,
            session=self.session,
            head=head,
            streams=streams,
            relations=self.relations,
            checkpoints=self.checkpoints,
            forked_from=self.forked_from,
        )


class TreeFold:
    """The conversation tree fed one record at a time, and the structure it
    holds so far: the spine the unified model names level by level, so a view
    that reads its structure here (the trace, live or not) places every step
    where the model does.

    Records must be one session's, in seq order.  ``feed`` is the tree's own
    pass; the questions read what the records fed so far say.  Without
    ``statuses`` the streams are not folded for their status (a third of the
    pass): the structure is the same, the tree's statuses stay ``idle``."""

    def __init__(self, session_id: str, *, statuses: bool = True) -> None:
        self._builder = _TreeBuilder(session_id, statuses=statuses)
        self.head = 0

    def feed(self, record: Record) -> None:
        self._builder.feed(record)
        self.head = record.seq

    def run_of_call(self, loop: str, effect_id: str) -> Run | None:
        """The run that holds a model call (None: the model places it in none)."""
        stream = self._builder.streams.get(loop)
        step = stream.model_steps.get(effect_id) if stream is not None else None
        return stream.run_of.get(step.id) if stream is not None and step is not None else None

    def run_of_tool(self, loop: str, tool_use_id: str) -> Run | None:
        """The run that holds a tool use: the run that asked for it."""
        stream = self._builder.streams.get(loop)
        step = stream.tool_steps.get(tool_use_id) if stream is not None else None
        return stream.run_of.get(step.id) if stream is not None and step is not None else None

    def starter_of(self, loop: str) -> tuple[str, ToolStep] | None:
        """The parent loop and its tool step that ``starts`` this loop's
        stream (the model's ``starts``); None for a stream nothing starts, or
        several calls do (an ambiguous join is never resolved by choosing)."""
        parent = self._builder.children.get(loop)
        steps = self._builder.starters.get(loop, [])
        return (parent, steps[0]) if parent is not None and len(steps) == 1 else None

    def tree(self) -> Tree:
        """The tree of the records fed so far, without its causes (it shares
        nodes with the fold: read it before feeding more)."""
        return self._builder.build(self.head)


def build_tree(session_id: str, records: Iterable[Record]) -> Tree:
    """The conversation tree of a session's records (pure): the spine the
    unified model is named from (``build_unified``).

    Records must be one session's, in seq order (a prefix is fine: open runs
    and gates show as open); any other is a ``ValueError`` naming the first
    record that is not, since a tree folded from them would be wrong, quietly.
    The caller owns the returned tree."""
    fold = TreeFold(session_id)
    seen: list[Record] = []
    last = 0
    for r in records:
        if r.session != session_id:
            raise ValueError(f"record seq {r.seq} is of session {r.session}, not {session_id}")
        if r.seq <= last:
            raise ValueError(f"records must be in ascending seq order: seq {r.seq} after {last}")
        last = r.seq
        fold.feed(r)
        seen.append(r)
    tree = fold.tree()
    tree.causes = causes_of(seen)
    return tree
