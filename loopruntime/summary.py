"""The summary: its grammar, and who writes it (a ``Compactor``).

The grammar, parsed by the pure ``parse_summary`` and written by
``render_summary``::

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
from typing import Protocol

import msgspec

from journal.content import Message, Text, ToolResult, ToolUse

from .model import Accumulator, Model, ModelRequest

__all__ = [
    "MAX_SUMMARY_CHARS",
    "SECTIONS",
    "Compactor",
    "ModelCompactor",
    "Summary",
    "SummaryError",
    "parse_summary",
    "render_summary",
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
        # A summary past MAX_SUMMARY_CHARS is refused anyway: stop reading a
        # stream that could not make one (four bytes a character at most).
        acc = Accumulator(max_response_bytes=4 * MAX_SUMMARY_CHARS)
        async with chosen.stream(request) as stream:
            async for delta in stream:
                acc.feed(delta)
        return acc.text()
