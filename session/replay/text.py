"""How the replay renderers word records.

The agent's words and the runtime's notice are told apart here, once: a
notice is never shown or counted as agent output.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from journal.content import Image, Text
from journal.events import (
    DeadlinePassed,
    GateOpened,
    GateReviewed,
    HookDecided,
    LoopConfigured,
    LoopInferenceChanged,
    LoopReconfigured,
    LoopToolsReplaced,
    ModelMessageCommitted,
    ToolsLoaded,
)
from loopruntime.host import change_text


def short(value: object, limit: int = 160) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def blocks_text(blocks: Iterable[object]) -> str:
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, Text):
            parts.append(b.text)
        elif isinstance(b, Image):
            parts.append(f"[image {b.media_type}]")
    return " ".join(parts)


def agent_text(event: ModelMessageCommitted) -> str:
    """The text the model produced, without the runtime's notice block.

    A notice is the last text block of a message committed with ``notice``
    set (DESIGN.md §5); it is the runtime speaking, never the agent."""
    texts = [b.text for b in event.message.blocks if isinstance(b, Text)]
    if event.notice is not None and texts:
        texts = texts[:-1]
    if event.message.synthetic:
        return ""
    return "".join(texts)


def notice_text(event: ModelMessageCommitted) -> str:
    if event.notice is None:
        return ""
    texts = [b.text for b in event.message.blocks if isinstance(b, Text)]
    return texts[-1] if texts else ""


def config_text(
    event: LoopConfigured
    | LoopReconfigured
    | LoopInferenceChanged
    | LoopToolsReplaced
    | ToolsLoaded,
) -> str:
    """What a configuration record says, in one line."""
    match event:
        case LoopConfigured():
            c = event.config
            tools = ", ".join(t.name for t in c.tools if t.offered) or "none"
            modes = f", modes {', '.join(m.name for m in c.modes)}" if c.modes else ""
            hooks = f", hooks {', '.join(c.hooks)}" if c.hooks else ""
            reviewers = f", classifiers {', '.join(c.classifiers)}" if c.classifiers else ""
            return (
                f"model {c.model}, system prompt {c.system[:8]}, tools {tools}{modes}"
                f"{hooks}{reviewers}"
            )
        case LoopReconfigured():
            return "; ".join(change_text(c) for c in event.changes)
        case LoopInferenceChanged():
            model = event.model or "the definition's"
            budget = f"{event.max_tokens} tokens" if event.max_tokens else "the definition's"
            return f"from the next turn: model {model}, max {budget}"
        case LoopToolsReplaced():
            tools = ", ".join(event.tools) if event.tools is not None else "the definition's"
            return f"from the next turn: tools {tools}"
        case ToolsLoaded():
            return f"tools loaded: {', '.join(event.tools)}"


def gate_text(event: GateOpened) -> str:
    """One line for an opened gate: what it asks, and how it is answered (a
    form's fields, a URL to open; the URL is shown, never fetched)."""
    head = f"? gate {event.gate_id} ({event.kind}"
    if event.form is not None:
        fields = sorted(_form_fields(event.form))
        listed = f" fields {', '.join(fields)}" if fields else ""
        return f"{head}, form{listed}): {event.prompt}"
    if event.url is not None:
        then = "confirm with a value" if event.needs_value else "confirm"
        return f"{head}, open url): {event.prompt} → {event.url} ({then})"
    if event.kind == "user_input":
        choices = f" {list(event.choices)}" if event.choices else ""
        return f"{head}): {event.prompt}{choices}"
    return f"{head}): {event.prompt} {short(event.preview or {})}"


def _form_fields(schema: dict[str, object]) -> list[str]:
    """The top-level field names of a form's JSON Schema (through one ``$ref``)."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        defs = schema.get("$defs")
        target = defs.get(ref.rsplit("/", 1)[-1]) if isinstance(defs, dict) else None
        schema = target if isinstance(target, dict) else schema
    properties = schema.get("properties")
    return list(properties) if isinstance(properties, dict) else []


_DEADLINE_WHAT = {
    "tool": "tool call",
    "model_first_token": "first output of model call",
    "model_call": "model call",
    "turn": "turn",
}
_DEADLINE_THEN = {
    "unknown": "cancelled; its outcome is unknown until the host resolves it",
    "retried": "cancelled and run again",
    "failed": "cancelled; it failed",
    "truncated": "cancelled; the reply keeps what arrived",
    "interrupted": "interrupted; the turn ends with outcome limit",
}


def deadline_text(event: DeadlinePassed) -> str:
    """One line for a ``deadline.passed`` record: which deadline, what it cut,
    and what followed."""
    what = _DEADLINE_WHAT.get(event.deadline, event.deadline)
    target = f"{what} {event.ref}" if event.ref else f"{what} {event.turn}"
    attempt = f", attempt {event.attempt}" if event.attempt > 1 else ""
    then = _DEADLINE_THEN.get(event.action, event.action)
    return f"⏱ deadline passed ({event.seconds:g} s{attempt}): {target} {then}"


_COLOURS = {
    "user": "\x1b[1;34m",
    "assistant": "\x1b[1;32m",
    "tool": "\x1b[33m",
    "gate": "\x1b[35m",
    "notice": "\x1b[1;31m",
    "dim": "\x1b[2m",
}
_RESET = "\x1b[0m"


def painted(kind: str, text: str, *, color: bool) -> str:
    """``text`` in the colour of ``kind`` (ANSI codes) when ``color``, else as it is."""
    return f"{_COLOURS[kind]}{text}{_RESET}" if color else text


def hook_text(e: HookDecided) -> str:
    """A hook's decision in words: ``hook guard (before_tool) denied call tu_1: no``."""
    who = f"hook {e.hook} ({e.point})"
    call = f" call {e.tool_use_id}" if e.tool_use_id else ""
    match e.action:
        case "context":
            return f"{who} added context: {short(e.text)}"
        case "stop":
            return f"{who} stopped the turn: {e.reason}"
        case "deny":
            return f"{who} denied{call}: {e.reason}"
        case "rewrite":
            return f"{who} rewrote{call}: {short(e.original or {})} → {short(e.input or {})}"
        case "replace":
            why = f": {e.reason}" if e.reason else ""
            return f"{who} replaced the result of{call}{why}"
        case "failed":
            return f"{who} failed{call} (the runtime failed closed): {e.reason}"
    return f"{who} {e.action}"


def review_text(e: GateReviewed) -> str:
    """A classifier's review in words: ``classifier rules: allow deploy (staging only)``."""
    failed = " (failed, so ask)" if e.failed else ""
    why = f": {e.reason}" if e.reason else ""
    return f"classifier {e.classifier}: {e.verdict} {e.tool_name}{failed}{why}"
