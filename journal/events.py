"""The event catalog: everything that can happen in a session, as data.

Every event is a frozen, keyword-only msgspec Struct whose tag is its dotted
kind (``"turn.started"``).  They are gathered in the one ``Event`` union that
the codec encodes and decodes, in two families: ``LoopEvent`` (what a loop's
fold reads) and ``SessionEvent`` (what the session records on streams of its
own).  Events carry data only; what they *mean* for loop state is decided by
``loopruntime.state.fold``.

The catalog is one piece: it is the schema of the journal, read as a whole
when a tag or field changes, and the union below must list every event.

Schema rules: new fields get defaults; a field never changes its type; a tag
is never reused or renamed.

No event, nor any Struct it holds, is tracked by the cyclic garbage collector
(``gc=False``): an event holds content, strings, numbers and JSON-like
builtins, never an object that could refer back to it, so it can be in no
reference cycle.  A new field must keep it so (no callables, no live objects):
an event in a cycle would never be freed.  Bump ``codec.SCHEMA_VERSION`` only when an old
reader could misread a new record.

The catalog is one piece on purpose: one union, decoded by one decoder, whose
tags must stay unique, and a reader of the journal format should find every
kind of record in one place.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .content import Message, Piece, ResultBlock, Usage

__all__ = [
    "CHECKPOINT_STREAM",
    "EVENT_TYPES",
    "ChildFinished",
    "ChildStarted",
    "CommandKeyed",
    "CollabControlled",
    "CollabEnded",
    "CollabStarted",
    "CollabTaskFinished",
    "CollabTaskStarted",
    "CollabTurn",
    "Control",
    "Decision",
    "CompactionCommitted",
    "CompactionRejected",
    "CompactionStarted",
    "ConfigChange",
    "ContextMeasured",
    "DeadlinePassed",
    "Event",
    "GateCancelled",
    "GateOpened",
    "GateResolved",
    "GateReviewed",
    "HookDecided",
    "InputCancelled",
    "InputQueued",
    "LoopEvent",
    "LoopConfig",
    "LoopConfigured",
    "LoopImage",
    "LoopInferenceChanged",
    "LoopModeChanged",
    "LoopPaused",
    "LoopReconfigured",
    "LoopResumed",
    "LoopStarted",
    "LoopStopped",
    "LoopToolsReplaced",
    "ModeConfig",
    "ModelCallFailed",
    "ModelCallStarted",
    "ModelMessageCommitted",
    "ModelOutput",
    "Notice",
    "Provenance",
    "SessionCheckpoint",
    "SessionEvent",
    "SessionForked",
    "SessionLevelEvent",
    "SteerApplied",
    "SteerQueued",
    "TaskSpec",
    "ToolAbandoned",
    "ToolConfig",
    "ToolCompleted",
    "ToolProgress",
    "ToolResolved",
    "ToolStarted",
    "ToolsLoaded",
    "TurnEnded",
    "TurnRejected",
    "TurnStarted",
    "CompactionTrigger",
    "DeadlineAction",
    "DeadlineKind",
    "Disposition",
    "GateCancelReason",
    "GateScope",
    "HookAction",
    "HookPoint",
    "NoticeKind",
    "Outcome",
    "Trigger",
]

_opts: dict[str, Any] = {"frozen": True, "kw_only": True, "gc": False}


class Provenance(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where a child loop came from: the parent's loop, turn, step and tool call."""

    parent_loop: str
    turn: int
    step: int
    execution_id: str
    token_allowance: int | None = None
    """Tokens the child may spend in all (``loopruntime/budgets.py``): what
    remained of its parent's token budgets when it started; None: no bound
    drawn from the parent."""


# -- loop -------------------------------------------------------------------


class LoopStarted(msgspec.Struct, tag="loop.started", **_opts):
    """A loop came into being in this session (once per loop, ever)."""

    definition: str
    """Name of the ``LoopDefinition``; restore resolves it by this name."""
    model: str
    """Description of the model runtime in use when the loop started."""
    mode: str | None = None
    parent: Provenance | None = None
    principal: str | None = None
    """Who created the session, for its first loop (``Session.create(principal=)``,
    an inbox ``Create``'s); None for other loops or when not said."""


class LoopModeChanged(msgspec.Struct, tag="loop.mode_changed", **_opts):
    """The loop switched to another named mode of its definition."""

    mode: str | None
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


class LoopPaused(msgspec.Struct, tag="loop.paused", **_opts):
    """The loop was paused: from now on it starts no model call, tool, child
    or turn (a step already running finishes) until ``loop.resumed``.  Its
    children's next steps wait too."""

    principal: str | None = None
    """Who paused it (recorded, never checked)."""


class LoopResumed(msgspec.Struct, tag="loop.resumed", **_opts):
    """The pause ended: what waited (the open turn's next step, queued input,
    answered gates, requested compactions) goes on."""

    principal: str | None = None
    """Who resumed it (recorded, never checked)."""


class LoopStopped(msgspec.Struct, tag="loop.stopped", **_opts):
    """The loop was shut down; it takes no more input."""

    reason: str = "shutdown"


# -- configuration ------------------------------------------------------------
#
# What a loop runs under, as the journal sees it: recorded when the loop
# starts, and again whenever a restore finds the definition changed
# (docs/restore.md, "Deploys").  Digests stand for the long texts.


class ToolConfig(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tool a loop can reach by name."""

    name: str
    schema: str
    """Digest of the tool's input schema (its JSON, keys sorted)."""
    replay_safe: bool = False
    resumable: bool = False
    atomic: bool = False
    permission: str = "none"
    """The policy in effect: ``allow``, ``ask``, ``deny``, ``function`` (a
    callable decides per call) or ``none`` (denied: no policy)."""
    offered: bool = True
    """False for a tool only in the definition's ``tool_registry``: the model
    sees it once ``Session.replace_tools`` names it."""
    deferred: bool = False
    """The model sees it by name only until it loads it (``load_tools``)."""
    redact: str = ""
    """How its input is redacted in the journal: ``fields a, b``, ``function
    module.qualname``, or empty for not at all."""
    redact_result: str = ""
    """How its result is redacted, likewise."""
    middleware: tuple[str, ...] = ()
    """Its own middleware, outermost first, by qualified name."""
    direct: bool = False
    """Its result is the turn's answer (``@tool(direct=True)``)."""


class ModeConfig(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A named mode, with what it overrides (None: the definition's)."""

    name: str
    model: str | None = None
    system: str | None = None
    """Digest of the mode's system prompt."""
    tools: tuple[str, ...] | None = None
    limits: dict[str, Any] | None = None


class LoopConfig(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A loop's definition, as far as it decides what the loop does."""

    model: str
    """Name of the definition's model."""
    model_settings: dict[str, Any] = {}
    """The model's settings (its context window, and what the adapter reports)."""
    system: str = ""
    """Digest of the system prompt."""
    tools: tuple[ToolConfig, ...] = ()
    models: tuple[str, ...] = ()
    """Names of the alternative models registered (``LoopDefinition.models``)."""
    modes: tuple[ModeConfig, ...] = ()
    limits: dict[str, Any] = {}
    hooks: tuple[str, ...] = ()
    """The definition's hooks, in order, as ``point:name``."""
    classifiers: tuple[str, ...] = ()
    """The definition's permission classifiers' names, in order."""
    tool_middleware: tuple[str, ...] = ()
    """The definition's ``tool_middleware``, outermost first, by qualified name."""


class ConfigChange(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One difference between two configurations, for people and checks."""

    what: str
    """``model``, ``model_setting``, ``system``, ``tool_added``,
    ``tool_removed``, ``tool_schema``, ``tool_flags``, ``models``,
    ``mode_added``, ``mode_removed``, ``mode_changed``, ``limit``, ``hooks``,
    ``classifiers``, ``tool_redaction``, ``tool_middleware`` or ``middleware``
    (the definition's ``tool_middleware``)."""
    name: str = ""
    """The tool, mode, setting or limit concerned (empty for the model and prompt)."""
    old: str = ""
    new: str = ""


class LoopConfigured(msgspec.Struct, tag="loop.configured", **_opts):
    """What the loop runs under, recorded when it starts (created, restored
    from a journal that had none, or a child started)."""

    config: LoopConfig
    prompts: dict[str, str] = {}
    """Digest -> text of each system prompt not recorded before in the session."""


class LoopReconfigured(msgspec.Struct, tag="loop.reconfigured", **_opts):
    """A restore found the loop's definition changed, or its MCP servers listed other
    tools than recorded; ``config`` holds from here."""

    config: LoopConfig
    changes: tuple[ConfigChange, ...] = ()
    prompts: dict[str, str] = {}


class LoopInferenceChanged(msgspec.Struct, tag="loop.inference_changed", **_opts):
    """The loop's model and output budget, chosen by command, from its next
    turn on (None: the definition's)."""

    model: str | None = None
    max_tokens: int | None = None
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


class LoopToolsReplaced(msgspec.Struct, tag="loop.tools_replaced", **_opts):
    """The tools the loop offers from its next turn on, by name (delegates
    stay); None: the definition's own again."""

    tools: tuple[str, ...] | None = None
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


# -- input ------------------------------------------------------------------

Trigger = Literal["external", "notification", "subagent"]


class InputQueued(msgspec.Struct, tag="input.queued", **_opts):
    """Input waits to start a turn.

    ``trigger`` says who made it: a person (``external``), the runtime
    reporting something (``notification``), or a child loop (``subagent``).
    """

    input_id: str
    messages: tuple[Message, ...]
    trigger: Trigger = "external"
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""
    child_loop: str | None = None
    """The child loop whose result this input carries (a ``subagent`` or
    ``notification`` input the runtime wrote; None: not a child's result, or
    a journal from before the field, joined by the input's text)."""


class InputCancelled(msgspec.Struct, tag="input.cancelled", **_opts):
    """Queued input was withdrawn before a turn took it."""

    input_id: str
    reason: Literal["requested", "turn_failed", "turn_interrupted", "shutdown"] = "requested"
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


class SteerQueued(msgspec.Struct, tag="steer.queued", **_opts):
    """Guidance for the running turn, applied before its next model call."""

    steer_id: str
    text: str
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


class SteerApplied(msgspec.Struct, tag="steer.applied", **_opts):
    """Queued steering entered the model context (in this order)."""

    steer_ids: tuple[str, ...]


class TurnRejected(msgspec.Struct, tag="turn.rejected", **_opts):
    """Input was refused and never queued: the loop's queue was full
    (``Limits.max_queued_inputs``), the session was shutting down, or it had
    spent its token budget (``Limits.max_session_tokens``).  Nothing folds
    it; it is the journal's trace of a refusal the caller was told of."""

    input_id: str
    reason: Literal["queue_full", "shutting_down", "budget_exhausted"]
    key: str | None = None
    """The idempotency key the refused submit carried (it stays unused)."""
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


# -- commands ---------------------------------------------------------------


class CommandKeyed(msgspec.Struct, tag="command.keyed", **_opts):
    """A command given with an idempotency key was accepted.

    Committed in the same append as the records the command made, first;
    they name it as their cause.  A later command with the same key commits
    nothing and is answered with ``result``."""

    key: str
    command: str
    """What the command was: ``submit``, ``steer``, ``answer``, ``decide``,
    ``resolve``, ``interrupt``, ``compact``, ``change_mode``, ``cancel_queued``."""
    digest: str
    """blake2b of the command's content, to refuse the key on other content."""
    result: str | bool | None = None
    """What the first call returned (an input id, an attempt id, a flag)."""
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


# -- turn -------------------------------------------------------------------

Outcome = Literal["completed", "interrupted", "failed", "crashed", "limit", "invalid_output"]
"""``invalid_output``: the loop wants a typed answer and the model never gave
one that validates within ``Limits.max_output_retries``."""


class TurnStarted(msgspec.Struct, tag="turn.started", **_opts):
    """A turn began, consuming the named queued inputs (and steering)."""

    turn: int
    input_ids: tuple[str, ...] = ()
    steer_ids: tuple[str, ...] = ()


class TurnEnded(msgspec.Struct, tag="turn.ended", **_opts):
    """A turn is over.  ``kind``/``code`` explain any outcome but completed."""

    turn: int
    outcome: Outcome
    kind: str | None = None
    code: str | None = None
    detail: str = ""
    output: Any = None
    """The turn's validated typed answer as plain data (JSON-like builtins),
    when the loop asks for one (``LoopDefinition.output``); decoded into the
    output type on read (``Session.result``)."""
    principal: str | None = None
    """Who interrupted the turn, when an interrupt ended it and said so."""
    direct: tuple[str, ...] = ()
    """The tool_use ids of the direct tools whose results are the turn's
    answer, in call order (``@tool(direct=True)``): no model call followed
    them.  ``output`` then holds the answer: the results' texts (a list),
    or the typed value they gave when the loop asks for one."""


# -- model ------------------------------------------------------------------


class ModelCallStarted(msgspec.Struct, tag="model.call_started", **_opts):
    """A model request is about to be sent (an effect with an id)."""

    effect_id: str
    turn: int
    step: int
    model: str
    fingerprint: str = ""
    """blake2b of the encoded request, to spot what changed between calls."""


class ModelOutput(msgspec.Struct, tag="model.output", **_opts):
    """A coalesced run of stream pieces of a model call in progress."""

    effect_id: str
    pieces: tuple[Piece, ...]


NoticeKind = Literal["truncated", "interrupted"]


class ModelMessageCommitted(msgspec.Struct, tag="model.message_committed", **_opts):
    """The assistant message of a model call, as the model will see it next.

    ``notice`` is set when the reply did not complete; the notice text is
    then the last text block of ``message``.
    """

    effect_id: str
    turn: int
    step: int
    message: Message
    stop_reason: str | None = None
    usage: Usage | None = None
    notice: NoticeKind | None = None


class ModelCallFailed(msgspec.Struct, tag="model.call_failed", **_opts):
    """A model call failed before producing any output."""

    effect_id: str
    kind: str
    code: str
    detail: str = ""
    retryable: bool = False


# -- tools ------------------------------------------------------------------


class ToolStarted(msgspec.Struct, tag="tool.started", **_opts):
    """A tool call was admitted and is about to run (an effect)."""

    execution_id: str
    tool_use_id: str
    name: str
    input: dict[str, Any]
    turn: int = 0
    step: int = 0
    attempt: int = 1
    input_digest: str = ""
    """For a tool that redacts its input (``input`` is then the redacted form):
    blake2b-256 (hex) of the real input's JSON with sorted keys, so a re-run
    after a restore can prove it runs the input the call started with."""


Disposition = Literal["succeeded", "failed", "rejected"]


class ToolCompleted(msgspec.Struct, tag="tool.completed", **_opts):
    """The result of a tool call, as the model will see it.

    ``rejected`` calls never ran (denied, unknown tool, invalid input, limit);
    they may have no ``tool.started``.
    """

    execution_id: str
    tool_use_id: str
    content: tuple[ResultBlock, ...]
    disposition: Disposition
    truncated_bytes: int = 0
    duration_ns: int = 0
    structured: Any = None
    """A structured value the tool returned beside its content (an MCP
    server's ``structuredContent``), as plain data; the model sees the
    content, where it is also written as JSON text."""


class ToolProgress(msgspec.Struct, tag="tool.progress", **_opts):
    """A running call said how far it got (``ToolContext.progress``).

    Words for people watching, never shown to the model and never read by
    the fold.  Reports a call makes faster than
    ``Limits.max_progress_per_second`` are coalesced: the newest one is
    recorded and ``coalesced`` counts the older ones it replaced."""

    execution_id: str
    tool_use_id: str
    message: str
    fraction: float | None = None
    """How much of the work is done, from 0 to 1 (None: the tool cannot say)."""
    coalesced: int = 0


class ToolAbandoned(msgspec.Struct, tag="tool.abandoned", **_opts):
    """A started call whose outcome is unknown (it may or may not have acted).

    After ``interrupted`` the model is told so at once; after ``crashed`` /
    ``restore_unavailable`` the loop waits for the host to resolve it.
    """

    execution_id: str
    tool_use_id: str
    reason: Literal["interrupted", "crashed", "restore_unavailable", "deadline"]
    """``deadline``: the call's deadline passed and it was cancelled (a
    ``deadline.passed`` record comes first)."""


class ToolResolved(msgspec.Struct, tag="tool.resolved", **_opts):
    """The host (or an automatic re-run of a replay-safe tool) settled an
    unknown outcome."""

    execution_id: str
    tool_use_id: str
    content: tuple[ResultBlock, ...]
    is_error: bool = False
    by: Literal["host", "replay"] = "host"
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


class ToolsLoaded(msgspec.Struct, tag="tools.loaded", **_opts):
    """Deferred tools the model loaded (``load_tools``): from the loop's next
    model call on, their schemas are in its requests.  Kept by restore and
    compaction; the loop's advertised tools are the union of every load."""

    tools: tuple[str, ...]


# -- deadlines ----------------------------------------------------------------

DeadlineKind = Literal["tool", "model_first_token", "model_call", "turn"]
DeadlineAction = Literal["unknown", "retried", "failed", "truncated", "interrupted"]


class DeadlinePassed(msgspec.Struct, tag="deadline.passed", **_opts):
    """A deadline passed and what it cut was cancelled.

    ``ref`` names the call: a tool call's execution id, a model call's effect
    id (empty for the turn's own deadline).  ``action`` says what followed,
    in the same commit or the next: the tool call's outcome became
    ``unknown``, the call was ``retried`` (a replay-safe tool under the same
    execution id, a model call that had output nothing), it ``failed``
    visibly to the model, the reply was kept ``truncated``, or the turn was
    ``interrupted`` (it ends with outcome ``limit``).
    """

    deadline: DeadlineKind
    seconds: float
    """The deadline that passed, in seconds."""
    turn: int
    ref: str = ""
    attempt: int = 1
    """The attempt of the call that the deadline cut (1: the first run)."""
    action: DeadlineAction = "failed"


# -- gates ------------------------------------------------------------------


class GateOpened(msgspec.Struct, tag="gate.opened", **_opts):
    """The loop waits for a person: a question, or approval of a tool call."""

    gate_id: str
    kind: Literal["user_input", "permission"]
    execution_id: str
    tool_use_id: str = ""
    tool_name: str = ""
    prompt: str = ""
    choices: tuple[str, ...] | None = None
    preview: dict[str, Any] | None = None
    form: dict[str, Any] | None = None
    """A form question (``ToolContext.ask_form``): the JSON Schema its answer
    must validate against, for a console to render; the answer is JSON."""
    url: str | None = None
    """A URL for the person to open and then confirm (``ask_open_url``); the
    runtime records it and never fetches it."""
    needs_value: bool = False
    """A URL gate whose confirmation must carry a value (a code, an id)."""


GateScope = Literal["once", "session"]
"""How long a permission decision holds: this call, or the rest of the session."""


class GateResolved(msgspec.Struct, tag="gate.resolved", **_opts):
    """A gate was answered (user input) or decided (permission)."""

    gate_id: str
    kind: Literal["user_input", "permission"]
    answer: str | None = None
    allow: bool | None = None
    scope: GateScope | None = None
    principal: str | None = None
    """Who answered the gate (as the command said; None: not said)."""


GateCancelReason = Literal["interrupted", "restore_unavailable", "shutdown"]


class GateCancelled(msgspec.Struct, tag="gate.cancelled", **_opts):
    """A gate closed without an answer."""

    gate_id: str
    reason: GateCancelReason = "interrupted"


class GateReviewed(msgspec.Struct, tag="gate.reviewed", **_opts):
    """A permission classifier reviewed a call before any person was asked.

    ``allow`` and ``deny`` decide the call (no gate opens; a ``deny`` comes
    in one commit with the call's rejection); ``ask`` leaves it to the next
    classifier, then to the permission gate, whose ``gate.opened`` comes in
    the same commit as the reviews before it."""

    tool_use_id: str
    tool_name: str
    classifier: str
    verdict: Literal["allow", "deny", "ask"]
    reason: str = ""
    failed: bool = False
    """The classifier raised, passed its deadline or answered something that
    is not a verdict: counted as ``ask``, ``reason`` says what happened."""


# -- hooks ------------------------------------------------------------------

HookPoint = Literal["before_model", "before_tool", "after_tool", "turn_end"]
HookAction = Literal["context", "stop", "deny", "rewrite", "replace", "failed"]


class HookDecided(msgspec.Struct, tag="hook.decided", **_opts):
    """A hook of the definition changed what happens, or failed and the
    runtime failed closed.  A hook that lets things go on as they were
    leaves no record.

    ``context``: ``text`` enters the model context (a user message) before
    the model call of ``step``.  ``stop``: the turn ends before that call
    (its ``turn.ended`` in the same commit).  ``deny``: the call
    ``tool_use_id`` never runs (its rejection in the same commit).
    ``rewrite``: the call runs with ``input`` instead of ``original``, and
    the model's own tool call reads ``input`` from here on (committed with
    the call's ``tool.started``).  ``replace``: the call's ``tool.completed``
    in the same commit carries the hook's result, not the tool's (which is
    not kept).  ``failed``: the hook raised, passed its deadline or returned
    what its point cannot take; ``reason`` says which, and what was refused
    follows as for ``stop``, ``deny`` or ``replace``."""

    hook: str
    point: HookPoint
    action: HookAction
    reason: str = ""
    turn: int = 0
    step: int = 0
    """For ``before_model``: the step of the model call the hook ran before."""
    tool_use_id: str = ""
    execution_id: str = ""
    text: str = ""
    input: dict[str, Any] | None = None
    original: dict[str, Any] | None = None


# -- context ----------------------------------------------------------------


class ContextMeasured(msgspec.Struct, tag="context.measured", **_opts):
    """How full the model context was at the last model call."""

    input_tokens: int
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    window: int = 0


CompactionTrigger = Literal["manual", "auto"]
"""``auto``: the context passed its threshold; ``manual``: a request."""


class CompactionStarted(msgspec.Struct, tag="compaction.started", **_opts):
    """A compaction attempt summarising history up to seq ``basis``."""

    attempt_id: str
    basis: int
    trigger: CompactionTrigger = "manual"
    principal: str | None = None
    """Who gave the command that made this record (a user id, a service
    name; None: not said).  Recorded, never checked: no authorization."""


class CompactionCommitted(msgspec.Struct, tag="compaction.committed", **_opts):
    """The model context is now ``summary`` + the last ``retained`` messages.

    ``replaced`` counts the history messages the summary stands for; the
    original records stay in the journal.
    """

    attempt_id: str
    basis: int
    summary: Message
    replaced: int
    retained: int
    obligations: tuple[str, ...] = ()


class CompactionRejected(msgspec.Struct, tag="compaction.rejected", **_opts):
    """A compaction attempt ended without changing the context."""

    attempt_id: str
    reason: Literal["stale", "invalid_summary", "failed"]
    detail: str = ""


# -- children ---------------------------------------------------------------


class ChildStarted(msgspec.Struct, tag="child.started", **_opts):
    """This loop started a child loop (delegation)."""

    child_loop: str
    definition: str
    provenance: Provenance
    background: bool = False


class ChildFinished(msgspec.Struct, tag="child.finished", **_opts):
    """A child loop finished; ``output`` went back to this loop."""

    child_loop: str
    status: Literal["completed", "failed", "interrupted", "crashed"]
    output: str = ""
    rejected: bool = False
    """The child's start was refused and it never ran (``status`` is then
    ``failed``, ``output`` says why); its parent's call completed ``rejected``."""
    tokens: int = 0
    """Tokens the child and its own children spent, as their model calls'
    usage says: the parent's fold counts them toward its own budgets."""


# -- session level ------------------------------------------------------------


class SessionLevelEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Base of the events the session records on streams of its own (its
    checkpoints, its collaborations): no loop folds them.  A class rather than
    only a union, so a loop's fold skips the whole family with one class
    pattern and still proves its ``match`` exhaustive over ``LoopEvent``."""


# -- collaboration --------------------------------------------------------------
#
# A coordinator directs workers.  Every step of the strategy is one of these
# events, recorded on the collaboration's own stream (loop id ``collab:<id>``),
# so a collaboration restores and replays like anything else.


class TaskSpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A task the coordinator asks for: run ``worker`` on ``input`` under ``key``."""

    key: str
    worker: str
    input: str


class Control(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A signal to a running task: steer it with ``text``, or cancel it."""

    key: str
    kind: Literal["steer", "cancel"]
    text: str = ""


class Decision(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What the coordinator decided on one turn."""

    mode: Literal["continue", "wait", "complete"]
    state: str = ""
    """The coordinator's own notes, handed back to it on its next turn."""
    tasks: tuple[TaskSpec, ...] = ()
    controls: tuple[Control, ...] = ()
    output: str = ""


class CollabStarted(SessionLevelEvent, tag="collab.started", frozen=True, kw_only=True):
    collab_id: str
    coordinator: str
    workers: tuple[str, ...]
    input: str
    max_turns: int
    max_tasks: int
    max_concurrent_tasks: int
    max_controls_per_turn: int
    state_schema: str = ""
    """The JSON Schema of the typed ``state`` every decision carries ("" for
    free text): a resumed collaboration must be given the same type."""
    output_schema: str = ""
    """Likewise for the ``complete`` decision's ``output``."""


class CollabTurn(SessionLevelEvent, tag="collab.turn", frozen=True, kw_only=True):
    """The coordinator's decision on turn ``number`` (already validated)."""

    collab_id: str
    number: int
    decision: Decision
    seen_finished: int = -1
    """How many tasks had finished in the view the coordinator decided on, so a
    task that finished while it was deciding still counts for ``wait`` (-1:
    written before this was recorded)."""


class CollabTaskStarted(SessionLevelEvent, tag="collab.task_started", frozen=True, kw_only=True):
    collab_id: str
    key: str
    worker: str
    child_loop: str
    input: str
    turn: int


class CollabTaskFinished(SessionLevelEvent, tag="collab.task_finished", frozen=True, kw_only=True):
    collab_id: str
    key: str
    status: Literal["completed", "failed", "interrupted", "crashed", "cancelled", "start_failed"]
    """``start_failed``: the worker never ran the task (its input was refused, or
    its loop could not start); ``output`` then says why."""
    output: str = ""
    code: str | None = None
    """Why a start failed (the refusing error's code)."""


class CollabControlled(SessionLevelEvent, tag="collab.controlled", frozen=True, kw_only=True):
    """A control was applied (``receipt`` says how it landed)."""

    collab_id: str
    key: str
    kind: Literal["steer", "cancel"]
    text: str = ""
    receipt: Literal["applied", "already_finished"] = "applied"
    turn: int = 0


class CollabEnded(SessionLevelEvent, tag="collab.ended", frozen=True, kw_only=True):
    collab_id: str
    status: Literal["completed", "failed"]
    output: str = ""
    code: str | None = None
    detail: str = ""


# -- notices ----------------------------------------------------------------


class Notice(msgspec.Struct, tag="notice", **_opts):
    """The runtime tells the reader something (restored after a crash,
    unknown effects pending, ...).  Never agent output."""

    code: str
    text: str
    refs: tuple[str, ...] = ()


# -- checkpoints ------------------------------------------------------------


class LoopImage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One loop's folded state in a ``session.checkpoint``.

    The model context is stored as a delta, so a chain of checkpoints holds
    each message about once, however long the history: the loop's messages
    are the first ``kept`` messages of its image in the session's previous
    checkpoint, followed by ``messages``.  ``state`` is everything else the
    fold knows about the loop, encoded by ``loopruntime.state`` (this layer
    keeps it opaque)."""

    loop: str
    state: bytes
    kept: int = 0
    messages: tuple[Message, ...] = ()


class SessionCheckpoint(SessionLevelEvent, tag="session.checkpoint", frozen=True, kw_only=True):
    """The fold of every record before this one, so that restore can start
    here instead of at seq 1.  Derived data: the records it summarises stay
    in the journal, and ``replay --check`` proves it equals their fold.

    ``loops`` holds the loops that changed since ``previous`` (the seq of the
    session's previous checkpoint); a loop left out is as the previous
    checkpoint has it.  ``previous=0`` starts a chain: every loop is in it,
    in full, and nothing before it counts.  Written by the session writer, under the
    reserved stream id ``CHECKPOINT_STREAM``; no loop folds it."""

    previous: int = 0
    loops: tuple[LoopImage, ...] = ()


CHECKPOINT_STREAM = "~checkpoint"
"""The ``loop`` field of every ``session.checkpoint`` (and ``session.forked``)
record: a stream id no loop or collaboration can have (their ids are minted
with letter prefixes)."""


class SessionForked(SessionLevelEvent, tag="session.forked", frozen=True, kw_only=True):
    """This session is a fork: it starts where ``source`` stood at ``seq``.

    Always seq 1 of a fork, followed at seq 2 by a ``session.checkpoint``
    with ``previous=0`` that pictures every loop of the source at ``seq``:
    that image, not an empty state, is what the fork's records fold onto.
    ``digest`` is the source's digest at ``seq``, so a reader can prove the
    source still holds the history the fork was cut from.  Written under
    ``CHECKPOINT_STREAM``; no loop folds it."""

    source: str
    seq: int
    digest: bytes
    root: str = ""
    """The first session of the chain of forks this one descends from: the
    source's own ``root`` when the source is a fork, else ``source``.  Empty
    in journals from before the field; a reader takes ``source`` then."""


LoopEvent = (
    LoopStarted
    | LoopModeChanged
    | LoopPaused
    | LoopResumed
    | LoopStopped
    | LoopConfigured
    | LoopReconfigured
    | LoopInferenceChanged
    | LoopToolsReplaced
    | InputQueued
    | InputCancelled
    | SteerQueued
    | SteerApplied
    | TurnRejected
    | CommandKeyed
    | TurnStarted
    | TurnEnded
    | ModelCallStarted
    | ModelOutput
    | ModelMessageCommitted
    | ModelCallFailed
    | ToolStarted
    | ToolCompleted
    | ToolProgress
    | ToolAbandoned
    | ToolResolved
    | ToolsLoaded
    | DeadlinePassed
    | GateOpened
    | GateResolved
    | GateCancelled
    | GateReviewed
    | HookDecided
    | ContextMeasured
    | CompactionStarted
    | CompactionCommitted
    | CompactionRejected
    | ChildStarted
    | ChildFinished
    | Notice
)
"""What a loop's fold reads: the events of a loop's own stream."""

SessionEvent = (
    CollabStarted
    | CollabTurn
    | CollabTaskStarted
    | CollabTaskFinished
    | CollabControlled
    | CollabEnded
    | SessionCheckpoint
    | SessionForked
)
"""What the session records itself (every one a ``SessionLevelEvent``)."""

Event = LoopEvent | SessionEvent
"""Every event; the one union the codec encodes and decodes."""

EVENT_TYPES: tuple[type[Event], ...] = Event.__args__
