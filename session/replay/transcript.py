"""The transcript: the conversation as a person reads it, one line per thing
that happened, children indented.

The renderer is incremental: records fed one at a time (``--follow``) print
exactly what ``render_transcript`` prints for the whole journal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from journal import Record
from journal import events as ev
from journal.content import RedactedThinking, Text, Thinking, ToolUse

from .text import (
    blocks_text,
    config_text,
    deadline_text,
    gate_text,
    hook_text,
    painted,
    review_text,
    short,
)


def _by(principal: str | None) -> str:
    """`` [alice]`` after what a principal's command made; nothing without one."""
    return f" [{principal}]" if principal is not None else ""


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
        self._tools: dict[str, ev.ToolStarted] = {}
        self._names: dict[str, str] = {}
        """tool_use id -> tool name, from committed assistant messages."""

    def paint(self, kind: str, text: str) -> str:
        return painted(kind, text, color=self.color)

    def feed(self, r: Record) -> list[str]:
        """The lines for one record (often none: bookkeeping records are silent)."""
        e = r.event
        paint = self.paint
        pad = "    " * self._depth.get(r.loop, 0)
        prefix = f"{paint('dim', f'{r.seq:>5} ')}{pad}"
        lines: list[str] = []
        match e:
            case (
                ev.LoopStarted()
                | ev.LoopStopped()
                | ev.LoopPaused()
                | ev.LoopResumed()
                | ev.LoopModeChanged()
                | ev.LoopConfigured()
                | ev.LoopReconfigured()
                | ev.LoopInferenceChanged()
                | ev.LoopToolsReplaced()
                | ev.ToolsLoaded()
            ):
                self._loop_lines(r, e, prefix, lines)
            case (
                ev.InputQueued()
                | ev.InputCancelled()
                | ev.SteerQueued()
                | ev.SteerApplied()
                | ev.CommandKeyed()
                | ev.TurnRejected()
                | ev.TurnStarted()
                | ev.TurnEnded()
            ):
                self._input_lines(r, e, prefix, lines)
            case (
                ev.ModelMessageCommitted()
                | ev.ModelCallFailed()
                | ev.ToolStarted()
                | ev.ToolCompleted()
                | ev.ToolProgress()
                | ev.ToolAbandoned()
                | ev.ToolResolved()
                | ev.DeadlinePassed()
            ):
                self._call_lines(r, e, prefix, lines)
            case (
                ev.GateOpened()
                | ev.GateResolved()
                | ev.GateCancelled()
                | ev.GateReviewed()
                | ev.HookDecided()
                | ev.Notice()
            ):
                self._gate_lines(r, e, prefix, lines)
            case (
                ev.SessionCheckpoint()
                | ev.SessionForked()
                | ev.CompactionStarted()
                | ev.CompactionCommitted()
                | ev.CompactionRejected()
                | ev.ChildStarted()
                | ev.ChildFinished()
            ):
                self._session_lines(r, e, prefix, lines)
            case (
                ev.CollabStarted()
                | ev.CollabTurn()
                | ev.CollabTaskStarted()
                | ev.CollabTaskFinished()
                | ev.CollabControlled()
                | ev.CollabEnded()
            ):
                self._collab_lines(r, e, prefix, lines)
            case ev.ModelCallStarted() | ev.ModelOutput() | ev.ContextMeasured():
                pass  # the committed message is what the transcript shows
            case _:
                assert_never(e)
        return lines

    def _loop_lines(
        self,
        r: Record,
        e: ev.LoopStarted
        | ev.LoopStopped
        | ev.LoopPaused
        | ev.LoopResumed
        | ev.LoopModeChanged
        | ev.LoopConfigured
        | ev.LoopReconfigured
        | ev.LoopInferenceChanged
        | ev.LoopToolsReplaced
        | ev.ToolsLoaded,
        prefix: str,
        lines: list[str],
    ) -> None:
        """A loop starting, stopping, and changing how it runs."""
        paint = self.paint
        match e:
            case ev.LoopStarted():
                parent = f", child of {e.parent.parent_loop}" if e.parent else ""
                lines.append(
                    prefix
                    + paint(
                        "dim",
                        f"loop {r.loop} started ({e.definition}, {e.model}{parent})"
                        + _by(e.principal),
                    )
                )
            case ev.LoopStopped():
                lines.append(prefix + paint("dim", f"loop {r.loop} stopped ({e.reason})"))
            case ev.LoopPaused():
                lines.append(prefix + paint("notice", f"⏸ loop {r.loop} paused{_by(e.principal)}"))
            case ev.LoopResumed():
                lines.append(prefix + paint("notice", f"▶ loop {r.loop} resumed{_by(e.principal)}"))
            case ev.LoopModeChanged():
                lines.append(prefix + paint("dim", f"(mode: {e.mode}{_by(e.principal)})"))
            case ev.LoopConfigured():
                lines.append(prefix + paint("dim", f"(configured: {config_text(e)})"))
                lines += self._prompts(prefix, e.prompts)
            case ev.LoopReconfigured():
                lines.append(prefix + paint("notice", f"⟳ definition changed: {config_text(e)}"))
                lines += self._prompts(prefix, e.prompts)
            case ev.LoopInferenceChanged() | ev.LoopToolsReplaced() | ev.ToolsLoaded():
                lines.append(prefix + paint("dim", f"({config_text(e)})"))
            case _:
                assert_never(e)

    def _input_lines(
        self,
        r: Record,
        e: ev.InputQueued
        | ev.InputCancelled
        | ev.SteerQueued
        | ev.SteerApplied
        | ev.CommandKeyed
        | ev.TurnRejected
        | ev.TurnStarted
        | ev.TurnEnded,
        prefix: str,
        lines: list[str],
    ) -> None:
        """What people said and asked for, and the turns it started."""
        paint = self.paint
        match e:
            case ev.InputQueued():
                who = ("user" if e.trigger == "external" else e.trigger) + _by(e.principal)
                for m in e.messages:
                    mark = " (synthetic)" if m.synthetic else ""
                    lines.append(prefix + paint("user", f"{who}{mark}: ") + blocks_text(m.blocks))
            case ev.InputCancelled():
                lines.append(
                    prefix
                    + paint("dim", f"(input {e.input_id} cancelled: {e.reason}{_by(e.principal)})")
                )
            case ev.SteerQueued():
                lines.append(prefix + paint("user", f"steer{_by(e.principal)}: ") + e.text)
            case ev.SteerApplied():
                lines.append(prefix + paint("dim", f"(steering applied: {len(e.steer_ids)})"))
            case ev.CommandKeyed():
                lines.append(
                    prefix + paint("dim", f"({e.command}, key {e.key!r}{_by(e.principal)})")
                )
            case ev.TurnRejected():
                lines.append(
                    prefix
                    + paint("notice", f"input {e.input_id}{_by(e.principal)} refused ({e.reason})")
                )
            case ev.TurnStarted():
                lines.append(prefix + paint("dim", f"── turn {e.turn} ──"))
            case ev.TurnEnded():
                why = f" ({e.code})" if e.code else (" (direct)" if e.direct else "")
                who = f" by {e.principal}" if e.principal is not None else ""
                lines.append(prefix + paint("dim", f"── turn {e.turn} {e.outcome}{who}{why} ──"))
            case _:
                assert_never(e)

    def _call_lines(
        self,
        r: Record,
        e: ev.ModelMessageCommitted
        | ev.ModelCallFailed
        | ev.ToolStarted
        | ev.ToolCompleted
        | ev.ToolProgress
        | ev.ToolAbandoned
        | ev.ToolResolved
        | ev.DeadlinePassed,
        prefix: str,
        lines: list[str],
    ) -> None:
        """The model's replies and failures, and the tool calls with their outcomes."""
        paint = self.paint
        match e:
            case ev.ModelMessageCommitted():
                lines.extend(self._message(prefix, e))
            case ev.ModelCallFailed():
                lines.append(prefix + paint("notice", f"model call failed: {e.code} {e.detail}"))
            case ev.ToolStarted():
                self._tools[e.execution_id] = e
                lines.append(
                    prefix
                    + paint("tool", f"→ {e.name} ")
                    + short(e.input)
                    + paint("dim", f"  [{e.execution_id}]")
                )
            case ev.ToolCompleted():
                started = self._tools.get(e.execution_id)
                name = started.name if started else self._names.get(e.tool_use_id, "call")
                took = f", {e.duration_ns / 1e6:.0f} ms" if e.duration_ns else ""
                cut = f", {e.truncated_bytes} bytes cut" if e.truncated_bytes else ""
                lines.append(
                    prefix
                    + paint("tool", f"← {name} ({e.disposition}{took}{cut}): ")
                    + short(blocks_text(e.content))
                )
            case ev.ToolProgress():
                started = self._tools.get(e.execution_id)
                name = started.name if started else self._names.get(e.tool_use_id, "call")
                done = f" {e.fraction:.0%}" if e.fraction is not None else ""
                lines.append(prefix + paint("dim", f"… {name}{done}: ") + short(e.message))
            case ev.ToolAbandoned():
                lines.append(
                    prefix
                    + paint("notice", f"✗ {e.execution_id} abandoned ({e.reason}): outcome unknown")
                )
            case ev.ToolResolved():
                lines.append(
                    prefix
                    + paint(
                        "tool",
                        f"← resolved by {e.by}{_by(e.principal)}"
                        f"{' (error)' if e.is_error else ''}: ",
                    )
                    + short(blocks_text(e.content))
                )
            case ev.DeadlinePassed():
                lines.append(prefix + paint("notice", deadline_text(e)))
            case _:
                assert_never(e)

    def _gate_lines(
        self,
        r: Record,
        e: ev.GateOpened
        | ev.GateResolved
        | ev.GateCancelled
        | ev.GateReviewed
        | ev.HookDecided
        | ev.Notice,
        prefix: str,
        lines: list[str],
    ) -> None:
        """Questions put to people, their answers, reviews, hooks and notices."""
        paint = self.paint
        match e:
            case ev.GateOpened():
                lines.append(prefix + paint("gate", gate_text(e)))
            case ev.GateResolved():
                by = f" by {e.principal}" if e.principal is not None else ""
                if e.kind == "user_input":
                    lines.append(prefix + paint("gate", f"! answered{by}: {e.answer}"))
                else:
                    verdict = "allowed" if e.allow else "denied"
                    lines.append(prefix + paint("gate", f"! {verdict}{by} ({e.scope})"))
            case ev.GateCancelled():
                lines.append(prefix + paint("gate", f"! gate {e.gate_id} cancelled ({e.reason})"))
            case ev.GateReviewed():
                lines.append(prefix + paint("gate", "~ " + review_text(e)))
            case ev.HookDecided():
                lines.append(prefix + paint("notice", "⚑ " + hook_text(e)))
            case ev.Notice():
                lines.append(prefix + paint("notice", f"notice [{e.code}]: {e.text}"))
            case _:
                assert_never(e)

    def _session_lines(
        self,
        r: Record,
        e: ev.SessionCheckpoint
        | ev.SessionForked
        | ev.CompactionStarted
        | ev.CompactionCommitted
        | ev.CompactionRejected
        | ev.ChildStarted
        | ev.ChildFinished,
        prefix: str,
        lines: list[str],
    ) -> None:
        """The session's own records, compactions, and child loops."""
        paint = self.paint
        match e:
            case ev.SessionCheckpoint():
                pass  # derived from the records before it; the tree lists them
            case ev.SessionForked():
                lines.append(
                    prefix
                    + paint(
                        "dim",
                        f"⑂ forked from session {e.source} at seq {e.seq}; "
                        "it goes on from the state the source had there",
                    )
                )
            case ev.CompactionStarted():
                if e.principal is not None:
                    lines.append(prefix + paint("dim", f"(compaction asked by {e.principal})"))
            case ev.CompactionCommitted():
                lines.append(
                    prefix
                    + paint(
                        "dim",
                        f"══ compaction: {e.replaced} messages summarised, {e.retained} kept ══",
                    )
                )
            case ev.CompactionRejected():
                lines.append(prefix + paint("dim", f"(compaction rejected: {e.reason} {e.detail})"))
            case ev.ChildStarted():
                self._depth[e.child_loop] = self._depth.get(r.loop, 0) + 1
                lines.append(prefix + paint("dim", f"┌ child loop {e.child_loop} ({e.definition})"))
            case ev.ChildFinished():
                lines.append(prefix + paint("dim", f"└ child loop {e.child_loop} {e.status}"))
            case _:
                assert_never(e)

    def _collab_lines(
        self,
        r: Record,
        e: ev.CollabStarted
        | ev.CollabTurn
        | ev.CollabTaskStarted
        | ev.CollabTaskFinished
        | ev.CollabControlled
        | ev.CollabEnded,
        prefix: str,
        lines: list[str],
    ) -> None:
        """A collaboration's stream."""
        paint = self.paint
        match e:
            case ev.CollabStarted():
                lines.append(
                    prefix
                    + paint("dim", f"◆ collaboration {e.collab_id}: ")
                    + f"coordinator {e.coordinator}, workers {', '.join(e.workers)}"
                )
            case ev.CollabTurn():
                d = e.decision
                what = f"turn {e.number}: {d.mode}"
                if d.tasks:
                    what += "; start " + ", ".join(f"{t.key}→{t.worker}" for t in d.tasks)
                if d.controls:
                    what += "; " + ", ".join(f"{c.kind} {c.key}" for c in d.controls)
                lines.append(prefix + paint("dim", "◆ ") + what)
            case ev.CollabTaskStarted():
                lines.append(prefix + paint("tool", f"◆ task {e.key} started on {e.child_loop}"))
            case ev.CollabTaskFinished():
                lines.append(
                    prefix + paint("tool", f"◆ task {e.key} {e.status}: ") + short(e.output)
                )
            case ev.CollabControlled():
                lines.append(prefix + paint("dim", f"◆ {e.kind} {e.key}: {e.receipt}"))
            case ev.CollabEnded():
                why = f" ({e.code})" if e.code else ""
                lines.append(
                    prefix + paint("dim", f"◆ collaboration {e.status}{why}: ") + short(e.output)
                )
            case _:
                assert_never(e)

    def _prompts(self, prefix: str, prompts: dict[str, str]) -> list[str]:
        """A system prompt's text, the first time the journal holds it."""
        return [
            prefix + self.paint("dim", f"  system prompt {d[:8]}: ") + short(text)
            for d, text in prompts.items()
        ]

    def _message(self, prefix: str, e: ev.ModelMessageCommitted) -> list[str]:
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
