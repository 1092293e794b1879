"""The journal replay tool: a readable transcript, and the journal checker.

Both only read.  The transcript renders records as a person reads a
conversation; the checker proves the invariants of DESIGN.md §11 and names
the first seq where one breaks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from journal import Journal, JournalError, Record
from journal.content import Image, Message, RedactedThinking, Text, Thinking, ToolResult, ToolUse
from journal.events import (
    ChildFinished,
    ChildStarted,
    CompactionCommitted,
    CompactionRejected,
    CompactionStarted,
    GateCancelled,
    GateOpened,
    GateResolved,
    InputCancelled,
    InputQueued,
    LoopModeChanged,
    ModelCallFailed,
    ModelCallStarted,
    ModelMessageCommitted,
    Notice,
    SteerApplied,
    SteerQueued,
    ToolAbandoned,
    ToolCompleted,
    ToolResolved,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from loopruntime.context import merged, unanswered_tool_uses
from loopruntime.state import FoldError, LoopState, fold

__all__ = ["CheckReport", "Problem", "check", "check_records", "render_transcript"]


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


def render_transcript(records: Sequence[Record], *, color: bool = False) -> str:
    """The conversation per loop, as committed (children indented)."""

    def paint(kind: str, text: str) -> str:
        return f"{_COLOURS[kind]}{text}{_RESET}" if color else text

    depth: dict[str, int] = {}
    tools_by_exec: dict[str, ToolStarted] = {}
    lines: list[str] = []
    for r in records:
        e = r.event
        pad = "    " * depth.get(r.loop, 0)
        tag = paint("dim", f"{r.seq:>5} ")
        prefix = f"{tag}{pad}"
        match e:
            case InputQueued():
                who = "user" if e.trigger == "external" else e.trigger
                for m in e.messages:
                    lines.append(prefix + paint("user", f"{who}: ") + _blocks_text(m.blocks))
            case InputCancelled():
                lines.append(prefix + paint("dim", f"(input {e.input_id} cancelled: {e.reason})"))
            case SteerQueued():
                lines.append(prefix + paint("user", "steer: ") + e.text)
            case SteerApplied():
                pass
            case TurnStarted():
                lines.append(prefix + paint("dim", f"── turn {e.turn} ──"))
            case TurnEnded():
                why = f" ({e.code})" if e.code else ""
                lines.append(prefix + paint("dim", f"── turn {e.turn} {e.outcome}{why} ──"))
            case ModelMessageCommitted():
                lines.extend(_render_message(prefix, e.message, paint))
            case ModelCallFailed():
                lines.append(prefix + paint("notice", f"model call failed: {e.code} {e.detail}"))
            case ToolStarted():
                tools_by_exec[e.execution_id] = e
                lines.append(
                    prefix
                    + paint("tool", f"→ {e.name} ")
                    + _short(e.input)
                    + paint("dim", f"  [{e.execution_id}]")
                )
            case ToolCompleted():
                name = (
                    tools_by_exec[e.execution_id].name
                    if e.execution_id in tools_by_exec
                    else "call"
                )
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
                    + paint("tool", f"← resolved by {e.by}: ")
                    + _short(_blocks_text(e.content))
                )
            case GateOpened():
                what = (
                    e.prompt if e.kind == "user_input" else f"{e.prompt} {_short(e.preview or {})}"
                )
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
                depth[e.child_loop] = depth.get(r.loop, 0) + 1
                lines.append(prefix + paint("dim", f"┌ child loop {e.child_loop} ({e.definition})"))
            case ChildFinished():
                lines.append(prefix + paint("dim", f"└ child loop {e.child_loop} {e.status}"))
            case LoopModeChanged():
                lines.append(prefix + paint("dim", f"(mode: {e.mode})"))
            case _:
                pass
    return "\n".join(lines)


def _render_message(prefix: str, message: Message, paint: object) -> list[str]:
    assert callable(paint)
    out: list[str] = []
    for b in message.blocks:
        if isinstance(b, Text):
            out.append(prefix + paint("assistant", "assistant: ") + b.text)
        elif isinstance(b, Thinking):
            out.append(prefix + paint("dim", f"(thinking, {len(b.thinking)} characters)"))
        elif isinstance(b, RedactedThinking):
            out.append(prefix + paint("dim", "(redacted thinking)"))
        elif isinstance(b, ToolUse):
            pass  # shown with tool.started / tool.completed
    return out


# -- the checker --------------------------------------------------------------------


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
        return (
            f"FAILED at seq {self.first_bad_seq}: {self.problems[0]} "
            f"({len(self.problems)} problem(s) in {self.records} records)"
        )


async def check(journal: Journal, session_id: str) -> CheckReport:
    """Read a session and check every invariant (never writes)."""
    records: list[Record] = []
    try:
        async for record in journal.read(session_id):
            records.append(record)
    except JournalError as exc:
        report = check_records(session_id, records)
        seq = getattr(exc, "seq", (records[-1].seq + 1) if records else 1)
        report.problems.insert(0, Problem(seq, "journal readable", str(exc)))
        return report
    return check_records(session_id, records)


def check_records(session_id: str, records: Sequence[Record]) -> CheckReport:
    """Check the invariants over records already read (pure)."""
    report = CheckReport(session=session_id, records=len(records))
    problems = report.problems
    states: dict[str, LoopState] = {}
    settled: Counter[str] = Counter()
    started: set[str] = set()
    unknown: set[str] = set()
    gates_open: dict[str, str] = {}
    gates_closed: set[str] = set()
    turns_open: dict[str, int] = {}
    compactions: dict[str, int] = {}
    expected = 1
    for r in records:
        e = r.event
        if r.seq != expected:
            problems.append(Problem(r.seq, "seq gap-free", f"expected seq {expected}"))
        expected = r.seq + 1
        state = states.setdefault(r.loop, LoopState())
        match e:
            case ToolStarted():
                if e.execution_id in started:
                    problems.append(Problem(r.seq, "tool started once", e.execution_id))
                started.add(e.execution_id)
            case ToolCompleted() if e.execution_id:
                settled[e.execution_id] += 1
                if settled[e.execution_id] > 1:
                    problems.append(Problem(r.seq, "tool settled at most once", e.execution_id))
            case ToolAbandoned():
                if e.execution_id not in started:
                    problems.append(Problem(r.seq, "abandoned call had started", e.execution_id))
                if e.reason == "interrupted":
                    settled[e.execution_id] += 1
                    if settled[e.execution_id] > 1:
                        problems.append(Problem(r.seq, "tool settled at most once", e.execution_id))
                else:
                    unknown.add(e.execution_id)
            case ToolResolved():
                if e.execution_id not in unknown:
                    problems.append(
                        Problem(r.seq, "resolved only an unknown outcome", e.execution_id)
                    )
                unknown.discard(e.execution_id)
                settled[e.execution_id] += 1
                if settled[e.execution_id] > 1:
                    problems.append(Problem(r.seq, "tool settled at most once", e.execution_id))
            case GateOpened():
                gates_open[e.gate_id] = e.kind
            case GateResolved() | GateCancelled():
                if e.gate_id in gates_closed:
                    problems.append(Problem(r.seq, "gate closed at most once", e.gate_id))
                elif e.gate_id not in gates_open:
                    problems.append(Problem(r.seq, "gate closed after it opened", e.gate_id))
                elif isinstance(e, GateResolved) and gates_open[e.gate_id] != e.kind:
                    problems.append(Problem(r.seq, "gate resolved with its kind", e.gate_id))
                gates_open.pop(e.gate_id, None)
                gates_closed.add(e.gate_id)
            case TurnStarted():
                if r.loop in turns_open:
                    problems.append(
                        Problem(r.seq, "turn ended at most once", f"turn {turns_open[r.loop]} open")
                    )
                turns_open[r.loop] = e.turn
            case TurnEnded():
                if turns_open.pop(r.loop, None) is None:
                    problems.append(Problem(r.seq, "turn ended at most once", f"turn {e.turn}"))
            case ModelCallStarted():
                _check_tail(r.seq, state.messages, problems)
            case CompactionStarted():
                compactions[e.attempt_id] = e.basis
            case CompactionCommitted():
                basis = compactions.pop(e.attempt_id, None)
                if basis is None:
                    problems.append(Problem(r.seq, "compaction has a matching start", e.attempt_id))
                elif basis != e.basis:
                    problems.append(
                        Problem(r.seq, "compaction basis matches its start", e.attempt_id)
                    )
                if e.retained > len(state.messages) or e.replaced + e.retained > len(
                    state.messages
                ):
                    problems.append(Problem(r.seq, "compaction range valid", e.attempt_id))
            case CompactionRejected():
                compactions.pop(e.attempt_id, None)
            case _:
                pass
        try:
            fold(state, r)
        except FoldError as exc:
            problems.append(Problem(r.seq, "fold succeeds", str(exc)))
        except Exception as exc:
            problems.append(Problem(r.seq, "fold succeeds", repr(exc)))
    problems.sort(key=lambda p: p.seq)
    return report


def _check_tail(seq: int, messages: Sequence[Message], problems: list[Problem]) -> None:
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
        problems.append(
            Problem(seq, "every tool_use answered before the next call", ", ".join(missing))
        )
    seen: Counter[str] = Counter(
        b.tool_use_id for m in tail for b in m.blocks if isinstance(b, ToolResult)
    )
    twice = [k for k, n in seen.items() if n > 1]
    if twice:
        problems.append(Problem(seq, "every tool_use answered exactly once", ", ".join(twice)))
