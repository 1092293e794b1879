"""Attempts and retries of one model call, the same for every provider.

Rules (docs/models.md tells the story): a call is retried only while nothing
was yielded to the caller; a wait honours the provider's ``retry-after-ms`` /
``retry-after`` and is never longer than ``max_retry_wait``; otherwise the
backoff doubles from 0.5 s to 8 s with jitter; waits use ``trio.sleep``.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from typing import Any, Final

import trio

from loopruntime.errors import ModelError, ModelErrorKind
from loopruntime.model import Delta, UsageDelta

from .limiter import RateLimiter, Ticket

__all__ = [
    "Attempt",
    "after_output",
    "attempt_error",
    "retry_after_seconds",
    "retry_delay",
    "with_retries",
]

# Backoff when the API gives no retry-after: 0.5 s doubling to at most 8 s,
# shortened by up to a quarter at random so parallel loops do not retry in step.
_INITIAL_BACKOFF: Final = 0.5
_MAX_BACKOFF: Final = 8.0


class Attempt:
    """Progress of one call across its attempts (mutable, private)."""

    __slots__ = ("number", "output_started")

    def __init__(self) -> None:
        self.number = 0
        self.output_started = False


def retry_delay(
    err: ModelError, attempt: Attempt, *, max_retries: int, max_retry_wait: float
) -> float | None:
    """Seconds to wait before the next attempt, or None to give up."""
    # An error after output already says retryable=False; checking
    # output_started here too keeps the rule in the one place that decides.
    if attempt.output_started or not err.retryable or attempt.number > max_retries:
        return None
    if err.retry_after is not None:
        if err.retry_after > max_retry_wait:
            return None
        return max(err.retry_after, 0.0)
    backoff = min(_INITIAL_BACKOFF * 2 ** (attempt.number - 1), _MAX_BACKOFF)
    return backoff * (1 - 0.25 * random.random())


async def with_retries(
    attempt_once: Callable[[Attempt], AsyncGenerator[Delta, None]],
    *,
    model: str,
    max_retries: int,
    max_retry_wait: float,
    log: Any,
    limiter: RateLimiter | None = None,
    tokens: int = 0,
) -> AsyncGenerator[Delta, None]:
    """All attempts of one call: ``attempt_once`` is one HTTP request, raising
    ``ModelError`` only.  A failed attempt is retried only if it yielded
    nothing, after ``retry_delay``; ``model`` names the model in the log.

    With a ``limiter``, every attempt is admitted by it first (``tokens``:
    the call's estimate), and settled with the usage the attempt reported;
    a 429 pauses the limiter for the wait it asks (every loop sharing the
    limiter waits), and the retry waits in the limiter's line."""
    attempt = Attempt()
    while True:
        attempt.number += 1
        ticket: Ticket | None = None
        used: tuple[int, int] | None = None
        try:
            if limiter is not None:
                ticket = await limiter.admit(tokens)
            async with aclosing(attempt_once(attempt)) as deltas:
                async for delta in deltas:
                    if type(delta) is UsageDelta:
                        used = _reported(delta, used)
                    attempt.output_started = True
                    yield delta
            return
        except ModelError as err:
            delay = retry_delay(
                err, attempt, max_retries=max_retries, max_retry_wait=max_retry_wait
            )
            if limiter is not None and err.error_kind == "rate_limited":
                pause = err.retry_after if err.retry_after is not None else delay
                if pause is not None:
                    limiter.slow_down(pause)
                    log.info("model_rate_limit_paused", model=model, seconds=round(pause, 3))
                if delay is not None:
                    # The limiter's pause is the wait: the retry queues behind
                    # the loops already in line rather than sleeping beside them.
                    delay = 0.0
            if delay is None:
                raise
            log.info(
                "model_retry",
                model=model,
                kind=err.error_kind,
                status=err.status,
                attempt=attempt.number,
                delay=round(delay, 3),
            )
            if delay:
                await trio.sleep(delay)
        finally:
            if ticket is not None:
                ticket.settle(None if used is None else sum(used))


def _reported(delta: UsageDelta, before: tuple[int, int] | None) -> tuple[int, int]:
    """(input, output) tokens so far: a non-zero field replaces the earlier
    value, as ``UsageDelta`` says."""
    usage = delta.usage
    old_in, old_out = before or (0, 0)
    return (usage.input_tokens or old_in, usage.output_tokens or old_out)


def attempt_error(
    message: str,
    *,
    kind: ModelErrorKind,
    retryable: bool,
    attempt: Attempt,
    retry_after: float | None = None,
    status: int | None = None,
    code: str | None = None,
) -> ModelError:
    """A ``ModelError`` of this attempt, never retryable once output began."""
    return ModelError(
        message,
        kind=kind,
        code=code,
        # Never retryable once output was yielded: resending would repeat it.
        retryable=retryable and not attempt.output_started,
        retry_after=retry_after,
        status=status,
    )


def after_output(attempt: Attempt) -> str:
    """The words an error message adds when part of the reply had arrived."""
    if not attempt.output_started:
        return ""
    return (
        " after part of the reply had arrived; the reply is incomplete and was not resent, "
        "because resending would repeat output already delivered"
    )


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds a response asks us to wait: ``retry-after-ms``, else
    ``retry-after`` as seconds or as an HTTP date; None when absent or unreadable."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw) * scale
        except ValueError:
            continue
        # "nan" and "inf" parse as floats but are no wait anyone can keep.
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    raw = headers.get("retry-after")
    if raw:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        return max(when.timestamp() - time.time(), 0.0)
    return None
