"""Redacted calls: secrets a tool needs kept out of everything but the tool.

Rules (the story is in ``docs/tools.md``, "Redaction"):

* ``@tool(redact=...)`` names input fields (or gives a function of the input
  returning the input to record); ``@tool(redact_result=...)`` names fields of
  the returned value (or gives a function of the value returning the value to
  record).  A named field is replaced by ``REDACTED``.
* The journal holds only the redacted forms: the assistant message's
  ``tool_use`` block, ``tool.started`` (with ``input_digest``, the digest of
  the real input), ``tool.completed``; the streamed JSON of a redacted call's
  input is neither journaled nor shown to subscribers.  Logs and traces are
  made from records, so they see what the journal holds.
* The live loop keeps the originals in memory (``Originals``): the tool runs
  with the real input, and the model is shown its own real call and the real
  result while the process lives.  After a restore only the journal is left:
  the model sees the redacted forms.
* A replay-safe (or resumable) call re-entered after a restore needs its real
  input: the tool's ``recover_input(execution_id, redacted)`` asks the host for
  it, and it must match ``input_digest``; otherwise the call is not run and
  its outcome is left for the host to resolve (``RedactedInputError``'s text,
  in a notice).  A redacted call that had not started before the restart is
  answered with an error the model reads, asking it to call again.

Pure, but for ``Originals``, the live loop's memory of real inputs and results.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from journal.content import (
    Block,
    BlockStarted,
    InputJsonDelta,
    Message,
    ResultBlock,
    ToolResult,
    ToolUse,
)
from journal.events import Event, HookDecided

from .errors import RedactedInputError

__all__ = [
    "REDACTED",
    "InputRedaction",
    "Originals",
    "ResultRedaction",
    "compile_input_redaction",
    "compile_result_redaction",
    "input_digest",
    "journaled_message",
    "recovered_input",
    "redacted_rewrite",
    "qualified_name",
    "redaction_text",
    "scrub",
    "secret_piece",
]

REDACTED = "[redacted]"
"""What a redacted field holds in the journal."""

InputRedaction = Sequence[str] | Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""Input field names, or a function of the real input giving the input to record."""

ResultRedaction = Sequence[str] | Callable[[Any], Any]
"""Field names of the returned value, or a function of the value giving the one to record."""


def input_digest(value: Mapping[str, Any]) -> str:
    """blake2b-256 (hex) of the input's JSON with sorted keys: what
    ``tool.started.input_digest`` holds, so a re-run can prove its input."""
    data = msgspec.json.encode(value, order="sorted")
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def _names(tool: str, what: str, given: object) -> tuple[str, ...]:
    if isinstance(given, str) or not isinstance(given, Sequence):
        raise TypeError(
            f"tool {tool}: {what} must be a list of field names or a function, "
            f"not {type(given).__name__}"
        )
    names = tuple(given)
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad or not names:
        raise TypeError(
            f"tool {tool}: {what} must name at least one field, each a non-empty string "
            f"(got {list(given)!r})"
        )
    return names


def _blank(value: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: (REDACTED if k in names else v) for k, v in value.items()}


def qualified_name(fn: object) -> str:
    """``module.qualname`` of a function (of its type for another callable):
    how the recorded configuration names code it cannot hold."""
    named = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', '?')}"


def redaction_text(given: InputRedaction | ResultRedaction | None) -> str:
    """``@tool(redact=...)`` or ``redact_result=...`` as the configuration records
    it: ``fields a, b``, ``function module.qualname``, or empty for none."""
    if given is None:
        return ""
    if callable(given):
        return f"function {qualified_name(given)}"
    return "fields " + ", ".join(str(n) for n in given)


def compile_input_redaction(
    tool: str, fields: Sequence[str], redact: InputRedaction | None
) -> Callable[[Mapping[str, Any]], dict[str, Any]] | None:
    """The function ``@tool(redact=...)`` stands for, checked against the tool's
    input ``fields``: a name the input does not have is a ``ValueError`` naming it."""
    if redact is None:
        return None
    if callable(redact):
        fn = redact

        def by_function(value: Mapping[str, Any]) -> dict[str, Any]:
            out = fn(value)
            if not isinstance(out, Mapping):
                raise TypeError(
                    f"tool {tool}: its redact function returned {type(out).__name__}, "
                    "not a mapping of the input's fields"
                )
            return dict(out)

        return by_function
    names = _names(tool, "redact", redact)
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise ValueError(
            f"tool {tool}: redact names {', '.join(repr(n) for n in unknown)}, which its input "
            f"does not have (its fields: {', '.join(fields) or 'none'}); name fields of the "
            "input, or give a function"
        )
    return lambda value: _blank(value, names)


def compile_result_redaction(
    tool: str, redact_result: ResultRedaction | None
) -> Callable[[Any], Any] | None:
    """The function ``@tool(redact_result=...)`` stands for.  Field names apply
    to a returned mapping or msgspec Struct (``tools`` applies them to a
    ``ToolOutput``'s content and structured value); other values are recorded
    as they are."""
    if redact_result is None:
        return None
    if callable(redact_result):
        return redact_result
    names = _names(tool, "redact_result", redact_result)

    def by_names(value: Any) -> Any:
        if isinstance(value, msgspec.Struct):
            value = msgspec.to_builtins(value)
        if isinstance(value, Mapping):
            return _blank(value, names)
        return value

    return by_names


def recovered_input(
    tool: str,
    recover: Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None] | None,
    started_digest: str,
    execution_id: str,
    redacted: Mapping[str, Any],
) -> dict[str, Any]:
    """The real input of a started call re-entered after a restore, from the
    host's ``recover``; ``RedactedInputError`` saying why when there is none
    that matches ``started_digest``."""
    if recover is None:
        raise RedactedInputError(
            f"tool call {execution_id} ({tool}) cannot run again after the restart: its input "
            "was redacted and the tool has no recover_input to get the original from the "
            "host; resolve the call with `loopruntime resolve`"
        )
    try:
        real = recover(execution_id, redacted)
    except Exception as exc:
        raise RedactedInputError(
            f"tool call {execution_id} ({tool}) cannot run again after the restart: "
            f"recover_input failed ({exc!r}); resolve the call with `loopruntime resolve`"
        ) from exc
    if real is None:
        raise RedactedInputError(
            f"tool call {execution_id} ({tool}) cannot run again after the restart: the "
            "host has no original input for it (recover_input gave None); resolve the "
            "call with `loopruntime resolve`"
        )
    real = dict(real)
    if not started_digest or input_digest(real) != started_digest:
        raise RedactedInputError(
            f"tool call {execution_id} ({tool}) cannot run again after the restart: the "
            "input recover_input gave is not the one the call started with (its digest "
            "differs from tool.started's input_digest); resolve the call with "
            "`loopruntime resolve`"
        )
    return real


class Originals:
    """The real inputs and results of the redacted calls this process ran,
    by ``tool_use`` id: what the model is shown while the loop lives.  Never
    journaled; empty after a restore."""

    __slots__ = ("inputs", "results")

    def __init__(self) -> None:
        self.inputs: dict[str, dict[str, Any]] = {}
        self.results: dict[str, tuple[ResultBlock, ...]] = {}

    def __bool__(self) -> bool:
        return bool(self.inputs or self.results)

    def shown(self, block: Any) -> Any:
        """``block`` as the model is shown it: a redacted call or result with
        its original, anything else as it is."""
        if isinstance(block, ToolUse):
            real = self.inputs.get(block.id)
            if real is not None:
                return msgspec.structs.replace(block, input=real)
        elif isinstance(block, ToolResult):
            content = self.results.get(block.tool_use_id)
            if content is not None:
                return msgspec.structs.replace(block, content=content)
        return block


def redacted_rewrite(event: Event, redact: Callable[[Mapping[str, Any]], dict[str, Any]]) -> Event:
    """A before_tool hook's record with the tool's redaction applied to the
    inputs it holds: the hook saw the real input, the journal keeps neither."""
    if not isinstance(event, HookDecided):
        return event
    return msgspec.structs.replace(
        event,
        input=redact(event.input) if event.input is not None else None,
        original=redact(event.original) if event.original is not None else None,
    )


def scrub(text: str, real: dict[str, Any], recorded: dict[str, Any]) -> str:
    """``text`` without the values redaction took out of ``recorded`` (an error
    message may quote the input)."""
    if real is recorded:
        return text
    for key, value in real.items():
        if recorded.get(key) == REDACTED and isinstance(value, str | int | float) and str(value):
            text = text.replace(str(value), REDACTED)
    return text


def journaled_message(
    message: Message,
    redacting: Mapping[str, Callable[[Mapping[str, Any]], dict[str, Any]]],
    originals: Originals,
    log: Any,
) -> Message:
    """``message`` as the journal holds it: each call to a redacting tool
    (``redacting``: tool name -> its input redaction) with its redacted input,
    the real one kept in ``originals`` for the live loop."""
    blocks: list[Block] = []
    for block in message.blocks:
        redact = redacting.get(block.name) if isinstance(block, ToolUse) else None
        if redact is not None:
            assert isinstance(block, ToolUse)
            try:
                recorded = redact(block.input)
            except Exception as exc:
                # Fail closed: nothing of the input is recorded (the call
                # itself runs with the real input, kept below).
                log.warning("redaction_failed", tool=block.name, error=type(exc).__name__)
                recorded = {}
            originals.inputs[block.id] = block.input
            block = msgspec.structs.replace(block, input=recorded)
        blocks.append(block)
    return msgspec.structs.replace(message, blocks=tuple(blocks))


def secret_piece(delta: object, redacting: Mapping[str, object], secret: set[int]) -> bool:
    """Whether the stream piece ``delta`` is part of a redacting tool's input
    (noting, in ``secret``, the index of such a call as it starts)."""
    if isinstance(delta, BlockStarted) and delta.kind == "tool_use":
        if delta.name in redacting:
            secret.add(delta.index)
        return False
    return isinstance(delta, InputJsonDelta) and delta.index in secret
