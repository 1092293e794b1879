"""Keyed commands on their way to a loop: answered from the fold when the key
is known, sent one at a time per key otherwise.

The loops' folds hold every key (``LoopState.keys``); a loop's actor checks
its own fold again when it takes the command, so two calls with one key that
race each other still make one effect.  docs/boundaries.md tells the story.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import trio

from loopruntime import Loop
from loopruntime.host import Command, command_digest, command_name, repeat_of

__all__ = ["Route", "send_keyed"]

Route = Callable[[], Loop]
"""Finds the loop a command is for (raising the command's error when none is)."""


async def send_keyed(
    loops: Mapping[str, Loop],
    flights: dict[str, trio.Event],
    target: Loop | None,
    command: Command,
    route: Route,
) -> Any:
    """Send ``command`` to ``target`` (or the loop ``route`` finds) and return
    its reply.  A keyed command whose key a loop's fold already holds is
    answered from there (or refused with ``IdempotencyKeyError``) and never
    sent; commands with the same key go one at a time (``flights``)."""
    key = command.key
    if key is None:
        return await (target or route()).send(command)
    while (flight := flights.get(key)) is not None:
        await flight.wait()
    name = command_name(command)
    for loop in loops.values():
        used = loop.state.keys.get(key) if loop.state.keys else None
        if used is not None:
            # A loop-addressed command digests its loop's id: a key first used
            # on another loop is other content.
            here = target.id if target is not None else loop.id
            return repeat_of(used, key, name, command_digest(command, here))
    target = target or route()
    flight = flights[key] = trio.Event()
    try:
        return await target.send(command)
    finally:
        del flights[key]
        flight.set()
