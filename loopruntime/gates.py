"""Gates: where a loop waits for a person.

Every rule about a gate lives here: how one opens (durable before anyone can
answer it), how a person's answer is checked against it, how the answer
reaches the task waiting at it, and how gates are abandoned (the turn
settled, the loop stopped).  Whether a gate is open is the fold's to say
(``LoopState.gates``); ``Answers`` only carries answers from the actor to the
waiting tasks.

Three kinds of question share the ``user_input`` kind: a free question (its
answer is text, one of its ``choices`` when it has them), a form (``form``:
the answer is JSON that must validate as the msgspec type the asking tool
gave, ``Forms`` keeps that type in the process) and a URL to open and
confirm (``url``; with ``needs_value`` the confirmation must carry a value).
After a restart a form's type is known again only once its resumable tool,
re-entered, asks again: an answer arriving before that is held and checked
then (``Forms.hold``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from journal.content import ToolUse
from journal.events import GateCancelled, GateCancelReason, GateOpened, GateResolved

from .commands import AnswerGate, DecideGate, Reply
from .errors import GateMismatchError, InvalidAnswerError
from .forms import Forms
from .ids import new_id
from .ports import ToolsPort
from .state import LoopState

__all__ = [
    "Answers",
    "Forms",
    "abandoned",
    "open_and_wait",
    "open_permission",
    "open_question",
    "permission_request",
    "question",
    "resolution",
]


def permission_request(use: ToolUse, tool_name: str) -> GateOpened:
    """The gate asking a person to allow the call ``use``."""
    return GateOpened(
        gate_id=new_id("gate_"),
        kind="permission",
        execution_id="",
        tool_use_id=use.id,
        tool_name=tool_name,
        prompt=f"Allow {tool_name}?",
        preview={"tool": tool_name, "input": use.input},
    )


def question(
    *,
    execution_id: str,
    tool_use_id: str,
    tool_name: str,
    prompt: str,
    choices: tuple[str, ...] | None,
    form: dict[str, Any] | None = None,
    url: str | None = None,
    needs_value: bool = False,
) -> GateOpened:
    """The gate through which a running tool call asks a person a question
    (a form's JSON Schema with ``form``; a URL to open with ``url``)."""
    return GateOpened(
        gate_id=new_id("gate_"),
        kind="user_input",
        execution_id=execution_id,
        tool_use_id=tool_use_id,
        tool_name=tool_name,
        prompt=prompt,
        choices=choices,
        form=form,
        url=url,
        needs_value=needs_value,
    )


def open_permission(state: LoopState, tool_use_id: str) -> GateOpened | None:
    """The permission gate still open for call ``tool_use_id`` (after a restore)."""
    return next(
        (
            g
            for g in state.gates.values()
            if g.kind == "permission" and g.tool_use_id == tool_use_id
        ),
        None,
    )


def open_question(state: LoopState, execution_id: str) -> GateOpened | None:
    """The question still open for execution ``execution_id`` (after a restore)."""
    return next(
        (
            g
            for g in state.gates.values()
            if g.kind == "user_input" and g.execution_id == execution_id
        ),
        None,
    )


async def open_and_wait(
    loop: ToolsPort, gate: GateOpened, *, cause: str | None = None
) -> GateResolved:
    """Open ``gate`` (its record's cause is ``cause``: the call it is for) and
    wait for a person to close it.  Committed first: its id only becomes known
    through the durable record, so nobody can answer a gate the journal does
    not hold."""
    await loop.commit([gate], cause=cause)
    return await loop.wait_gate(gate.gate_id)


def resolution(
    state: LoopState, command: AnswerGate | DecideGate, forms: Forms | None = None
) -> GateResolved:
    """The event closing the gate ``command`` answers; a typed error (nothing
    committed, the gate stays open) when it does not fit the open gate.  A
    form's answer is checked against its type in ``forms`` and recorded as
    the JSON of the value it validated as."""
    gate = state.gates.get(command.gate_id)
    if isinstance(command, AnswerGate):
        if gate is None or gate.kind != "user_input":
            raise _mismatch(command.gate_id, "user_input", gate)
        answer = command.answer
        if gate.choices is not None and answer not in gate.choices:
            raise InvalidAnswerError(
                f"answer {answer!r} is not one of the choices "
                f"{list(gate.choices)} of gate {command.gate_id}; the gate stays open"
            )
        if gate.form is not None:
            form_type = forms.get(gate.gate_id) if forms is not None else None
            assert form_type is not None, "an answer to a form waits until its type is known"
            answer = _form_answer(gate.gate_id, answer, form_type)
        if gate.url is not None and gate.needs_value and not answer.strip():
            raise InvalidAnswerError(
                f"gate {gate.gate_id} asks for a value with the confirmation that "
                f"{gate.url} was opened (a code, an id), and the answer is empty; the gate "
                "stays open"
            )
        return GateResolved(gate_id=gate.gate_id, kind="user_input", answer=answer)
    if gate is None or gate.kind != "permission":
        raise _mismatch(command.gate_id, "permission", gate)
    return GateResolved(
        gate_id=gate.gate_id, kind="permission", allow=command.allow, scope=command.scope
    )


def _form_answer(gate_id: str, answer: str, form_type: Any) -> str:
    """``answer`` checked against the form's type, as the JSON of the value it
    validated as (defaults filled in); ``InvalidAnswerError`` naming the field."""
    try:
        value = msgspec.json.decode(answer, type=form_type)
    except msgspec.ValidationError as exc:
        raise InvalidAnswerError(
            f"the answer to form gate {gate_id} does not fit its form: {exc}; the gate stays open"
        ) from exc
    except msgspec.DecodeError as exc:
        raise InvalidAnswerError(
            f"the answer to form gate {gate_id} is not JSON ({exc}); answer with a JSON "
            "value of the form's schema; the gate stays open"
        ) from exc
    return msgspec.json.encode(value).decode()


def _mismatch(gate_id: str, kind: str, gate: GateOpened | None) -> GateMismatchError:
    if gate is None:
        return GateMismatchError(f"gate {gate_id} is not open (never opened, or already closed)")
    return GateMismatchError(
        f"gate {gate_id} is a {gate.kind} gate, not {kind}; answer it with "
        + ("Session.answer" if gate.kind == "user_input" else "Session.decide")
    )


def abandoned(state: LoopState, reason: GateCancelReason) -> list[GateCancelled]:
    """Events closing every open gate unanswered (a turn being settled)."""
    return [GateCancelled(gate_id=g, reason=reason) for g in state.gates]


class Answers(dict[str, Reply[GateResolved]]):
    """Answers on their way from the actor to the tasks waiting at gates, by
    gate id.

    An answer may arrive before its task waits (a resumed turn reaching the
    gate again): it is kept until the task asks for it.  A dict itself, with
    no slots of its own: an idle loop pays for no more than an empty dict."""

    __slots__ = ()

    def _reply(self, gate_id: str) -> Reply[GateResolved]:
        reply = self.get(gate_id)
        if reply is None:
            reply = self[gate_id] = Reply()
        return reply

    def deliver(self, event: GateResolved) -> None:
        self._reply(event.gate_id).set(event)

    async def wait(self, gate_id: str) -> GateResolved:
        reply = self._reply(gate_id)
        try:
            return await reply.wait()
        finally:
            self.pop(gate_id, None)

    def fail_all(self, error: BaseException) -> None:
        """The loop stopped: every task still waiting at a gate gets ``error``."""
        for reply in self.values():
            reply.fail(error)
