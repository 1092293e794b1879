"""Compaction: replace old history in the model context with a summary.

Non-destructive: the journal keeps every original record; only the fold's
model context changes, at ``compaction.committed``.  The summary is produced
by a ``Compactor`` in a strict grammar, validated by the pure parser here, and
committed only if the history it summarised is still current
(compare-and-swap on the basis seq).  Journal failures propagate (they stop
the loop); they are never turned into a rejection.

The grammar::

    <conversation_summary>
      <goal>...</goal>
      <constraints>...</constraints>
      <decisions>...</decisions>
      <state>...</state>
      <open_items>...</open_items>
    </conversation_summary>

Exactly those five elements, in that order, holding escaped text only
(``&amp; &lt; &gt; &quot; &apos;``); ``goal`` and ``state`` non-empty;
nothing but whitespace outside the root.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec

from journal.content import Message, Text, ToolResult, ToolUse
from journal.events import (
    CompactionCommitted,
    CompactionRejected,
    CompactionStarted,
)

from .errors import GuardFailedError, ModelError
from .model import Accumulator, ModelRequest

if TYPE_CHECKING:
    from .actor import Loop
    from .model import Model

__all__ = [
    "MAX_SUMMARY_CHARS",
    "SECTIONS",
    "Compactor",
    "ModelCompactor",
    "Summary",
    "SummaryError",
    "parse_summary",
    "render_summary",
    "split_for_compaction",
]

SECTIONS = ("goal", "constraints", "decisions", "state", "open_items")
MAX_SUMMARY_CHARS = 64_000
"""A summary longer than this defeats its purpose and is rejected."""


class SummaryError(ValueError):
    """The compactor's output is not a valid summary; says precisely why."""


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    goal: str
    constraints: str
    decisions: str
    state: str
    open_items: str


_ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'"}
_ENTITY = re.compile(r"&(?:amp|lt|gt|quot|apos);")


def _unescape(text: str, section: str) -> str:
    if "<" in text:
        if text.lstrip().startswith("<![CDATA[") or "<![CDATA[" in text:
            raise SummaryError(f"<{section}> holds a CDATA section; only escaped text is allowed")
        raise SummaryError(f"<{section}> holds markup; only escaped text is allowed")
    stray = _ENTITY.sub("", text)
    if "&" in stray:
        raise SummaryError(f"<{section}> holds an unknown or unescaped '&'")
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(0)], text)


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&apos;")
    )


def parse_summary(text: str) -> Summary:
    """Parse and validate a summary; raise ``SummaryError`` with the reason."""
    if len(text) > MAX_SUMMARY_CHARS:
        raise SummaryError(
            f"summary is {len(text)} characters, more than the {MAX_SUMMARY_CHARS} allowed"
        )
    body = text.strip()
    root_open, root_close = "<conversation_summary>", "</conversation_summary>"
    if not body.startswith(root_open):
        raise SummaryError("summary must start with <conversation_summary>")
    end = body.find(root_close)
    if end < 0:
        raise SummaryError("summary has no closing </conversation_summary>")
    if body[end + len(root_close) :].strip():
        raise SummaryError("text after </conversation_summary> is not allowed")
    inner = body[len(root_open) : end]
    values: dict[str, str] = {}
    pos = 0
    for section in SECTIONS:
        match = re.compile(r"\s*<([A-Za-z_][\w.-]*)>").match(inner, pos)
        if match is None:
            rest = inner[pos:].strip()
            if not rest:
                raise SummaryError(f"<{section}> is missing")
            raise SummaryError(f"expected <{section}>, found text {rest[:40]!r}")
        name = match.group(1)
        if name != section:
            if name in SECTIONS:
                raise SummaryError(f"<{name}> is out of order: expected <{section}> here")
            raise SummaryError(f"unexpected element <{name}>: expected <{section}>")
        close = f"</{section}>"
        stop = inner.find(close, match.end())
        if stop < 0:
            raise SummaryError(f"<{section}> is not closed")
        values[section] = _unescape(inner[match.end() : stop], section).strip()
        pos = stop + len(close)
    if inner[pos:].strip():
        raise SummaryError(f"unexpected content after </open_items>: {inner[pos:].strip()[:40]!r}")
    for required in ("goal", "state"):
        if not values[required]:
            raise SummaryError(f"<{required}> must not be empty")
    return Summary(**values)


def render_summary(summary: Summary) -> str:
    """The summary in its grammar (inverse of ``parse_summary``)."""
    parts = "".join(f"<{s}>{_escape(getattr(summary, s))}</{s}>\n" for s in SECTIONS)
    return f"<conversation_summary>\n{parts}</conversation_summary>"


class Compactor(Protocol):
    """Writes the summary text of ``messages`` (in the grammar above)."""

    async def summarize(
        self, messages: Sequence[Message], obligations: Sequence[str], *, model: Model
    ) -> str: ...


_INSTRUCTIONS = """You compact an agent's conversation history.  Reply with ONLY this XML, \
escaping &, <, > in text:
<conversation_summary>
<goal>what the user wants overall (required)</goal>
<constraints>rules and preferences to keep following</constraints>
<decisions>what was decided or done, with key facts and results</decisions>
<state>where the work stands now (required)</state>
<open_items>what remains, including the open obligations listed</open_items>
</conversation_summary>"""


def _transcript(messages: Sequence[Message]) -> str:
    lines: list[str] = []
    for m in messages:
        for b in m.blocks:
            if isinstance(b, Text):
                lines.append(f"{m.role}: {b.text}")
            elif isinstance(b, ToolUse):
                lines.append(f"{m.role} called {b.name} {msgspec.json.encode(b.input).decode()}")
            elif isinstance(b, ToolResult):
                text = " ".join(c.text for c in b.content if isinstance(c, Text))
                lines.append(f"tool result{' (error)' if b.is_error else ''}: {text}")
    return "\n".join(lines)


@dataclass(frozen=True)
class ModelCompactor:
    """Asks a model (the loop's own unless one is given) for the summary."""

    model: Model | None = None
    max_tokens: int = 2048

    async def summarize(
        self, messages: Sequence[Message], obligations: Sequence[str], *, model: Model
    ) -> str:
        chosen = self.model or model
        ask = _transcript(messages)
        if obligations:
            ask += "\n\nOpen obligations right now:\n" + "\n".join(f"- {o}" for o in obligations)
        request = ModelRequest(
            system=_INSTRUCTIONS,
            messages=(Message(role="user", blocks=(Text(text=ask),)),),
            max_tokens=self.max_tokens,
        )
        acc = Accumulator()
        async with chosen.stream(request) as stream:
            async for delta in stream:
                acc.feed(delta)
        return acc.text()


def split_for_compaction(messages: Sequence[Message], keep_exchanges: int) -> int:
    """Index where the retained tail begins: the newest ``keep_exchanges``
    exchanges led by a person's message.  A tool call is never split from its
    result, because an exchange only starts at a user message that carries no
    tool results."""
    starts = [
        i
        for i, m in enumerate(messages)
        if m.role == "user"
        and not m.derived
        and not any(isinstance(b, ToolResult) for b in m.blocks)
    ]
    if keep_exchanges <= 0:
        return len(messages)
    if len(starts) < keep_exchanges:
        return 0
    return starts[-keep_exchanges]


def obligations_of(loop: Loop) -> list[str]:
    state = loop.state
    out = [
        f"tool call {s.name} (execution {s.execution_id}) has an unknown outcome"
        for s in state.unknown.values()
    ]
    out += [f"gate {g.gate_id} ({g.kind}) is open: {g.prompt}" for g in state.gates.values()]
    out += [f"steering waits to be applied: {s.text}" for s in state.steering]
    out += [
        f"child loop {c.child_loop} ({c.definition}) is running"
        for c in state.children.values()
        if c.status == "running"
    ]
    return out


def needs_compaction(loop: Loop) -> bool:
    """Automatic trigger: the measured context passed ``Limits.compact_at``."""
    limits = loop.resolved().limits
    ctx = loop.state.context
    if limits.compact_at is None or ctx is None or not ctx.window:
        return False
    used = ctx.input_tokens + ctx.cache_read_tokens + ctx.cache_creation_tokens + ctx.output_tokens
    if used < limits.compact_at * ctx.window:
        return False
    # Only when there is something older than the retained tail to replace.
    return split_for_compaction(loop.state.messages, limits.retained_exchanges) > 1


async def compact(loop: Loop, attempt_id: str, *, trigger: str, cause: str | None = None) -> None:
    """Run one compaction attempt to its committed or rejected end."""
    state = loop.state
    limits = loop.resolved().limits
    basis = state.history_seq
    await loop.commit(
        [CompactionStarted(attempt_id=attempt_id, basis=basis, trigger=trigger)],  # type: ignore[arg-type]
        cause=cause,
    )
    cut = split_for_compaction(state.messages, limits.retained_exchanges)
    replaced = list(state.messages[:cut])
    if not replaced:
        await _reject(loop, attempt_id, "failed", "nothing older than the retained exchanges")
        return
    obligations = obligations_of(loop)
    compactor = loop.definition.compactor or ModelCompactor()
    try:
        text = await compactor.summarize(replaced, obligations, model=loop.resolved().model)
    except ModelError as exc:
        await _reject(loop, attempt_id, "failed", f"compactor model failed: {exc}")
        return
    try:
        summary = parse_summary(text)
    except SummaryError as exc:
        await _reject(loop, attempt_id, "invalid_summary", str(exc))
        return
    body = render_summary(summary)
    if obligations:
        body += "\nOpen obligations:\n" + "\n".join(f"- {o}" for o in obligations)
    message = Message(
        role="user",
        blocks=(Text(text="[summary of the earlier conversation]\n" + body),),
        derived=True,
    )
    committed = CompactionCommitted(
        attempt_id=attempt_id,
        basis=basis,
        summary=message,
        replaced=len(replaced),
        retained=len(state.messages) - cut,
        obligations=tuple(obligations),
    )
    try:
        # Compare-and-swap: appended only if no history-changing record was
        # folded since the basis (checked by the writer, after everything
        # committed before this has been folded).
        await loop.commit([committed], guard=lambda: loop.state.history_seq == basis)
    except GuardFailedError:
        await _reject(
            loop,
            attempt_id,
            "stale",
            f"history changed at seq {loop.state.history_seq} after basis {basis}",
        )


async def _reject(loop: Loop, attempt_id: str, reason: str, detail: str) -> None:
    await loop.commit(
        [CompactionRejected(attempt_id=attempt_id, reason=reason, detail=detail)]  # type: ignore[arg-type]
    )
