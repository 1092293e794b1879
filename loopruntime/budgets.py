"""Token budgets: what a loop has left to spend, and what a turn that reached
a budget commits.

The spend is the fold of the journal (``LoopState.tokens_used``,
``children_tokens``, ``turn_tokens``; ``state.tokens_of`` says which of a
call's tokens count), never a counter beside it, so a restored loop has
spent exactly what its records say.  A budget is checked before each model
call and when a delegate's child starts: the call that crosses it completes,
so a turn ends over its budget by at most that one call's tokens.

A delegate's child draws from its parent: it may spend in all what remained
of its parent's budgets when it started (``Provenance.token_allowance``),
and what it spent counts toward its parent's session and, when it finishes
within the turn that started it, that turn.
"""

from __future__ import annotations

from collections.abc import Callable

from journal.events import Event, Notice, SteerApplied, SteerQueued

from .ids import new_id
from .limits import Limits
from .notices import BUDGET_EXHAUSTED, budget_exhausted
from .state import LoopState

__all__ = ["budget_notice", "exhausted", "remaining", "tokens_spent"]


def tokens_spent(state: LoopState) -> int:
    """Tokens the loop and its finished children spent: what its parent counts."""
    return state.tokens_used + state.children_tokens


def remaining(limits: Limits, state: LoopState, session_tokens: int) -> int | None:
    """Tokens the loop may still spend (at most 0 once a budget is reached)
    under ``limits``, its parent's allowance and the session's spend
    ``session_tokens``; None: no budget bounds it."""
    bounds: list[int] = []
    if limits.max_turn_tokens is not None:
        bounds.append(limits.max_turn_tokens - state.turn_tokens)
    if limits.max_session_tokens is not None:
        bounds.append(limits.max_session_tokens - session_tokens)
    allowance = state.parent.token_allowance if state.parent is not None else None
    if allowance is not None:
        bounds.append(allowance - tokens_spent(state))
    return min(bounds) if bounds else None


def exhausted(limits: Limits, state: LoopState, session_tokens: Callable[[], int]) -> str | None:
    """Which budget the loop has reached, in words (None: none).
    ``session_tokens`` sums every loop's spend, so it is asked only when a
    session budget is set: this runs before every model call."""
    turn, session = limits.max_turn_tokens, limits.max_session_tokens
    if turn is not None and state.turn_tokens >= turn:
        return (
            f"this turn spent {state.turn_tokens} tokens of its budget of {turn} "
            "(Limits.max_turn_tokens)"
        )
    if session is not None and (spent := session_tokens()) >= session:
        return (
            f"the session spent {spent} tokens of its budget of {session} "
            "(Limits.max_session_tokens)"
        )
    allowance = state.parent.token_allowance if state.parent is not None else None
    if allowance is not None and tokens_spent(state) >= allowance:
        return (
            f"this child loop spent {tokens_spent(state)} tokens of the {allowance} "
            "its parent had left when it started"
        )
    return None


def budget_notice(detail: str) -> list[Event]:
    """The records that tell of a turn ended by a budget, before its
    ``turn.ended``: a notice for readers, and the same words as steering,
    so the model reads them with its next turn's input (a user message: the
    context stays a valid transcript whatever it ended with)."""
    text = budget_exhausted(detail)
    steer_id = new_id("steer_")
    return [
        Notice(code=BUDGET_EXHAUSTED, text=text),
        SteerQueued(steer_id=steer_id, text=text),
        SteerApplied(steer_ids=(steer_id,)),
    ]
