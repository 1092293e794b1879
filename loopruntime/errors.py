"""Loop errors: one base, named by cause, each with a ``kind`` and ``code``."""

from __future__ import annotations

from typing import Literal

__all__ = [
    "BudgetExhaustedError",
    "ChildRejectedError",
    "CommandError",
    "DefinitionError",
    "GateMismatchError",
    "GuardFailedError",
    "IdempotencyKeyError",
    "InvalidAnswerError",
    "LeaseLostError",
    "LifecycleError",
    "LoopClosedError",
    "LoopError",
    "LoopStoppedError",
    "ModeNotFoundError",
    "ModelError",
    "NameClashError",
    "NotQueuedError",
    "NotRegisteredError",
    "NotUnknownEffectError",
    "OutsideToolCallError",
    "PayloadTooLargeError",
    "ProgressTooLargeError",
    "QueueFullError",
    "RedactedInputError",
    "ScriptExhaustedError",
    "UnknownCommandError",
    "UnknownLoopError",
]


class LoopError(Exception):
    """Base of every error a loop raises to its caller."""

    kind: str = "loop"
    code: str = "loop.error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class CommandError(LoopError):
    """A command was refused; nothing was committed."""

    kind = "command"
    code = "command.refused"


class UnknownCommandError(CommandError):
    code = "command.unknown"


class NotQueuedError(CommandError):
    """``CancelQueuedInput`` named input that is not (or no longer) queued."""

    code = "input.not_queued"


class LoopClosedError(CommandError):
    """The loop (or its session) was shut down; it takes no more commands."""

    code = "loop.closed"


class LoopStoppedError(CommandError):
    """The loop stopped for good (``loop.stopped``): a command that would
    change how it runs (a pause, a resume) cannot apply, now or ever; nothing
    was committed.  ``loop`` names it."""

    code = "loop.stopped"

    def __init__(self, message: str, *, loop: str) -> None:
        super().__init__(message)
        self.loop = loop


class UnknownLoopError(CommandError):
    """A command named a loop its session does not have; nothing was
    committed.  ``session`` and ``loop`` name them."""

    code = "loop.unknown"

    def __init__(self, message: str, *, session: str, loop: str) -> None:
        super().__init__(message)
        self.session = session
        self.loop = loop


class GateMismatchError(CommandError):
    """An answer named a gate that is not open, or is open with another kind."""

    code = "gate.mismatch"


class InvalidAnswerError(CommandError):
    """An answer is not acceptable for its gate; the gate stays open."""

    code = "gate.invalid_answer"


class NotUnknownEffectError(CommandError):
    """``ResolveToolCall`` named an execution whose outcome is not unknown."""

    code = "tool.not_unknown"


class IdempotencyKeyError(CommandError):
    """A key already used for another command, or for other content; nothing
    was committed.  ``seq`` is the record of the key's first use."""

    code = "command.key_reused"

    def __init__(self, message: str, *, key: str, seq: int) -> None:
        super().__init__(message)
        self.key = key
        self.seq = seq


class QueueFullError(CommandError):
    """Input refused: the loop already holds ``Limits.max_queued_inputs``
    queued inputs.  A ``turn.rejected`` record says so in the journal."""

    code = "input.queue_full"


class BudgetExhaustedError(CommandError):
    """Input refused: the session already spent its token budget
    (``Limits.max_session_tokens``).  A ``turn.rejected`` record says so in
    the journal.  ``spent`` and ``budget`` are in tokens."""

    code = "input.budget_exhausted"

    def __init__(self, message: str, *, spent: int, budget: int) -> None:
        super().__init__(message)
        self.spent = spent
        self.budget = budget


class PayloadTooLargeError(CommandError):
    """A command's content is larger than its limit allows (``Limits.max_input_bytes``,
    ``max_input_blocks``, ``max_answer_bytes``); nothing was committed.
    ``what`` names the payload, ``size`` and ``limit`` are in the limit's unit
    (bytes, or blocks for ``max_input_blocks``), ``field`` names the limit
    (``Limits.max_input_bytes``; a journal's ``max_entry_bytes`` for an inbox
    entry a client was refused)."""

    code = "command.payload_too_large"

    def __init__(
        self, what: str, *, size: int, limit: int, field: str, unit: str = "bytes"
    ) -> None:
        self.what, self.size, self.limit, self.field = what, size, limit, field
        super().__init__(
            f"{what} is {size:,} {unit}, over the limit of {limit:,} {unit} "
            f"({field}); nothing was committed: send less, or raise the limit"
        )


class ModeNotFoundError(CommandError):
    code = "mode.unknown"


class NotRegisteredError(CommandError):
    """A model or tool was named that the loop's definition does not register
    (``LoopDefinition.models`` / ``tool_registry``); nothing was committed."""

    code = "definition.not_registered"


class DefinitionError(LoopError, ValueError):
    """A definition, or a delegate, breaks a rule when it is made (or when its
    MCP servers list their tools): nothing ran and nothing was committed.
    ``definition`` names the definition, ``name`` what broke the rule and
    ``rule`` the rule (also the end of ``code``: ``definition.<rule>``).  A
    ``ValueError`` too, as the other checks of a definition's values are."""

    kind = "definition"
    code = "definition.invalid"

    def __init__(self, message: str, *, definition: str, name: str, rule: str) -> None:
        super().__init__(message, code=f"definition.{rule}")
        self.definition = definition
        self.name = name
        self.rule = rule


class NameClashError(DefinitionError):
    """Two things the model would see under one name (tools, delegates, an MCP
    server's listed tools).  ``server`` names the MCP server whose tool names
    clash, when it is made or when it lists them (None: no server is part of
    the clash)."""

    def __init__(
        self, message: str, *, definition: str, name: str, server: str | None = None
    ) -> None:
        super().__init__(message, definition=definition, name=name, rule="name_clash")
        self.server = server


class ChildRejectedError(LoopError):
    """A delegate's child was refused at its start and never ran (its
    definition broke a rule only the start can check).  The parent's tool
    call completes ``rejected``, not ``failed``: the model may choose another
    worker."""

    kind = "delegate"
    code = "delegate.rejected"


class GuardFailedError(LoopError):
    """A guarded commit was not appended: its precondition no longer held."""

    code = "commit.guard_failed"


class LeaseLostError(LoopError):
    """The process running a tool no longer owns its session: its host's lease
    ran out before a renewal, or another host took the session.  The tool must
    stop before its effect; the call's outcome is settled by the next owner."""

    kind = "lease"
    code = "lease.lost"

    def __init__(self, session: str, host: str, reason: str) -> None:
        self.session, self.host, self.reason = session, host, reason
        super().__init__(
            f"session {session} is no longer owned by host {host!r} ({reason}); stop before "
            "the effect: the next owner settles this call (run again if replay-safe, "
            "otherwise an unknown effect for a person to resolve)"
        )


class LifecycleError(LoopError):
    """A loop was asked to take a step its phase does not allow (a bug in the
    actor, never a caller's mistake): ``phase`` and ``step`` name both."""

    code = "loop.illegal_transition"

    def __init__(self, phase: str, step: str, loop_id: str = "") -> None:
        where = f"loop {loop_id}" if loop_id else "a loop"
        super().__init__(
            f"{where} in phase {phase!r} cannot take step {step!r} "
            "(loopruntime.lifecycle.TRANSITIONS lists what each phase allows); "
            "this is a bug in loopruntime: please report it with the log"
        )
        self.phase = phase
        self.step = step
        self.loop_id = loop_id


class OutsideToolCallError(LoopError):
    """A gate was asked for, or progress reported, outside a running tool
    call (fails secure)."""

    kind = "gate"
    code = "gate.outside_tool_call"


class ProgressTooLargeError(LoopError, ValueError):
    """A tool's progress message (``ToolContext.progress``) is longer than
    ``Limits.max_progress_bytes`` (UTF-8); nothing was recorded and the call
    runs on.  ``execution_id`` names the call, ``size`` and ``limit`` are in
    bytes."""

    kind = "tool"
    code = "tool.progress_too_large"

    def __init__(self, *, execution_id: str, tool: str, size: int, limit: int) -> None:
        self.execution_id, self.tool, self.size, self.limit = execution_id, tool, size, limit
        super().__init__(
            f"progress message of tool call {execution_id} ({tool}) is {size:,} bytes, over "
            f"the limit of {limit:,} bytes (Limits.max_progress_bytes); nothing was recorded: "
            "report a shorter message (the details belong in the result)"
        )


ModelErrorKind = Literal[
    "overloaded",
    "rate_limited",
    "authentication",
    "permission",
    "invalid_request",
    "not_found",
    "connection",
    "server",
    "protocol",
    "script",
    "timeout",
    "too_large",
]


class ModelError(LoopError):
    """A model call failed.  ``retryable`` only ever applies before any output."""

    kind = "model"

    def __init__(
        self,
        message: str,
        *,
        kind: ModelErrorKind,
        code: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, code=code or f"model.{kind}")
        self.error_kind: ModelErrorKind = kind
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status


class ScriptExhaustedError(ModelError):
    """A ``ScriptedModel`` was asked for more replies than it holds."""

    def __init__(self, asked: int, held: int) -> None:
        super().__init__(
            f"scripted model was asked for reply {asked} but holds only {held}; "
            "add more Reply entries to the script",
            kind="script",
            code="model.script_exhausted",
        )


class RedactedInputError(LoopError):
    """A redacted tool call cannot run again after a restore: its real input is
    not available (the tool has no ``recover_input``, or it gave none), or the
    host gave one whose digest is not the one the call started with."""

    kind = "tool"
    code = "tool.redacted_input_unavailable"
