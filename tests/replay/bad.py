"""Hand-built journals for the checker tests: a valid base, one violation each."""

from __future__ import annotations

from journal import Draft, Record
from journal.content import Message, Text, ToolUse
from journal.events import (
    CHECKPOINT_STREAM,
    Event,
    InputQueued,
    LoopImage,
    LoopStarted,
    ModelCallStarted,
    ModelMessageCommitted,
    SessionCheckpoint,
    SessionForked,
    ToolCompleted,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from journal.memory import MemoryJournal
from loopruntime.state import fold_all, image_bytes

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


def checkpoint_of(events: list[Event], *, previous: int = 0, kept: int = 0) -> SessionCheckpoint:
    """A checkpoint of loop main after ``events`` (records 1..n of SESSION,
    earlier checkpoints among them)."""
    state = fold_all(
        Record(
            seq=i + 1,
            id=f"ev{i}",
            session=SESSION,
            loop="main",
            at=0,
            cause=None,
            digest=b"",
            event=e,
        )
        for i, e in enumerate(events)
        if not isinstance(e, SessionCheckpoint)
    )
    image = LoopImage(
        loop="main",
        state=image_bytes(state),
        kept=kept,
        messages=tuple(state.messages[kept:]),
    )
    return SessionCheckpoint(previous=previous, loops=(image,))


async def journal_of(events: list[Event], *, loop: str = "main") -> MemoryJournal:
    """A memory journal holding ``events`` as records 1..n of SESSION
    (checkpoints on their own stream, as the session writer puts them)."""
    journal = MemoryJournal()
    lease = await journal.open_session(SESSION)
    for i, event in enumerate(events):
        own = isinstance(event, SessionCheckpoint | SessionForked)
        stream = CHECKPOINT_STREAM if own else loop
        await journal.append(lease, [Draft(id=f"ev{i}", loop=stream, event=event)], expected_seq=i)
    return journal


async def records_of(events: list[Event]) -> list[Record]:
    journal = await journal_of(events)
    return [r async for r in journal.read(SESSION)]
