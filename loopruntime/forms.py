"""Forms: the types that open form gates' answers must validate as.

A type is not data the journal can hold, so it lives in the process: the task
asking a form registers it before the gate is committed; after a restart it
comes back when the re-entered (resumable) tool asks again.  ``gates`` checks
answers against it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .commands import AnswerGate
from .state import LoopState

__all__ = ["Forms"]


class Forms:
    """The types that open form gates' answers must validate as, by gate id
    (this process only: a type is not data the journal can hold), and the
    answers held until their form's type is known.

    A task asking a form registers its type (``expect``) before the gate is
    committed, so a live gate always has its type.  After a restart the type
    comes back when the re-entered tool asks again; an answer that arrives
    first is held, and handed back (``resend``) as soon as the type is known
    or the turn ends (then it is checked against what is open)."""

    __slots__ = ("_held", "_resend", "_types")

    def __init__(self, resend: Callable[[AnswerGate], None]) -> None:
        self._types: dict[str, Any] = {}
        self._held: tuple[AnswerGate, ...] = ()
        """A tuple, rarely not empty: an idle loop's holds no list of its own."""
        self._resend = resend

    def get(self, gate_id: str) -> Any:
        return self._types.get(gate_id)

    def waits_for_type(self, state: LoopState, command: AnswerGate) -> bool:
        """``command`` answers an open form gate whose type is not known yet."""
        gate = state.gates.get(command.gate_id)
        return gate is not None and gate.form is not None and command.gate_id not in self._types

    def expect(self, gate_id: str, form_type: Any) -> None:
        self._types[gate_id] = form_type
        self._release(lambda c: c.gate_id == gate_id)

    def forget(self, gate_id: str) -> None:
        self._types.pop(gate_id, None)

    @property
    def holding(self) -> bool:
        """Some answer is held (its sender still waits for the reply)."""
        return bool(self._held)

    def hold(self, command: AnswerGate) -> None:
        self._held = (*self._held, command)

    def release_all(self) -> None:
        """Hand back every held answer (the turn ended: its gates closed or
        wait for the next turn to re-enter their tools)."""
        self._release(lambda c: True)

    def fail_all(self, error: BaseException) -> None:
        """The loop stopped: every held answer gets ``error``."""
        held, self._held = self._held, ()
        for command in held:
            command.reply.fail(error)

    def _release(self, which: Callable[[AnswerGate], bool]) -> None:
        if not self._held:
            return
        going = [c for c in self._held if which(c)]
        self._held = tuple(c for c in self._held if not which(c))
        for command in going:
            self._resend(command)
