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
from typing import TYPE_CHECKING, Literal, Protocol

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
    from .state import LoopState

__all__ = [
    "MAX_SUMMARY_CHARS",
    "SECTIONS",
    "SUMMARY_HEADER",
    "Compactor",
    "ModelCompactor",
    "Summary",
    "SummaryError",
    "compact",
    "measured_fraction",
    "needs_compaction",
    "obligations_of",
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
_TAG = re.compile(r"</?([A-Za-z_][\w.:-]*)")
_OPEN = re.compile(r"\s*<([A-Za-z_][\w.:-]*)(\s[^>]*)?>")
_ROOT_OPEN, _ROOT_CLOSE = "<conversation_summary>", "</conversation_summary>"


def _unescape(text: str, section: str) -> str:
    """The text of ``section`` with its five entities decoded (one pass, so
    ``&amp;lt;`` stays ``&lt;``).  Markup of any kind is refused."""
    if "<" in text:
        if "<![CDATA[" in text:
            raise SummaryError(f"<{section}> holds a CDATA section; only escaped text is allowed")
        found = _TAG.search(text)
        what = f"a nested element <{found.group(1)}>" if found else "a raw '<'"
        raise SummaryError(f"<{section}> holds {what}; only escaped text is allowed")
    if "&" in _ENTITY.sub("", text):
        raise SummaryError(
            f"<{section}> holds an unknown entity or an unescaped '&' (write it as &amp;)"
        )
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
    """Parse and validate a summary in the grammar of the module docstring.

    Pure and total: returns the ``Summary`` (section texts unescaped and
    stripped of surrounding whitespace) or raises ``SummaryError`` whose
    message names the first violation: the size limit, the root, a section
    that is missing, out of order, repeated, unknown, unclosed or carrying
    attributes, markup or CDATA inside a section, text between or after the
    sections, or an empty ``goal`` / ``state``."""
    if len(text) > MAX_SUMMARY_CHARS:
        raise SummaryError(
            f"summary is {len(text)} characters, more than the {MAX_SUMMARY_CHARS} allowed"
        )
    body = text.strip()
    if not body:
        raise SummaryError("summary is empty")
    if not body.startswith(_ROOT_OPEN):
        raise SummaryError(f"summary must start with {_ROOT_OPEN}, not {body[:40]!r}")
    end = body.find(_ROOT_CLOSE)
    if end < 0:
        raise SummaryError(f"summary has no closing {_ROOT_CLOSE}")
    trailing = body[end + len(_ROOT_CLOSE) :].strip()
    if trailing:
        raise SummaryError(f"text after {_ROOT_CLOSE} is not allowed: {trailing[:40]!r}")
    inner = body[len(_ROOT_OPEN) : end]
    values: dict[str, str] = {}
    pos = 0
    for index, section in enumerate(SECTIONS):
        match = _OPEN.match(inner, pos)
        if match is None:
            rest = inner[pos:].strip()
            if not rest:
                raise SummaryError(f"<{section}> is missing")
            raise SummaryError(f"expected <{section}>, found {rest[:40]!r}")
        name = match.group(1)
        if name != section:
            raise SummaryError(_misplaced(name, section, index, inner[pos:]))
        if match.group(2):
            raise SummaryError(f"<{section}> must not carry attributes")
        close = f"</{section}>"
        stop = inner.find(close, match.end())
        if stop < 0:
            raise SummaryError(f"<{section}> is not closed")
        values[section] = _unescape(inner[match.end() : stop], section).strip()
        pos = stop + len(close)
    rest = inner[pos:].strip()
    if rest:
        found = _TAG.match(rest)
        if found and found.group(1) in SECTIONS:
            raise SummaryError(f"<{found.group(1)}> appears more than once")
        raise SummaryError(f"unexpected content after </open_items>: {rest[:40]!r}")
    for required in ("goal", "state"):
        if not values[required]:
            raise SummaryError(f"<{required}> must not be empty")
    return Summary(**values)


def _misplaced(name: str, expected: str, index: int, rest: str) -> str:
    """Why element ``name`` cannot stand where ``expected`` belongs."""
    if name not in SECTIONS:
        return f"unexpected element <{name}>: expected <{expected}>"
    if SECTIONS.index(name) < index:
        return f"<{name}> appears more than once"
    if re.search(rf"<{expected}[\s>]", rest) is None:
        return f"<{expected}> is missing (found <{name}> where it belongs)"
    return f"<{name}> is out of order: expected <{expected}> here"


def render_summary(summary: Summary) -> str:
    """The summary in its grammar (inverse of ``parse_summary``)."""
    parts = "".join(f"<{s}>{_escape(getattr(summary, s))}</{s}>\n" for s in SECTIONS)
    return f"<conversation_summary>\n{parts}</conversation_summary>"


class Compactor(Protocol):
    """Writes the summary text of ``messages`` (in the grammar above).

    ``messages`` is the history being replaced (an immutable copy the
    compactor may keep); ``obligations`` lists what is open at this moment,
    one line each; ``model`` is the loop's model in its current mode.  The
    returned text is validated by ``parse_summary``; the compactor need not
    validate it.  A model failure is reported by raising ``ModelError``; any
    other exception counts as a failure of the compactor too.  Either way the
    attempt ends ``compaction.rejected(failed)`` and the context is unchanged.
    The compactor never touches the journal, and it may be cancelled at any
    checkpoint (the loop shutting down)."""

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
    """The default compactor: one model call (the loop's own model unless
    ``model`` is given) with a summary prompt and a plain-text transcript of
    the replaced history plus the open obligations.  Returns the text of the
    reply as it came; a failed stream raises ``ModelError``."""

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
    """Index where the retained tail begins (``messages[:index]`` is replaced).

    The tail holds the newest ``keep_exchanges`` exchanges, each led by a
    message a person (or the runtime on their behalf) sent: a user message
    that is not derived and carries no tool results.  So a cut never falls
    between a ``tool_use`` and its ``tool_result``.  An assistant message that
    ends the history with calls still unanswered (a turn waiting at a gate)
    keeps its whole exchange even when ``keep_exchanges`` is 0: its results
    arrive after the compaction and must follow their calls.  Pure."""
    starts = [
        i
        for i, m in enumerate(messages)
        if m.role == "user"
        and not m.derived
        and not any(isinstance(b, ToolResult) for b in m.blocks)
    ]
    last = messages[-1] if messages else None
    if (
        keep_exchanges <= 0
        and last is not None
        and last.role == "assistant"
        and any(isinstance(b, ToolUse) for b in last.blocks)
    ):
        keep_exchanges = 1
    if keep_exchanges <= 0:
        return len(messages)
    if len(starts) < keep_exchanges:
        return 0
    return starts[-keep_exchanges]


def obligations_of(state: LoopState) -> list[str]:
    """What is open in ``state`` and must outlive a compaction, one line each:
    unknown effects, open gates, queued steering, running child loops."""
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


def measured_fraction(state: LoopState) -> float | None:
    """How full the context was at the last model call, as a fraction of the
    model's window (None: never measured, or the window is unknown)."""
    ctx = state.context
    if ctx is None or not ctx.window:
        return None
    used = ctx.input_tokens + ctx.cache_read_tokens + ctx.cache_creation_tokens + ctx.output_tokens
    return used / ctx.window


def needs_compaction(loop: Loop) -> bool:
    """Automatic trigger: the measured context reached ``Limits.compact_at``
    of the window and there is history older than the retained tail (more
    than a lone earlier summary) to replace."""
    limits = loop.resolved().limits
    fraction = measured_fraction(loop.state)
    if limits.compact_at is None or fraction is None or fraction < limits.compact_at:
        return False
    return split_for_compaction(loop.state.messages, limits.retained_exchanges) > 1


SUMMARY_HEADER = "[summary of the earlier conversation]"
"""First line of the derived message that stands for the replaced history."""


async def compact(
    loop: Loop,
    attempt_id: str,
    *,
    trigger: str,
    cause: str | None = None,
) -> None:
    """Run one compaction attempt to its ``compaction.committed`` or
    ``compaction.rejected`` end.

    The basis is ``history_seq`` when the attempt starts; the summarised
    messages are the context at that basis.  ``compaction.committed`` is a
    guarded commit: the session writer appends it only if, once everything
    committed before it is folded, ``history_seq`` still equals the basis
    (and the open obligations it lists are still the open ones); otherwise
    the attempt is ``rejected(stale)``.  The compactor is told the
    obligations open when it starts; the summary message lists those open
    when it commits.  A summary the parser
    refuses is ``rejected(invalid_summary)`` with the parser's reason; a
    compactor that raises is ``rejected(failed)``.  Journal errors propagate
    (they stop the loop): they are never reported as a rejection.  Cancelled
    (the loop shutting down) before its end, the attempt leaves only its
    ``compaction.started``: the context is unchanged.  ``trigger`` is
    ``"auto"`` for the threshold, anything else records ``"manual"``."""
    kind: Literal["manual", "auto"] = "auto" if trigger == "auto" else "manual"
    state = loop.state
    limits = loop.resolved().limits
    basis = state.history_seq
    # A copy taken at the basis: if the history moves on, the guard fails.
    messages = list(state.messages)
    cut = split_for_compaction(messages, limits.retained_exchanges)
    replaced, retained = messages[:cut], len(messages) - cut
    await loop.commit(
        [CompactionStarted(attempt_id=attempt_id, basis=basis, trigger=kind)], cause=cause
    )
    if all(m.derived for m in replaced):
        # Empty, or only an earlier summary: summarising it again gains nothing.
        await _reject(
            loop,
            attempt_id,
            "failed",
            f"nothing to replace: the context holds no more than the "
            f"{limits.retained_exchanges} exchanges it keeps (and any earlier summary)",
        )
        return
    obligations = obligations_of(state)
    compactor = loop.definition.compactor or ModelCompactor()
    try:
        text = await compactor.summarize(replaced, obligations, model=loop.resolved().model)
    except ModelError as exc:
        await _reject(loop, attempt_id, "failed", f"compactor model failed ({exc.code}): {exc}")
        return
    except Exception as exc:
        # A compactor bug must not take the loop down: the context is
        # unchanged and the attempt says why.
        await _reject(loop, attempt_id, "failed", f"compactor raised {exc!r}")
        return
    if not isinstance(text, str):
        await _reject(
            loop,
            attempt_id,
            "invalid_summary",
            f"the compactor returned {type(text).__name__}, not text",
        )
        return
    try:
        summary = parse_summary(text)
    except SummaryError as exc:
        await _reject(loop, attempt_id, "invalid_summary", str(exc))
        return
    # The obligations the summary carries are those open when it commits
    # (steering may have been queued, a gate answered, while the compactor
    # worked); the guard below makes sure they are still exactly these.
    now_open = obligations_of(state)
    body = render_summary(summary)
    if now_open:
        body += "\nOpen obligations:\n" + "\n".join(f"- {o}" for o in now_open)
    message = Message(role="user", blocks=(Text(text=f"{SUMMARY_HEADER}\n{body}"),), derived=True)
    committed = CompactionCommitted(
        attempt_id=attempt_id,
        basis=basis,
        summary=message,
        replaced=len(replaced),
        retained=retained,
        obligations=tuple(now_open),
    )

    def still_current() -> bool:
        return loop.state.history_seq == basis and obligations_of(loop.state) == now_open

    try:
        # Compare-and-swap: appended only if no history-changing record was
        # folded since the basis and the obligations are still those above
        # (checked by the writer, after everything committed before this has
        # been folded).
        await loop.commit([committed], guard=still_current)
    except GuardFailedError:
        if loop.state.history_seq != basis:
            detail = f"history changed at seq {loop.state.history_seq} after basis {basis}"
        else:
            detail = "the open obligations changed while the summary was being committed"
        await _reject(loop, attempt_id, "stale", detail)


async def _reject(
    loop: Loop,
    attempt_id: str,
    reason: Literal["stale", "invalid_summary", "failed"],
    detail: str,
) -> None:
    await loop.commit([CompactionRejected(attempt_id=attempt_id, reason=reason, detail=detail)])
