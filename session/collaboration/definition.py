"""What a collaboration is: a coordinator, its workers, and its bounds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from journal.events import Decision
from loopruntime import LoopDefinition, LoopError

from .fold import Turn

__all__ = ["Collaboration", "CollaborationError", "Policy", "Worker"]


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
    max_turns: int = 20
    max_tasks: int = 20
    max_concurrent_tasks: int = 4
    max_controls_per_turn: int = 4

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


class CollaborationError(LoopError):
    """A collaboration ended ``failed``; ``code`` says why."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code)
