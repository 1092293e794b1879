"""A turn's result read back from the journal: its typed value, or its text.

``turn_result`` scans one loop's records for the turn's ``turn.ended``;
the value is decoded with the output type of the mode the loop was in then
(the journal records mode changes), so it reads the same after a restore.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from journal import Record
from journal.content import Text
from journal.events import LoopModeChanged, LoopStarted, ModelMessageCommitted, TurnEnded
from loopruntime import LoopDefinition

from .errors import NoResultError

__all__ = ["turn_result"]


def turn_result(
    records: Iterable[Record], loop: str, definition: LoopDefinition, turn: int | None
) -> Any:
    """The result of turn ``turn`` of ``loop`` (None: the last turn that
    ended): the typed value when the loop asked for one, else the text of
    its last reply.  ``NoResultError`` when the turn did not complete."""
    mode: str | None = None
    text = ""
    found: tuple[TurnEnded, str | None, str] | None = None
    for record in records:
        if record.loop != loop:
            continue
        event = record.event
        if isinstance(event, LoopStarted):
            mode = event.mode
        elif isinstance(event, LoopModeChanged):
            mode = event.mode
        elif isinstance(event, ModelMessageCommitted):
            text = "".join(b.text for b in event.message.blocks if isinstance(b, Text))
        elif isinstance(event, TurnEnded):
            if turn is None or event.turn == turn:
                found = (event, mode, text)
            text = ""
    if found is None:
        which = "has not ended a turn yet" if turn is None else f"has no ended turn {turn}"
        raise NoResultError(f"loop {loop} {which}; wait for the turn to end, then ask again")
    ended, mode, text = found
    if ended.outcome != "completed":
        raise NoResultError(
            f"turn {ended.turn} of loop {loop} ended with outcome {ended.outcome}"
            + (f" ({ended.code})" if ended.code else "")
            + ", so it has no result"
            + (f": {ended.detail}" if ended.detail else "")
        )
    spec = definition.resolved(mode).output
    if spec is None:
        # A turn answered by direct tools: their results, in call order.
        return "\n\n".join(ended.output) if ended.direct else text
    return spec.decode(ended.output)
