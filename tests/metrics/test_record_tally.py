"""``RecordTally``: the projection the record-derived families read, over records alone."""

from __future__ import annotations

from journal import Record
from journal.content import Message, Text, TextDelta, Usage
from journal.events import (
    Event,
    ModelCallFailed,
    ModelCallStarted,
    ModelMessageCommitted,
    ModelOutput,
    ToolCompleted,
    TurnEnded,
    TurnRejected,
    TurnStarted,
)
from session.hosting.metrics import RecordTally

SECOND = 1_000_000_000


def record(seq: int, at: float, event: Event) -> Record:
    return Record(
        seq=seq,
        id=f"r{seq}",
        session="s",
        loop="root",
        at=int(at * SECOND),
        cause=None,
        digest=b"",
        event=event,
    )


def test_calls_are_counted_by_model_and_timed_from_their_records() -> None:
    tally = RecordTally()
    reply = Message(role="assistant", blocks=(Text(text="hi"),))
    timeline: list[tuple[float, Event]] = [
        (0.0, TurnStarted(turn=1)),
        (0.0, ModelCallStarted(effect_id="m1", turn=1, step=1, model="claude")),
        (0.5, ModelCallFailed(effect_id="m1", kind="overloaded", code="529", retryable=True)),
        (1.5, ModelOutput(effect_id="m1", pieces=(TextDelta(index=0, text="h"),))),
        (1.7, ModelOutput(effect_id="m1", pieces=(TextDelta(index=0, text="i"),))),
        (
            2.0,
            ModelMessageCommitted(
                effect_id="m1",
                turn=1,
                step=1,
                message=reply,
                usage=Usage(input_tokens=100, output_tokens=7),
            ),
        ),
        (
            2.1,
            ToolCompleted(execution_id="x", tool_use_id="t", content=(), disposition="rejected"),
        ),
        (2.2, TurnEnded(turn=1, outcome="completed")),
        (2.3, TurnRejected(input_id="in_2", reason="queue_full")),
    ]
    for seq, (at, event) in enumerate(timeline, start=1):
        tally.feed(record(seq, at, event))
    assert tally.turns_started == 1 and tally.turns_ended == {"completed": 1}
    assert tally.inputs_rejected == {"queue_full": 1}
    assert tally.model_calls == {("claude", "529"): 1, ("claude", "completed"): 1}
    assert tally.tokens == {("claude", "input"): 100, ("claude", "output"): 7}
    assert tally.model_seconds["claude"].total == 2.0
    assert tally.first_output_seconds["claude"].total == 1.5
    assert tally.first_output_seconds["claude"].buckets()[-1] == ("+Inf", 1.0)
    # A rejected call never ran: counted, not timed; its tool is unknown without a start.
    assert tally.tool_calls == {("unknown", "rejected"): 1} and not tally.tool_durations
