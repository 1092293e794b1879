"""What the console's pages show, computed from records and states (pure).

No I/O and no framework here: the session list's rows and their statuses,
one record as the transcript shows it (words from the replay tool), the
streaming text a ``model.output`` record carries, and the actions a person
can take on a session's loop states.  ``app`` turns these into JSON.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from journal import HostInfo, Record, SessionInfo
from journal.content import TextDelta
from journal.events import (
    GateOpened,
    GateReviewed,
    ModelCallStarted,
    ModelMessageCommitted,
    ModelOutput,
)
from loopruntime import LoopState

from ..embedded.status import never_started, waiting_for_host
from ..replay import TranscriptRenderer

__all__ = [
    "STATUS_ORDER",
    "SessionRow",
    "Status",
    "Summary",
    "Reviews",
    "TranscriptFeed",
    "actions_of",
    "form_fields",
    "link_url",
    "session_row",
    "session_status",
    "sorted_rows",
    "summary_of",
]

Status = Literal["waiting", "unknown", "paused", "crashed", "running", "idle", "damaged", "host"]

STATUS_ORDER: tuple[Status, ...] = (
    "waiting",
    "unknown",
    "paused",
    "crashed",
    "damaged",
    "host",
    "running",
    "idle",
)
"""The list's order: what needs a person first."""

STATUS_WORDS: dict[Status, str] = {
    "waiting": "waiting on a person",
    "unknown": "unknown effects",
    "paused": "paused",
    "crashed": "crashed, unowned",
    "damaged": "damaged",
    "host": "waiting for a host",
    "running": "running",
    "idle": "idle",
}


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    """What a session's status needs of its loop states: a few counts, small
    enough to keep for every session in the journal."""

    head: int
    """The last seq folded into the states these counts come from."""
    loops: int
    gates: int
    unknown: int
    open_turns: int
    tokens_used: int = 0
    """Tokens every loop spent (the sum of their folds)."""
    paused: int = 0
    """Loops paused (and not stopped): only a resume releases them."""


def summary_of(states: dict[str, LoopState], head: int) -> Summary:
    return Summary(
        head=head,
        loops=len(states),
        gates=sum(len(s.gates) for s in states.values()),
        unknown=sum(len(s.unknown) for s in states.values()),
        open_turns=sum(1 for s in states.values() if s.turn_open and not s.stopped),
        tokens_used=sum(s.tokens_used for s in states.values()),
        paused=sum(1 for s in states.values() if s.paused and not s.stopped),
    )


def session_status(summary: Summary, info: SessionInfo, now_ns: int) -> Status:
    """One word for a session: a paused loop first (nothing goes on until a
    person resumes it), then an open gate (a person is needed), then an
    unknown effect (a person must resolve it), then an open turn: ``running``
    while a host holds a live lease on it, ``crashed`` when no live owner does
    (a process died mid-turn, or a session run outside any host stopped;
    restoring settles it), then entries waiting: ``running`` while a host
    holds it, ``host`` (waiting for a host) while none does; else ``idle``."""
    if summary.paused:
        return "paused"
    if summary.gates:
        return "waiting"
    if summary.unknown:
        return "unknown"
    live = _live(info, now_ns)
    if summary.open_turns:
        return "running" if live else "crashed"
    if info.pending:
        return "running" if live else "host"
    return "idle"


def _live(info: SessionInfo, now_ns: int) -> bool:
    return info.owner is not None and info.expires_at > now_ns


class SessionRow(msgspec.Struct, kw_only=True):
    """One line of the session list."""

    session: str
    status: Status
    status_text: str
    owner: str | None
    owner_live: bool
    last_activity: int
    """unix ns of the last append."""
    records: int
    pending: int
    loops: int
    definition: str | None = None
    problem: str | None = None
    """Why the session could not be read (status ``damaged``)."""
    detail: str = ""
    """Why it is in its status, when the word alone does not say (status
    ``host``: whether any live host serves its definition; ``idle``: that it
    never started, every command sent to it refused)."""
    tokens: int = 0
    """Tokens its loops spent (docs/boundaries.md says which count)."""


def session_row(
    info: SessionInfo,
    summary: Summary | None,
    *,
    now_ns: int | None = None,
    problem: str | None = None,
    hosts: Sequence[HostInfo] | None = None,
) -> SessionRow:
    """The row of ``info``; ``summary`` None when its records could not be
    read; ``hosts``, the registered hosts, say whether any live one serves
    the definition of a session waiting for a host."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    status: Status = "damaged" if summary is None else session_status(summary, info, now_ns)
    detail = ""
    if status == "host":
        detail = waiting_for_host(info, False, hosts) or ""
    elif status == "idle":
        detail = never_started(info) or ""
    return SessionRow(
        session=info.session,
        status=status,
        status_text=STATUS_WORDS[status],
        detail=detail,
        owner=info.owner,
        owner_live=_live(info, now_ns),
        last_activity=info.updated_at,
        records=info.head,
        pending=info.pending,
        loops=0 if summary is None else summary.loops,
        tokens=0 if summary is None else summary.tokens_used,
        definition=info.definition,
        problem=problem,
    )


def sorted_rows(rows: Iterable[SessionRow]) -> list[SessionRow]:
    """Waiting on a person first, then by status, newest activity first."""
    rank = {s: i for i, s in enumerate(STATUS_ORDER)}
    return sorted(rows, key=lambda r: (rank[r.status], -r.last_activity, r.session))


# -- the transcript ---------------------------------------------------------------

_MARK, _TEXT, _END = "\ue000", "\ue001", "\ue002"
"""Private-use characters that bracket a painted span: the renderer's words
are kept as they are and only split into spans for the page's colours."""


class _Marked(TranscriptRenderer):
    def paint(self, kind: str, text: str) -> str:
        return f"{_MARK}{kind}{_TEXT}{text}{_END}"


def _spans(line: str) -> list[list[str]]:
    """``[[kind, text], ...]`` of a marked line; kind "" for plain text."""
    out: list[list[str]] = []
    rest = line
    while rest:
        start = rest.find(_MARK)
        if start < 0:
            out.append(["", rest])
            break
        if start:
            out.append(["", rest[:start]])
        middle = rest.find(_TEXT, start)
        end = rest.find(_END, middle)
        if middle < 0 or end < 0:
            # Journal text holding the markers themselves: shown as it is.
            out.append(["", rest[start:]])
            break
        out.append([rest[start + 1 : middle], rest[middle + 1 : end]])
        rest = rest[end + 1 :]
    return out


def event_tag(record: Record) -> str:
    return str(type(record.event).__struct_config__.tag)


class TranscriptFeed:
    """Records in seq order, one at a time, to what the page shows of each:
    ``{"seq", "id", "loop", "tag", "lines": [{"depth", "spans"}], "stream"}``.

    The lines are the replay transcript's lines (``TranscriptRenderer``), so
    the page says what ``loopruntime replay`` says.  ``stream`` is set on the
    records of a model call in progress: ``{"effect", "text", "state"}``
    with ``state`` ``open`` (``model.call_started``), ``more`` (a
    ``model.output`` chunk, its text deltas joined) or ``closed`` (the
    committed message, which the lines then show)."""

    def __init__(self) -> None:
        self._renderer = _Marked()

    def item(self, record: Record) -> dict[str, Any]:
        prefix = len(f"{record.seq:>5} ")
        lines = []
        for marked in self._renderer.feed(record):
            # The renderer's own seq column is dropped (the page shows seq apart).
            body = _strip_seq(marked, prefix)
            stripped = body.lstrip(" ")
            depth = (len(body) - len(stripped)) // 4
            lines.append({"depth": depth, "spans": _spans(stripped)})
        item: dict[str, Any] = {
            "seq": record.seq,
            "id": record.id,
            "loop": record.loop,
            "tag": event_tag(record),
            "lines": lines,
            "stream": None,
        }
        e = record.event
        if isinstance(e, ModelCallStarted):
            item["stream"] = {"effect": e.effect_id, "text": "", "state": "open"}
        elif isinstance(e, ModelOutput):
            text = "".join(p.text for p in e.pieces if isinstance(p, TextDelta))
            item["stream"] = {"effect": e.effect_id, "text": text, "state": "more"}
        elif isinstance(e, ModelMessageCommitted):
            item["stream"] = {"effect": e.effect_id, "text": "", "state": "closed"}
        return item


def _strip_seq(marked: str, prefix: int) -> str:
    """The line without the renderer's seq column (painted ``dim``)."""
    if marked.startswith(_MARK):
        end = marked.find(_END)
        return marked[end + 1 :]
    return marked[prefix:]


# -- actions ------------------------------------------------------------------------


class Reviews:
    """The classifiers' reviews of each call (``gate.reviewed``), by tool use
    id, so a permission gate is shown beside the reviews that left it to a
    person.  Fed every record; keeps only reviews."""

    __slots__ = ("by_call",)

    def __init__(self) -> None:
        self.by_call: dict[str, list[dict[str, Any]]] = {}

    def feed(self, record: Record) -> None:
        e = record.event
        if isinstance(e, GateReviewed):
            self.by_call.setdefault(e.tool_use_id, []).append(
                {
                    "classifier": e.classifier,
                    "verdict": e.verdict,
                    "reason": e.reason,
                    "failed": e.failed,
                    "seq": record.seq,
                }
            )


def link_url(url: str | None) -> str | None:
    """``url`` when a page may make it a link (an absolute http(s) address),
    else None: the page then shows it as text only.  The runtime refuses
    other URLs when the gate opens; a journal written by hand is not trusted."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    if any(c.isspace() or ord(c) < 32 for c in url):
        return None
    return url


_PLAIN = ("string", "integer", "number", "boolean")


def form_fields(schema: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The plain fields of a form's JSON Schema, in its order: ``{"name",
    "type", "required", "title", "description", "enum", "default"}`` with
    ``type`` one of string, integer, number, boolean, enum, or json (any
    other shape: the page offers a JSON text box for that field).  None when
    the schema is not an object with properties (the page then offers one
    JSON text box for the whole answer)."""
    root = _resolved(schema, schema)
    properties = root.get("properties")
    if root.get("type") != "object" or not isinstance(properties, dict) or not properties:
        return None
    required = root.get("required")
    needed = set(required) if isinstance(required, list) else set()
    fields = []
    for name, raw in properties.items():
        prop = raw if isinstance(raw, dict) else {}
        shape, optional = _field_shape(schema, prop)
        field: dict[str, Any] = {
            "name": str(name),
            "type": shape.get("type") if shape.get("type") in _PLAIN else "json",
            "required": name in needed,
            "title": _text(prop.get("title")) or _text(shape.get("title")),
            "description": _text(prop.get("description")) or _text(shape.get("description")),
            "enum": None,
            "nullable": optional,
            "default": prop.get("default"),
            "has_default": "default" in prop,
        }
        if isinstance(shape.get("enum"), list) and shape["enum"]:
            field["type"], field["enum"] = "enum", list(shape["enum"])
        fields.append(field)
    return fields


def _resolved(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` through its ``$ref`` into the schema's ``$defs`` (a few hops)."""
    for _ in range(8):
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
            return node
        defs = schema.get("$defs")
        target = defs.get(ref.removeprefix("#/$defs/")) if isinstance(defs, dict) else None
        if not isinstance(target, dict):
            return {}
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _field_shape(schema: dict[str, Any], prop: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A property's own shape (through ``$ref``, and through ``anyOf`` with
    null: an optional value), and whether null is allowed."""
    prop = _resolved(schema, prop)
    options = prop.get("anyOf")
    if isinstance(options, list):
        rest = [o for o in options if isinstance(o, dict) and o.get("type") != "null"]
        if len(rest) == 1 and len(rest) < len(options):
            return _resolved(schema, rest[0]), True
    return prop, False


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def gate_view(loop: str, g: GateOpened, reviews: Reviews | None = None) -> dict[str, Any]:
    """One open gate as the page's gate panel shows it."""
    root = _resolved(g.form, g.form) if g.form is not None else {}
    return {
        "loop": loop,
        "gate_id": g.gate_id,
        "kind": g.kind,
        "prompt": g.prompt,
        "choices": list(g.choices) if g.choices else None,
        "tool": g.tool_name,
        "preview": g.preview,
        "form": g.form,
        "form_title": _text(root.get("title")),
        "form_description": _text(root.get("description")),
        "fields": form_fields(g.form) if g.form is not None else None,
        "url": g.url,
        "link": link_url(g.url),
        "needs_value": g.needs_value,
        "reviews": reviews.by_call.get(g.tool_use_id, []) if reviews and g.tool_use_id else [],
    }


def actions_of(
    states: dict[str, LoopState], reviews: Reviews | None = None
) -> dict[str, list[dict[str, Any]]]:
    """What a person can do now: open gates (allow / deny, answer a question
    or a form, confirm a URL) with the classifiers' reviews that left a
    permission to a person, tool calls whose outcome is unknown
    (resolve), per loop, in the order opened, and paused loops (resume)."""
    gates: list[dict[str, Any]] = []
    unknown: list[dict[str, Any]] = []
    paused: list[dict[str, Any]] = []
    for loop, state in states.items():
        if state.paused and not state.stopped:
            paused.append({"loop": loop, "turn_open": state.turn_open})
        for g in state.open_gates:
            gates.append(gate_view(loop, g, reviews))
        for u in state.unknown_effects:
            unknown.append(
                {"loop": loop, "execution_id": u.execution_id, "name": u.name, "input": u.input}
            )
    return {"gates": gates, "unknown": unknown, "paused": paused}
