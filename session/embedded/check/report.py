"""What the checker reports: the rules it checks, each problem it finds (at
a seq, or below the records, at seq 0), and the verdict; and who hears how
far a check got."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from journal import StorageCheck

__all__ = ["EVERY", "RULES", "CheckReport", "Problem", "Progress"]

RULES = (
    "storage intact",
    "journal readable",
    "record belongs to the session",
    "seq gap-free",
    "digest chain intact",
    "tool started once",
    "settlement follows its start",
    "settlement names its call",
    "tool settled at most once",
    "progress names a running call",
    "result answers an open tool_use",
    "every tool_use answered exactly once",
    "every tool_use answered before the next call",
    "turn ends with every tool_use answered",
    "gate opened once",
    "gate closed after it opened",
    "gate closed at most once",
    "gate resolved with its kind",
    "turns numbered in order",
    "turn ended at most once",
    "turn.ended names the open turn",
    "a paused loop begins no turn",
    "deadline names what it cut",
    "decision names an open tool_use",
    "model call uses the configured model",
    "compaction has a matching start",
    "compaction basis matches its start",
    "compaction basis is current",
    "compaction range valid",
    "fold succeeds",
    "cause names an earlier record",
    "key used once",
    "checkpoint chain linked",
    "checkpoint equals the fold before it",
    "fork marker is seq 1",
    "fork base is a full checkpoint",
    "fork base equals its source",
    # Over the session's writer spans (``writers.py``), not its records.
    "records of a fenced writer never follow a newer one",
    "writer span starts at a record",
)
"""Every rule the checker enforces, by the name a ``Problem`` carries."""


@dataclass(frozen=True)
class Problem:
    seq: int
    """The record at fault; 0 for damage below the records (``storage intact``)."""
    rule: str
    detail: str

    def __str__(self) -> str:
        if self.seq == 0:
            return f"{self.rule}: {self.detail}"
        return f"seq {self.seq}: {self.rule}: {self.detail}"


@dataclass
class CheckReport:
    session: str
    records: int = 0
    problems: list[Problem] = field(default_factory=list)
    storage: StorageCheck | None = None
    """What the storage check ran (None when it was not asked for)."""
    notes: list[str] = field(default_factory=list)
    """What the check could not prove and why (a fork whose source is not in
    this journal), none of them a problem."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_bad_seq(self) -> int | None:
        return min((p.seq for p in self.problems if p.seq > 0), default=None)

    def summary(self) -> str:
        if self.ok:
            checked = (
                f"; storage checked: {', '.join(self.storage.checked)}"
                if self.storage is not None and self.storage.checked
                else ""
            )
            notes = "".join(f"; note: {n}" for n in self.notes)
            return (
                f"ok: {self.records} records of session {self.session}, every invariant "
                f"holds{checked}{notes}"
            )
        counted = f"({len(self.problems)} problem(s) in {self.records} records)"
        first_seq = self.first_bad_seq
        if first_seq is None:
            return f"FAILED: {self.problems[0]} {counted}"
        first = next(p for p in self.problems if p.seq == first_seq)
        damaged = "; the storage is damaged too" if self.problems[0].seq == 0 else ""
        return f"FAILED at seq {first_seq}: {first}{damaged} {counted}"


class Progress(Protocol):
    """Who hears how far a check got (``session.replay.terminal.Bar`` draws it)."""

    def advance(self, n: int = 1) -> None: ...

    def phase(self, what: str, total: int | None = None) -> None: ...


EVERY = 512
"""Records between two reports to a ``Progress``: a report costs a lock in
the drawing library, so not one per record."""
