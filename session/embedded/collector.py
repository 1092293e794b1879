"""The cyclic garbage collector around many long-lived sessions.

Making a session allocates a few hundred objects that live through its turn; with
many made at once they outlive the young generations, and each of CPython's full
collections walks every object the process holds, so the collector's work grows with
sessions times sessions.  What is here is process-wide, so the runtime never calls it:
an application (or the process hosting sessions) calls it when it knows its heap is
settled.  Rules:

- ``collector_paused()`` turns automatic collection off for a block (nested and
  overlapping blocks are counted: the collector comes back when the last one leaves,
  and only if it was on when the first came in); leaving without an error collects
  once and, with ``freeze=True``, freezes what is left.
- ``freeze_held()`` collects once, then moves every object alive into the collector's
  permanent generation (``gc.freeze``): later collections never walk them, and memory
  freed by reference counting is still freed.  A cycle among frozen objects that
  becomes garbage stays until ``thaw_held()``.
- ``thaw_held()`` moves them back (``gc.unfreeze``); the next full collection finds
  what died meanwhile.

When each is safe and what it costs: docs/guide.md, "Many sessions in one process".
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused", "freeze_held", "thaw_held"]

_counting = threading.Lock()
"""Held while a block comes in or leaves: trio runs in several threads share the
collector."""
_pauses = 0
"""Blocks of ``collector_paused`` open now, in every task and thread of the process."""
_resume = False
"""Whether the collector was on when the first of them came in."""


@contextmanager
def collector_paused(*, freeze: bool = True) -> Iterator[None]:
    """No automatic cyclic collection while the block runs.

    For making many sessions at once: the runtime leaves no cyclic garbage when it
    makes a session and runs its turns, so nothing waits for the collector meanwhile,
    while each collection it would have run walks objects that stay alive anyway.
    Cyclic garbage the application makes inside the block waits for the end of it.

    Leaving without an error runs one full collection, then, with ``freeze``, freezes
    what is alive (``freeze_held``).  Leaving with an error only turns collection back
    on (when this is the last block open and it was on before the first)."""
    global _pauses, _resume
    with _counting:
        if _pauses == 0:
            _resume = gc.isenabled()
        _pauses += 1
        gc.disable()
    failed = True
    try:
        yield
        failed = False
    finally:
        with _counting:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()
        if not failed:
            if freeze:
                freeze_held()
            else:
                gc.collect()


def freeze_held() -> int:
    """Collect once, then keep every object alive now out of later collections.

    Call it when what the process holds is there to stay: after start-up, after
    making or activating a batch of sessions.  Returns how many objects are frozen
    in all (``gc.get_freeze_count()``).  Sessions frozen this way and closed later
    free their memory by reference counting, except what forms cycles: call
    ``thaw_held`` after closing many of them."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def thaw_held() -> int:
    """Give every frozen object back to the collector (into its oldest generation);
    returns how many there were.  The next full collection frees the cycles among
    them that died while frozen."""
    count = gc.get_freeze_count()
    gc.unfreeze()
    return count
