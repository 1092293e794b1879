"""Hand-built journals for the checker tests: a valid base, one violation each."""

from __future__ import annotations

from journal import Draft, Record
from journal.content import Message, Text, ToolUse
from journal.events import (
    Event,
    InputQueued,
    LoopStarted,
    ModelCallStarted,
    ModelMessageCommitted,
    ToolCompleted,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from journal.memory import MemoryJournal

SESSION = "ses_bad"


def user(text: str) -> Message:
    return Message(role="user", blocks=(Text(text=text),))


def assistant(text: str, *uses: str) -> Message:
    return Message(
        role="assistant",
        blocks=(Text(text=text), *(ToolUse(id=u, name="add", input={"a": 1}) for u in uses)),
    )


def opening() -> list[Event]:
    """seq 1-5: a loop, an input, a turn, a model reply asking for tool tu1."""
    return [
        LoopStarted(definition="d", model="scripted"),
        InputQueued(input_id="in1", messages=(user("add"),)),
        TurnStarted(turn=1, input_ids=("in1",)),
        ModelCallStarted(effect_id="e1", turn=1, step=0, model="m"),
        ModelMessageCommitted(
            effect_id="e1",
            turn=1,
            step=0,
            message=assistant("adding", "tu1"),
            stop_reason="tool_use",
        ),
    ]


def good_turn() -> list[Event]:
    """seq 1-10: ``opening`` then the tool runs and the turn completes."""
    return [
        *opening(),
        ToolStarted(execution_id="x1", tool_use_id="tu1", name="add", input={"a": 1}),
        ToolCompleted(
            execution_id="x1", tool_use_id="tu1", content=(Text(text="1"),), disposition="succeeded"
        ),
        ModelCallStarted(effect_id="e2", turn=1, step=1, model="m"),
        ModelMessageCommitted(effect_id="e2", turn=1, step=1, message=assistant("it is 1")),
        TurnEnded(turn=1, outcome="completed"),
    ]


async def journal_of(events: list[Event], *, loop: str = "main") -> MemoryJournal:
    """A memory journal holding ``events`` as records 1..n of SESSION."""
    journal = MemoryJournal()
    lease = await journal.open_session(SESSION)
    for i, event in enumerate(events):
        await journal.append(lease, [Draft(id=f"ev{i}", loop=loop, event=event)], expected_seq=i)
    return journal


async def records_of(events: list[Event]) -> list[Record]:
    journal = await journal_of(events)
    return [r async for r in journal.read(SESSION)]
