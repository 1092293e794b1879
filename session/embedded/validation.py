"""What a command may carry into the journal, checked before it is sent.

A refused argument raises a named error and nothing is committed (an answer
or a decision refused leaves its gate open).  msgspec encodes whatever it is
given but decodes only what the schema allows, so content is accepted only
if the journal could read it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from journal.content import Block, Message, ResultBlock, Text
from journal.events import GateScope
from loopruntime import (
    InvalidAnswerError,
    Limits,
    LoopDefinition,
    NotRegisteredError,
    PayloadTooLargeError,
    Tool,
)
from loopruntime.host import ChangeInference, ReplaceTools

from .errors import EmptyInputError, InvalidContentError

__all__ = [
    "answer_text",
    "check_decision",
    "inference_command",
    "steering_text",
    "tools_command",
    "tool_result",
    "user_message",
]

_message_decoder = msgspec.msgpack.Decoder(Message)
_result_decoder = msgspec.msgpack.Decoder(tuple[ResultBlock, ...])
_text_decoder = msgspec.msgpack.Decoder(str)


def _recordable(
    value: object,
    decoder: msgspec.msgpack.Decoder[Any],
    what: str,
    limit: int | None = None,
) -> None:
    """Refuse what the journal could not read back: a plain string among a
    message's blocks would be appended and then fail every read; text that is
    not Unicode would fail the append itself, which ends the whole session.
    With ``limit``, refuse more bytes than ``Limits.max_input_bytes``
    (measured before the bytes are decoded again)."""
    try:
        body = msgspec.msgpack.encode(value)
        if limit is not None and len(body) > limit:
            raise PayloadTooLargeError(
                what, size=len(body), limit=limit, field="Limits.max_input_bytes"
            )
        decoder.decode(body)
    except (msgspec.MsgspecError, TypeError, ValueError) as exc:
        raise InvalidContentError(
            f"{what} cannot be recorded ({exc}); nothing was committed"
        ) from exc


def _check_blocks(message: Message, limits: Limits) -> None:
    count = len(message.blocks)
    if count > limits.max_input_blocks:
        raise PayloadTooLargeError(
            "the input",
            size=count,
            limit=limits.max_input_blocks,
            field="Limits.max_input_blocks",
            unit="blocks",
        )


def user_message(content: str | Message | Sequence[Block], limits: Limits | None = None) -> Message:
    """Input as the user's message: text, a message, or its content blocks.
    With ``limits`` (the loop's), refuse more blocks or bytes than they allow."""
    if isinstance(content, str):
        message = Message(role="user", blocks=(Text(text=content),))
    elif isinstance(content, Message):
        message = content
    else:
        try:
            message = Message(role="user", blocks=tuple(content))
        except TypeError as exc:
            raise InvalidContentError(
                f"input must be text, a Message or a sequence of content blocks, not "
                f"{type(content).__name__}; nothing was committed"
            ) from exc
    if limits is not None:
        _check_blocks(message, limits)
    _recordable(message, _message_decoder, "the input", _max_input(limits))
    _check_said(message.blocks, "the input")
    return message


def _max_input(limits: Limits | None) -> int | None:
    return None if limits is None else limits.max_input_bytes


def _check_said(blocks: Sequence[object], what: str) -> None:
    """Refuse a message the model API would refuse: no block, or a text block
    of whitespace only (the API wants non-whitespace text in every one)."""
    if not blocks:
        raise EmptyInputError(what, "it has no content block")
    for block in blocks:
        if isinstance(block, Text) and not block.text.strip():
            raise EmptyInputError(what, _blank(block.text))


def _blank(text: str) -> str:
    return "empty text" if not text else f"{len(text)} characters of whitespace only"


def steering_text(text: object, limits: Limits | None = None) -> str:
    if not isinstance(text, str):
        raise InvalidContentError(
            f"steering must be text, not {type(text).__name__}; nothing was committed"
        )
    _recordable(text, _text_decoder, "the steering", _max_input(limits))
    if not text.strip():
        raise EmptyInputError("the steering", _blank(text))
    return text


def answer_text(
    gate_id: str, text: object, *, data: bool = False, limits: Limits | None = None
) -> str:
    """An answer as the text the gate is answered with.  With ``data`` (a
    form's answer) a value that is not text (a dict, a Struct, a number...)
    is taken as its JSON.  With ``limits``, refuse more bytes than
    ``Limits.max_answer_bytes`` (the gate stays open)."""
    if isinstance(text, str):
        answer = text
    elif data:
        try:
            answer = msgspec.json.encode(text).decode()
        except (TypeError, msgspec.EncodeError) as exc:
            raise InvalidAnswerError(
                f"the answer to form gate {gate_id} cannot be written as JSON ({exc}); "
                "the gate stays open"
            ) from exc
    else:
        raise InvalidAnswerError(
            f"the answer to gate {gate_id} must be text, not {type(text).__name__}; "
            "the gate stays open"
        )
    if limits is not None:
        # Text that is not Unicode is measured as written; the codec refuses it later.
        size = len(answer.encode("utf-8", "surrogatepass"))
        if size > limits.max_answer_bytes:
            raise PayloadTooLargeError(
                f"the answer to gate {gate_id}",
                size=size,
                limit=limits.max_answer_bytes,
                field="Limits.max_answer_bytes",
            )
    return answer


def check_decision(gate_id: str, allow: object, scope: str) -> GateScope:
    """``allow`` must be a real bool: ``bool("no")`` is True, so anything else
    would allow what the caller meant to deny.  Returns ``scope``, checked."""
    if not isinstance(allow, bool):
        raise InvalidAnswerError(
            f"the decision on gate {gate_id} must be allow=True or allow=False, not "
            f"{allow!r}; the gate stays open"
        )
    if scope not in ("once", "session"):
        raise InvalidAnswerError(
            f"the scope of a decision on gate {gate_id} must be 'once' or 'session', "
            f"not {scope!r}; the gate stays open"
        )
    return "session" if scope == "session" else "once"


def tool_result(
    execution_id: str,
    result: str | Sequence[ResultBlock],
    is_error: object,
    limits: Limits | None = None,
) -> tuple[ResultBlock, ...]:
    """The content of a host's result for a call whose outcome is unknown."""
    if isinstance(result, str):
        content: tuple[ResultBlock, ...] = (Text(text=result),)
    else:
        try:
            content = tuple(result)
        except TypeError as exc:
            raise InvalidContentError(
                f"the result of execution {execution_id} must be text or a sequence of "
                f"Text and Image blocks, not {type(result).__name__}; nothing was committed"
            ) from exc
    _recordable(
        content, _result_decoder, f"the result of execution {execution_id}", _max_input(limits)
    )
    if not isinstance(is_error, bool):
        raise InvalidContentError(
            f"is_error must be a bool, not {is_error!r}; nothing was committed"
        )
    return content


def inference_command(
    model: object, max_tokens: object, reset: object, key: str | None
) -> ChangeInference:
    """``change_inference``'s arguments, checked: a model name, a positive
    token budget, a real bool, something to change (``key`` was checked by
    the caller)."""
    if model is not None and (not isinstance(model, str) or not model):
        raise InvalidContentError(
            f"change_inference(model=...) takes the name of a registered model, not {model!r}; "
            "nothing was committed"
        )
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise InvalidContentError(
            f"change_inference(max_tokens=...) takes a whole number of tokens, 1 or more, not "
            f"{max_tokens!r}; nothing was committed"
        )
    if not isinstance(reset, bool):
        raise InvalidContentError(
            f"change_inference(reset=...) takes True or False, not {reset!r}; nothing was committed"
        )
    if model is None and max_tokens is None and not reset:
        raise InvalidContentError(
            "change_inference() was given nothing to change: pass model=, max_tokens= or "
            "reset=True; nothing was committed"
        )
    return ChangeInference(model=model, max_tokens=max_tokens, reset=reset, key=key)


def tools_command(tools: object, definition: LoopDefinition, key: str | None) -> ReplaceTools:
    """``replace_tools``'s arguments, checked: names of registered tools (a
    ``Tool`` must have the registered one's input schema), none twice; ``key``
    was checked by the caller."""
    if tools is None:
        return ReplaceTools(tools=None, key=key)
    if isinstance(tools, str | Tool) or not isinstance(tools, Sequence):
        raise InvalidContentError(
            f"replace_tools takes a list of tool names or Tools (or None), not {tools!r}; "
            "nothing was committed"
        )
    names: list[str] = []
    for item in tools:
        if isinstance(item, Tool):
            registered = definition.registered_tool(item.name)
            if registered.schema.input_schema != item.schema.input_schema:
                raise NotRegisteredError(
                    f"the tool {item.name!r} given to replace_tools has another input schema "
                    f"than the one loop definition {definition.name!r} registers under that "
                    "name; register this tool in LoopDefinition(tool_registry=[...]) so a "
                    "restore finds it; nothing was committed"
                )
            name = item.name
        elif isinstance(item, str) and item:
            name = item
        else:
            raise InvalidContentError(
                f"replace_tools takes tool names or Tools, not {item!r}; nothing was committed"
            )
        if name in names:
            raise InvalidContentError(
                f"replace_tools was given tool {name!r} twice; nothing was committed"
            )
        names.append(name)
    return ReplaceTools(tools=tuple(names), key=key)
