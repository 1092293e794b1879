"""What a collaboration is: a coordinator, its workers, and its bounds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from journal.events import Decision
from loopruntime import LoopDefinition, LoopError

from .fold import Turn

__all__ = ["COUNTER_LIMIT", "Collaboration", "CollaborationError", "Policy", "Worker"]

COUNTER_LIMIT = 2**53 - 1
"""The end of a collaboration's turn counter: the largest integer every JSON
reader (a browser's console among them) holds exactly.  A bound of ``None``
(unlimited) is recorded as this; a collaboration whose counter reaches it fails
with ``engine.counter.exhausted``."""


@dataclass(frozen=True, kw_only=True)
class Worker:
    name: str
    definition: LoopDefinition
    description: str = ""


Policy = Callable[[Turn], "Decision | Awaitable[Decision]"]


@dataclass(frozen=True, kw_only=True)
class Collaboration:
    coordinator: LoopDefinition | Policy
    workers: Sequence[Worker]
    max_turns: int | None = 20
    """None: unlimited (up to ``COUNTER_LIMIT``)."""
    max_tasks: int | None = 20
    """Tasks in all, starts that failed included; None: unlimited."""
    max_concurrent_tasks: int = 4
    max_controls_per_turn: int = 4
    state_type: type[Any] | None = None
    """A msgspec type the ``state`` of every ``continue`` and ``wait`` decision
    must be JSON of (None: free text)."""
    output_type: type[Any] | None = None
    """A msgspec type the ``complete`` decision's ``output`` must be JSON of."""

    def __post_init__(self) -> None:
        bounds = {
            "max_turns": self.max_turns,
            "max_tasks": self.max_tasks,
            "max_concurrent_tasks": self.max_concurrent_tasks,
            "max_controls_per_turn": self.max_controls_per_turn,
        }
        for field, value in bounds.items():
            if value is None and field in ("max_turns", "max_tasks"):
                continue
            if type(value) is not int or not 0 <= value <= COUNTER_LIMIT:
                raise CollaborationError(
                    f"Collaboration of {self.coordinator_name!r}: {field}={value!r} is not a "
                    f"count from 0 to {COUNTER_LIMIT}",
                    code="collaboration.config.invalid",
                )
        names = [w.name for w in self.workers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise CollaborationError(
                f"Collaboration of {self.coordinator_name!r} names workers {twice} more than "
                "once; a task names its worker, so each name must be unique",
                code="collaboration.config.invalid",
            )
        for field, schema in (("state_type", self.state_type), ("output_type", self.output_type)):
            if schema is None:
                continue
            try:
                msgspec.json.Decoder(schema)
            except TypeError as exc:
                raise CollaborationError(
                    f"Collaboration of {self.coordinator_name!r}: {field}={schema!r} is not a "
                    f"type msgspec can decode: {exc}",
                    code="collaboration.config.invalid",
                ) from exc

    @property
    def turn_bound(self) -> int:
        return COUNTER_LIMIT if self.max_turns is None else self.max_turns

    @property
    def task_bound(self) -> int:
        return COUNTER_LIMIT if self.max_tasks is None else self.max_tasks

    @property
    def state_schema(self) -> str:
        """The JSON Schema of ``state_type``, as recorded ("" for free text)."""
        return _schema_text(self.state_type)

    @property
    def output_schema(self) -> str:
        return _schema_text(self.output_type)

    @property
    def coordinator_name(self) -> str:
        if isinstance(self.coordinator, LoopDefinition):
            return self.coordinator.name
        return getattr(self.coordinator, "__name__", "policy")

    def definitions(self) -> list[LoopDefinition]:
        """Every loop definition this collaboration may run (for restore)."""
        out = [w.definition for w in self.workers]
        if isinstance(self.coordinator, LoopDefinition):
            out.append(self.coordinator)
        return out


def _schema_text(schema: type[Any] | None) -> str:
    if schema is None:
        return ""
    return msgspec.json.encode(msgspec.json.schema(schema), order="sorted").decode()


class CollaborationError(LoopError):
    """A collaboration ended ``failed`` (or was refused); ``code`` says why,
    ``path`` where a typed ``state`` or ``output`` broke its schema
    (``state.items[2]``)."""

    def __init__(self, message: str, *, code: str, path: str | None = None) -> None:
        super().__init__(message, code=code)
        self.path = path
