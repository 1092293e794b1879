"""Loop state and the fold: the only way a loop's state ever changes.

``fold(state, record)`` is deterministic and does no I/O: no clock, no
randomness.  The live actor folds every record it commits, and restore folds
the records it reads back, with this same function, so the two cannot drift.

For speed the fold updates ``state`` in place and returns it: a step costs
O(1) however long the history is.  Whoever needs an unchanging copy takes one
(``copy_state``); ``Snapshot`` replies with such a copy.

The module is one piece: ``LoopState`` and ``fold``, the only code that
ever writes it, change together (a new event is a new field and its
handler), and the handlers share the fold's private helpers.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, assert_never

import msgspec

from journal import events as ev
from journal.content import Message, Piece, ResultBlock, Text, ToolResult, ToolUse, Usage
from journal.events import (
    CommandKeyed,
    ContextMeasured,
    GateOpened,
    LoopConfig,
    ModelCallStarted,
    ModelMessageCommitted,
    ModelOutput,
    Outcome,
    Provenance,
    ToolCompleted,
    ToolStarted,
)
from journal.record import Record

from .empties import NO_DICT, NO_LIST, own_dict, own_list
from .notices import FINAL_ANSWER, INTERRUPTED_TOOL_RESULT, OUTPUT_REQUIRED

__all__ = [
    "ChildState",
    "KEYS_KEPT",
    "FoldError",
    "KeyUse",
    "LoopState",
    "LoopStatus",
    "QueuedInput",
    "QueuedSteer",
    "copy_state",
    "fold",
    "fold_all",
    "image_bytes",
    "image_state",
    "tokens_of",
]


class LoopStatus(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    AWAITING_GATE = "awaiting_gate"
    AWAITING_RESOLUTION = "awaiting_resolution"
    PAUSED = "paused"
    STOPPED = "stopped"


class FoldError(Exception):
    """A record cannot follow the state it is folded into (journal out of order)."""

    def __init__(self, seq: int, reason: str) -> None:
        self.seq = seq
        super().__init__(f"record seq {seq} does not fit the loop state: {reason}")


class QueuedInput(msgspec.Struct, kw_only=True):
    input_id: str
    messages: tuple[Message, ...]
    trigger: str = "external"
    record: str | None = None
    """Id of its ``input.queued`` record: the cause of the turn it starts."""


class QueuedSteer(msgspec.Struct, kw_only=True):
    steer_id: str
    text: str
    record: str | None = None
    """Id of its ``steer.queued`` record."""


KEYS_KEPT = 1_000
"""Idempotency keys a loop remembers: the newest this many.  A repeat of an
older key is a new command (see docs/boundaries.md)."""


class KeyUse(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """The first use of an idempotency key, as its ``command.keyed`` record says."""

    command: str
    digest: str
    seq: int
    result: str | bool | None = None


class ChildState(msgspec.Struct, kw_only=True):
    child_loop: str
    definition: str
    provenance: Provenance
    background: bool
    status: str = "running"
    """``running``, a ``child.finished`` status, or ``rejected`` (never ran)."""
    output: str = ""


class LoopState(msgspec.Struct, kw_only=True):
    """Everything a loop knows, derived from its records alone."""

    loop: str = ""
    definition: str = ""
    model: str = ""
    """Name of the model the loop's model calls use: the chosen one
    (``chosen_model``), else its mode's, else its definition's.  A choice or
    mode change made during a turn counts once the turn ended; a
    reconfiguration at restore at once."""
    mode: str | None = None
    parent: Provenance | None = None
    stopped: bool = False
    paused: bool = False
    """``loop.paused`` was recorded and no ``loop.resumed`` since: the loop
    starts no model call, tool, child, turn or compaction (nor do its
    children) until it is resumed."""
    last_seq: int = 0
    """seq of the last record folded (of this loop)."""
    history_seq: int = 0
    """seq of the last record that changed the model context (compaction basis)."""

    messages: list[Message] = []
    """The model context: what the next model call is built from."""
    queued: list[QueuedInput] = []
    steering: list[QueuedSteer] = []

    turn_index: int = 0
    """Number of turns started so far."""
    turn_open: bool = False
    step: int = -1
    """Step of the last model call in the open turn (-1 before the first)."""
    turn_model_calls: int = 0
    turn_tool_batches: int = 0
    turn_tool_calls: int = 0
    turn_output_failures: int = 0
    """Attempts at a typed answer the open turn refused: final-answer calls
    that did not validate, and replies that ended without one."""
    last_output: Any = None
    """The typed answer of the last turn, as plain data (``turn.ended``
    ``output``); None when it gave none."""
    last_direct: bool = False
    """The last turn was answered by direct tools (``turn.ended`` ``direct``):
    ``last_output`` holds their answer."""
    last_outcome: Outcome | None = None
    last_failure: str = ""
    """Why the last turn did not complete (its ``turn.ended`` detail, e.g. the
    provider's error); empty after a completed turn."""
    last_failure_code: str = ""
    """The code of that failure (e.g. ``model.overloaded``)."""
    last_stop_reason: str | None = None
    """Stop reason of the last committed model message."""

    open_call: str | None = None
    """effect id of a model call started and not yet committed."""
    open_output: list[Piece] = []
    """Journaled stream pieces of ``open_call``."""

    awaiting: list[str] = []
    """tool_use ids of the last assistant message still without a result, in order."""
    tool_uses: dict[str, ToolUse] = {}
    results: dict[str, ToolResult] = {}
    """Results gathered for ``awaiting`` (keyed by tool_use id)."""
    running: dict[str, ToolStarted] = {}
    """Started calls without an outcome yet, by execution id."""
    unknown: dict[str, ToolStarted] = {}
    """Started calls whose outcome is unknown until the host resolves them."""
    executions: dict[str, str] = {}
    """tool_use id -> execution id of calls started in the open batch."""
    gates: dict[str, GateOpened] = {}
    decided: dict[str, bool] = {}
    """tool_use id -> the person's permission decision, for the open batch."""
    grants: list[str] = []
    """Tool names the user allowed for the rest of the session."""

    configured: LoopConfig | None = None
    """What the loop runs under, as last recorded (None: a journal from
    before ``loop.configured``, until its next restore)."""
    prompts: list[str] = []
    """Digests of the system prompts this loop recorded the text of."""
    chosen_model: str | None = None
    """The model chosen by ``loop.inference_changed`` (None: the definition's)."""
    chosen_max_tokens: int | None = None
    chosen_tools: list[str] | None = None
    """The tools chosen by ``loop.tools_replaced``, by name (None: the definition's)."""
    loaded: list[str] = []
    """Deferred tools the model loaded (``tools.loaded``), in load order:
    advertised in its requests from then on."""

    context: ContextMeasured | None = None
    compacting: str | None = None
    compactions: int = 0
    children: dict[str, ChildState] = {}

    tokens_used: int = 0
    """Tokens this loop's own model calls spent (``tokens_of`` each call's
    usage), in every turn."""
    children_tokens: int = 0
    """Tokens its finished children spent (``child.finished`` ``tokens``)."""
    turn_tokens: int = 0
    """Tokens counted toward the open (or last) turn's budget: its own model
    calls, and the children it started that finished within it."""

    keys: dict[str, KeyUse] | None = None
    """Idempotency keys used on this loop (None until the first): the newest
    ``KEYS_KEPT``, oldest first."""
    requested_compactions: tuple[tuple[str, str], ...] = ()
    """(attempt id, command record id) of keyed compaction requests not yet
    started: a restored loop runs them."""
    turn_record: str | None = None
    """Id of the open (or last) turn's ``turn.started`` record."""
    message_record: str | None = None
    """Id of the last ``model.message_committed`` record (its tool calls' cause)."""
    hooks_step: int = -1
    """The step of the open turn whose model call the ``before_model`` hooks
    already added context for (-1: none), so a restore does not add it twice."""

    @property
    def status(self) -> LoopStatus:
        if self.stopped:
            return LoopStatus.STOPPED
        if self.paused:
            return LoopStatus.PAUSED
        if self.gates:
            return LoopStatus.AWAITING_GATE
        if self.unknown:
            return LoopStatus.AWAITING_RESOLUTION
        if self.turn_open:
            return LoopStatus.RUNNING
        return LoopStatus.IDLE

    @property
    def open_gates(self) -> list[GateOpened]:
        return list(self.gates.values())

    @property
    def unknown_effects(self) -> list[ToolStarted]:
        return list(self.unknown.values())


_SHED_LISTS = ("queued", "steering", "open_output", "awaiting", "grants", "prompts", "loaded")
_SHED_DICTS = (
    "tool_uses",
    "results",
    "running",
    "unknown",
    "executions",
    "gates",
    "decided",
    "children",
)


def shed_empty(state: LoopState) -> None:
    """Let ``state``'s empty containers go for the shared ones (a loop that
    parks calls this; the next write makes a container of its own again)."""
    for name in _SHED_LISTS:
        if not getattr(state, name):
            setattr(state, name, NO_LIST)
    for name in _SHED_DICTS:
        if not getattr(state, name):
            setattr(state, name, NO_DICT)


_state_encoder = msgspec.msgpack.Encoder()
_state_decoder = msgspec.msgpack.Decoder(LoopState)


def copy_state(state: LoopState) -> LoopState:
    """A deep copy that shares nothing mutable with ``state``."""
    return _state_decoder.decode(_state_encoder.encode(state))


def image_bytes(state: LoopState) -> bytes:
    """Everything in ``state`` but its messages, encoded: a checkpoint's loop
    image (which stores the messages as a delta beside it)."""
    return _state_encoder.encode(msgspec.structs.replace(state, messages=[]))


def image_missing(data: bytes) -> list[str]:
    """The fields of ``LoopState`` an image does not hold: it was written before
    they existed, so it cannot stand for the fold of today's code."""
    held = msgspec.msgpack.decode(data)
    if not isinstance(held, dict):
        return list(LoopState.__struct_fields__)
    return [f for f in LoopState.__struct_fields__ if f not in held]


def image_state(data: bytes) -> LoopState:
    """The state ``image_bytes`` encoded (with no messages); ``msgspec.DecodeError``
    when ``data`` is not one."""
    return _state_decoder.decode(data)


def fold_all(records: Any, state: LoopState | None = None) -> LoopState:
    state = state if state is not None else LoopState()
    for record in records:
        fold(state, record)
    return state


def _answer(
    state: LoopState, tool_use_id: str, content: tuple[ResultBlock, ...], is_error: bool
) -> None:
    """Record one tool result; once every awaited call has one, the results
    enter the context as one user message, in the order of the calls."""
    if tool_use_id not in state.tool_uses:
        return
    state.results = results = own_dict(state.results)
    results[tool_use_id] = ToolResult(tool_use_id=tool_use_id, content=content, is_error=is_error)
    # map over the dict's own methods runs in C: no generator frame per result
    # (this runs for every tool result a restore folds).
    if all(map(results.__contains__, state.awaiting)):
        state.messages.append(
            Message(role="user", blocks=tuple(map(results.__getitem__, state.awaiting)))
        )
        state.awaiting = NO_LIST
        state.results = state.tool_uses = state.executions = state.decided = NO_DICT


def _model_output(state: LoopState, record: Record, event: ModelOutput) -> None:
    if event.effect_id == state.open_call:
        state.open_output = own_list(state.open_output)
        state.open_output.extend(event.pieces)


def _model_call_started(state: LoopState, record: Record, event: ModelCallStarted) -> None:
    state.open_call = event.effect_id
    state.open_output = NO_LIST
    state.step = event.step
    state.turn_model_calls += 1


def tokens_of(usage: Usage | None) -> int:
    """The tokens of one model call that count toward budgets: every token
    the provider reports, once (input, output, cache writes, cache reads), so
    the same conversation costs the same on every provider, cached or not."""
    if usage is None:
        return 0
    return (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_creation_tokens
    )


def _model_message(state: LoopState, record: Record, event: ModelMessageCommitted) -> None:
    if event.usage is not None:
        spent = tokens_of(event.usage)
        state.tokens_used += spent
        state.turn_tokens += spent
    if event.effect_id == state.open_call:
        state.open_call = None
        state.open_output = NO_LIST
    state.messages.append(event.message)
    state.last_stop_reason = event.stop_reason
    state.history_seq = record.seq
    state.message_record = record.id
    # One plain loop: each comprehension would be a call of its own.
    awaiting: list[str] = []
    tool_uses: dict[str, ToolUse] = {}
    for block in event.message.blocks:
        if isinstance(block, ToolUse):
            awaiting.append(block.id)
            tool_uses[block.id] = block
    if awaiting:
        state.awaiting = awaiting
        state.tool_uses = tool_uses
        state.results = state.executions = state.decided = NO_DICT
        state.turn_tool_batches += 1


def _context_measured(state: LoopState, record: Record, event: ContextMeasured) -> None:
    state.context = event


def _tool_started(state: LoopState, record: Record, event: ToolStarted) -> None:
    state.running = own_dict(state.running)
    state.running[event.execution_id] = event
    state.executions = own_dict(state.executions)
    state.executions[event.tool_use_id] = event.execution_id
    state.turn_tool_calls += 1


def _tool_completed(state: LoopState, record: Record, event: ToolCompleted) -> None:
    use = state.tool_uses.get(event.tool_use_id)
    if use is not None and use.name == FINAL_ANSWER and event.disposition != "succeeded":
        state.turn_output_failures += 1
    state.running.pop(event.execution_id, None)
    state.unknown.pop(event.execution_id, None)
    _answer(state, event.tool_use_id, event.content, event.disposition != "succeeded")
    state.history_seq = record.seq


_STEP_KINDS: dict[type, Callable[[LoopState, Record, Any], None]] = {
    ModelOutput: _model_output,
    ModelCallStarted: _model_call_started,
    ModelMessageCommitted: _model_message,
    ContextMeasured: _context_measured,
    ToolStarted: _tool_started,
    ToolCompleted: _tool_completed,
}
"""The kinds every step of a loop records, found by their exact type: the
one departure from dispatching events by ``match`` alone, for speed (see
docs/architecture.md, "Found by exact type"): ``match`` tries its cases in
order, so a kind in a late case pays for every failed pattern before it.
``fold``'s ``match`` still has a case for each of these kinds, calling the
same handler, so the checker still proves the dispatch exhaustive."""


# One ``match`` over the whole event union, longer than a reader's ~80 lines on
# purpose: each case is a few lines (the long ones call a ``_handler``), and one
# match is what lets the type checker prove that every event kind is folded.
def fold(state: LoopState, record: Record) -> LoopState:
    """Apply one record to ``state`` (in place) and return it."""
    event = record.event
    state.last_seq = record.seq
    step = _STEP_KINDS.get(type(event))
    if step is not None:
        step(state, record, event)
        return state
    match event:
        # The most frequent of the other kinds first.
        case ev.InputQueued():
            state.queued = own_list(state.queued)
            state.queued.append(
                QueuedInput(
                    input_id=event.input_id,
                    messages=event.messages,
                    trigger=event.trigger,
                    record=record.id,
                )
            )
        case ev.TurnStarted():
            if state.turn_open:
                raise FoldError(record.seq, "a turn started while another was open")
            taken = set(event.input_ids)
            for q in state.queued:
                if q.input_id in taken:
                    state.messages.extend(q.messages)
            state.queued = [q for q in state.queued if q.input_id not in taken] or NO_LIST
            _apply_steering(state, event.steer_ids)
            state.turn_index = event.turn
            state.turn_open = True
            state.turn_record = record.id
            state.step = -1
            state.turn_model_calls = state.turn_tool_batches = state.turn_tool_calls = 0
            state.turn_output_failures = 0
            state.turn_tokens = 0
            state.hooks_step = -1
            state.history_seq = record.seq
        case ev.TurnEnded():
            state.turn_open = False
            if state.configured is not None:
                # A choice or mode change made during the turn holds from now.
                state.model = _model_in_use(state, state.configured)
            state.last_outcome = event.outcome
            state.last_output = event.output
            state.last_direct = bool(event.direct)
            failed = event.outcome != "completed"
            state.last_failure = event.detail if failed else ""
            state.last_failure_code = (event.code or "") if failed else ""
        case ev.LoopStarted():
            state.loop = record.loop
            state.definition = event.definition
            state.model = event.model
            state.mode = event.mode
            state.parent = event.parent
        case ev.LoopModeChanged():
            state.mode = event.mode
            if state.configured is not None and not state.turn_open:
                state.model = _model_in_use(state, state.configured)
        case ev.LoopConfigured() | ev.LoopReconfigured():
            state.configured = event.config
            state.prompts = prompts = own_list(state.prompts)
            prompts.extend(d for d in event.prompts if d not in prompts)
            state.model = _model_in_use(state, event.config)
        case ev.LoopInferenceChanged():
            state.chosen_model = event.model
            state.chosen_max_tokens = event.max_tokens
            if state.configured is not None and not state.turn_open:
                state.model = _model_in_use(state, state.configured)
        case ev.LoopToolsReplaced():
            state.chosen_tools = list(event.tools) if event.tools is not None else None
        case ev.ToolsLoaded():
            state.loaded = loaded = own_list(state.loaded)
            loaded.extend(t for t in event.tools if t not in loaded)
        case ev.LoopStopped():
            state.stopped = True
        case ev.LoopPaused():
            state.paused = True
        case ev.LoopResumed():
            state.paused = False
        case ev.InputCancelled():
            state.queued = [q for q in state.queued if q.input_id != event.input_id] or NO_LIST
        case ev.SteerQueued():
            state.steering = own_list(state.steering)
            state.steering.append(
                QueuedSteer(steer_id=event.steer_id, text=event.text, record=record.id)
            )
        case ev.SteerApplied():
            _apply_steering(state, event.steer_ids)
            state.history_seq = record.seq
        case ev.ModelCallFailed():
            pass
        case ev.ToolAbandoned():
            started = state.running.pop(event.execution_id, None)
            if event.reason == "interrupted":
                _answer(state, event.tool_use_id, (Text(text=INTERRUPTED_TOOL_RESULT),), True)
                state.history_seq = record.seq
            elif started is not None:
                state.unknown = own_dict(state.unknown)
                state.unknown[event.execution_id] = started
        case ev.ToolResolved():
            state.unknown.pop(event.execution_id, None)
            state.running.pop(event.execution_id, None)
            _answer(state, event.tool_use_id, event.content, event.is_error)
            state.history_seq = record.seq
        case ev.DeadlinePassed():
            # A replay-safe call runs again under the same execution id: its
            # next attempt is counted, so a restore keeps the retry budget.
            if event.action == "retried" and event.ref in state.running:
                started = state.running[event.ref]
                state.running[event.ref] = msgspec.structs.replace(
                    started, attempt=event.attempt + 1
                )
        case ev.GateOpened():
            state.gates = own_dict(state.gates)
            state.gates[event.gate_id] = event
        case ev.GateResolved():
            gate = state.gates.pop(event.gate_id, None)
            if gate is not None and event.kind == "permission" and gate.tool_use_id:
                state.decided = own_dict(state.decided)
                state.decided[gate.tool_use_id] = bool(event.allow)
            if (
                gate is not None
                and event.kind == "permission"
                and event.allow
                and event.scope == "session"
                and gate.tool_name not in state.grants
            ):
                state.grants = own_list(state.grants)
                state.grants.append(gate.tool_name)
        case ev.GateCancelled():
            state.gates.pop(event.gate_id, None)
        case ev.GateReviewed():
            if event.verdict != "ask" and event.tool_use_id in state.tool_uses:
                state.decided = own_dict(state.decided)
                state.decided[event.tool_use_id] = event.verdict == "allow"
        case ev.HookDecided():
            if event.action == "context":
                state.messages.append(
                    Message(role="user", blocks=(Text(text=event.text),), synthetic=True)
                )
                state.hooks_step = event.step
                state.history_seq = record.seq
            elif event.action == "rewrite" and event.input is not None:
                _rewrite(state, event.tool_use_id, event.input)
                state.history_seq = record.seq
        case ev.CompactionStarted():
            state.compacting = event.attempt_id
            if state.requested_compactions:
                state.requested_compactions = tuple(
                    r for r in state.requested_compactions if r[0] != event.attempt_id
                )
        case ev.CompactionCommitted():
            retained = (
                state.messages[len(state.messages) - event.retained :] if event.retained else []
            )
            state.messages = [event.summary, *retained]
            state.compacting = None
            state.compactions += 1
            state.history_seq = record.seq
        case ev.CompactionRejected():
            state.compacting = None
        case ev.ChildStarted():
            state.children = own_dict(state.children)
            state.children[event.child_loop] = ChildState(
                child_loop=event.child_loop,
                definition=event.definition,
                provenance=event.provenance,
                background=event.background,
            )
        case ev.ChildFinished():
            child = state.children.get(event.child_loop)
            if child is not None:
                child.status = "rejected" if event.rejected else event.status
                child.output = event.output
            state.children_tokens += event.tokens
            if child is not None and state.turn_open and child.provenance.turn == state.turn_index:
                # A child draws from the turn that started it (a background
                # child finishing after that turn counts toward the session only).
                state.turn_tokens += event.tokens
        case ev.Notice():
            if event.code == OUTPUT_REQUIRED:
                state.turn_output_failures += 1
            # Words for the reader.  One that names the open model call closes
            # it: the reply stopped before anything usable arrived, so no
            # message enters the context.
            if state.open_call is not None and state.open_call in event.refs:
                state.open_call = None
                state.open_output = NO_LIST
        case ev.CommandKeyed():
            _remember_key(state, record, event)
        case ev.TurnRejected():
            pass  # a refusal: nothing was queued
        case ev.ToolProgress():
            pass  # words for people watching; the loop reads nothing in them
        # Found in _STEP_KINDS above; matched here for the exhaustiveness check.
        case ev.ModelOutput():
            _model_output(state, record, event)
        case ev.ModelCallStarted():
            _model_call_started(state, record, event)
        case ev.ModelMessageCommitted():
            _model_message(state, record, event)
        case ev.ContextMeasured():
            _context_measured(state, record, event)
        case ev.ToolStarted():
            _tool_started(state, record, event)
        case ev.ToolCompleted():
            _tool_completed(state, record, event)
        case ev.SessionLevelEvent():
            pass  # the session's own streams (checkpoints, collaborations)
        case _:
            assert_never(event)
    return state


def _rewrite(state: LoopState, tool_use_id: str, raw: dict[str, Any]) -> None:
    """A hook rewrote the input of call ``tool_use_id``: the call and the
    assistant message that made it read the new input from here on."""
    use = state.tool_uses.get(tool_use_id)
    if use is None:
        return
    new = msgspec.structs.replace(use, input=raw)
    state.tool_uses = own_dict(state.tool_uses)
    state.tool_uses[tool_use_id] = new
    for i in range(len(state.messages) - 1, -1, -1):
        message = state.messages[i]
        if message.role == "assistant":
            blocks = tuple(
                new if isinstance(b, ToolUse) and b.id == tool_use_id else b for b in message.blocks
            )
            state.messages[i] = msgspec.structs.replace(message, blocks=blocks)
            return


def _remember_key(state: LoopState, record: Record, event: CommandKeyed) -> None:
    keys = state.keys
    if keys is None:
        keys = state.keys = {}
    keys[event.key] = KeyUse(event.command, event.digest, record.seq, event.result)
    if len(keys) > KEYS_KEPT:
        del keys[next(iter(keys))]
    if event.command == "compact" and isinstance(event.result, str):
        state.requested_compactions = (*state.requested_compactions, (event.result, record.id))


def _model_in_use(state: LoopState, config: LoopConfig) -> str:
    """The model a turn starting now would call: the chosen, the mode's, or
    the definition's."""
    if state.chosen_model is not None:
        return state.chosen_model
    if state.mode is not None:
        for mode in config.modes:
            if mode.name == state.mode and mode.model is not None:
                return mode.model
    return config.model


def _apply_steering(state: LoopState, steer_ids: tuple[str, ...]) -> None:
    if not steer_ids:
        return
    wanted = set(steer_ids)
    texts = [s.text for s in state.steering if s.steer_id in wanted]
    state.steering = [s for s in state.steering if s.steer_id not in wanted] or NO_LIST
    if texts:
        state.messages.append(Message(role="user", blocks=tuple(Text(text=t) for t in texts)))
