"""Shared rate limits: one limiter per trio run and (provider, model).

Rules (docs/models.md, "Shared rate limits", tells the story):

* a ``RateLimit`` is checked when made; a bad value is a ``RateLimitError``;
* every loop of a run that calls the same provider's model draws from one
  limiter: two token buckets (requests, tokens per minute) that hold a
  minute's worth and refill evenly;
* requests are admitted in the order they asked (a ``trio.Lock``, which is
  fair): the first in line waits for the buckets, the rest wait behind it,
  so no loop is starved by others arriving later;
* tokens are estimated before the call and corrected from the usage the
  provider reports (``Ticket.settle``); a request larger than a bucket
  waits for a full bucket, never forever;
* a provider's 429 pauses the whole limiter (``slow_down``), so every loop
  sharing it waits, not only the one that was told;
* the wait counts against no deadline of the waiting task, as a wait on a
  person does (``deadlines.paused``): a queue of our own making is not the
  provider being slow;
* who waits is known while they wait (``waiting_of``), cheaply: a dict entry
  per waiting call, nothing journaled.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

import msgspec
import trio

from loopruntime import deadlines
from loopruntime.errors import LoopError, ModelError

__all__ = [
    "LimiterStatistics",
    "RateLimit",
    "RateLimitError",
    "RateLimiter",
    "Ticket",
    "Waiting",
    "checked_rate_limit",
    "estimate_tokens",
    "limiter_for",
    "limiters",
    "use_default_rate_limit",
    "wait_on_behalf_of",
    "waiting_as",
    "waiting_of",
]

_MINUTE: Final = 60.0


class RateLimitError(LoopError, ValueError):
    """A rate limit that cannot be kept: not a whole number, zero or negative.

    ``field`` names the setting, ``value`` is what was given.  Also a
    ``ValueError``, so code that guards construction the usual way keeps
    working."""

    kind = "model"
    code = "model.rate_limit_invalid"

    def __init__(self, field: str, value: object, *, expected: str | None = None) -> None:
        wanted = expected or "a whole number of 1 or more per minute, or None (no limit)"
        super().__init__(
            f"rate limit {field} must be {wanted}, not {type(value).__name__} {value!r}"
        )
        self.field = field
        self.value = value


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    """A provider's budget per minute for one model: ``requests_per_minute``
    and ``tokens_per_minute`` (input plus output as the provider reports
    them); None leaves that one unbounded.  Checked when made."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    def __post_init__(self) -> None:
        for field in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RateLimitError(field, value)


class LimiterStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What one limiter has done since its run began (a snapshot)."""

    provider: str
    model: str
    requests_per_minute: int | None
    tokens_per_minute: int | None
    admitted: int
    """Calls let through (each attempt of a retried call counts)."""
    waited: int
    """Admitted calls that had to wait."""
    waiting: int
    """Calls waiting now."""
    wait_seconds: float
    """Total seconds admitted calls spent waiting."""
    tokens_estimated: int
    """Tokens taken from the bucket before the calls."""
    tokens_reported: int
    """Tokens the provider reported for settled calls."""
    slowdowns: int
    """Times a provider's 429 paused the limiter."""
    paused_until: float
    """trio time before which nothing is admitted (0: no pause ever)."""


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """One call waiting for a limiter."""

    limiter: str
    """``provider:model``."""
    since: float
    """trio time the call began to wait."""


class _Bucket:
    """``capacity`` units refilling at ``capacity`` per minute; its level may
    go below zero when a settled call used more than was taken."""

    __slots__ = ("capacity", "level", "rate", "stamp")

    def __init__(self, capacity: int, now: float) -> None:
        self.capacity = capacity
        self.rate = capacity / _MINUTE
        self.level = float(capacity)
        self.stamp = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def ready_at(self, amount: int, now: float) -> float:
        need = min(amount, self.capacity) - self.level
        return now if need <= 0 else now + need / self.rate


class Ticket:
    """One admitted call: ``settle`` it with the usage the provider reported."""

    __slots__ = ("_limiter", "estimate", "settled")

    def __init__(self, limiter: RateLimiter, estimate: int) -> None:
        self._limiter = limiter
        self.estimate = estimate
        self.settled = False

    def settle(self, used: int | None) -> None:
        """Correct the token bucket by what the call really used (None: the
        provider reported nothing, the estimate stands).  Idempotent."""
        if self.settled:
            return
        self.settled = True
        self._limiter._settle(self.estimate, used)


_waiter: ContextVar[Hashable | None] = ContextVar("loopruntime_rate_waiter", default=None)
"""Who the running task's model calls wait on behalf of: a key that holds
nothing alive (a loop's ``id()``), since a task's context outlives the loop
it last worked for and must not keep it, and its session, from being freed."""


@contextmanager
def waiting_as(who: Hashable) -> Iterator[None]:
    """The model calls made in the block wait for a limiter on behalf of
    ``who``: ``waiting_of(who)`` names the limiter while they do."""
    token = _waiter.set(who)
    try:
        yield
    finally:
        _waiter.reset(token)


def wait_on_behalf_of(who: Hashable) -> None:
    """From now on, the running task's model calls wait on behalf of ``who``
    (for a task that works for one loop only; child tasks inherit it).  A
    key that keeps nothing alive: a loop passes its ``id()``."""
    _waiter.set(who)


class RateLimiter:
    """The limiter of one (provider, model) in one trio run.  Made by
    ``limiter_for``; safe to share between every task of the run."""

    def __init__(self, provider: str, model: str, limit: RateLimit) -> None:
        self.provider = provider
        self.model = model
        self.limit = limit
        now = trio.current_time()
        rpm, tpm = limit.requests_per_minute, limit.tokens_per_minute
        self._requests = _Bucket(rpm, now) if rpm is not None else None
        self._tokens = _Bucket(tpm, now) if tpm is not None else None
        self._line = trio.Lock()  # fair: waiters are admitted first come, first served
        self._paused_until = 0.0
        self._waiting: dict[Hashable, Waiting] = {}
        self._queued = 0
        self._admitted = self._waited = self._slowdowns = 0
        self._wait_seconds = 0.0
        self._estimated = self._reported = 0

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def counts_tokens(self) -> bool:
        """Whether calls must estimate their tokens (a token budget is set)."""
        return self._tokens is not None

    def _ready_at(self, tokens: int, now: float) -> float:
        ready = max(now, self._paused_until)
        for bucket, amount in ((self._requests, 1), (self._tokens, tokens)):
            if bucket is not None:
                bucket.refill(now)
                ready = max(ready, bucket.ready_at(amount, now))
        return ready

    async def admit(self, tokens: int = 0) -> Ticket:
        """Wait until the call may be sent, in the order calls asked; take one
        request and ``tokens`` (the estimate) from the buckets.  A checkpoint.
        Cancelled while waiting, it takes nothing."""
        await trio.lowlevel.checkpoint()
        now = start = trio.current_time()
        if not self._queued and self._ready_at(tokens, now) <= now:
            # The common case: nobody in line and room in the buckets.
            return self._take(tokens, waited=0.0)
        who = _waiter.get()
        if who is not None:
            self._waiting[who] = Waiting(limiter=self.name, since=start)
        self._queued += 1
        try:
            # The wait is the limiter's, not the provider's: no deadline counts it.
            with deadlines.paused():
                async with self._line:
                    now = trio.current_time()
                    # A 429 that arrives meanwhile pushes the pause further: look again.
                    while (ready := self._ready_at(tokens, now)) > now:
                        await trio.sleep_until(ready)
                        now = trio.current_time()
                    return self._take(tokens, waited=now - start)
        finally:
            self._queued -= 1
            if who is not None:
                self._waiting.pop(who, None)

    def _take(self, tokens: int, *, waited: float) -> Ticket:
        if self._requests is not None:
            self._requests.level -= 1
        if self._tokens is not None:
            self._tokens.level -= tokens
            self._estimated += tokens
        self._admitted += 1
        if waited > 0:
            self._waited += 1
            self._wait_seconds += waited
        return Ticket(self, tokens if self._tokens is not None else 0)

    def _settle(self, estimate: int, used: int | None) -> None:
        if used is None or self._tokens is None:
            return
        self._reported += used
        self._tokens.refill(trio.current_time())
        self._tokens.level -= used - estimate

    def slow_down(self, seconds: float) -> None:
        """Admit nothing for ``seconds`` (a provider's 429 said so): every
        loop sharing the limiter waits, not only the one that was told."""
        until = trio.current_time() + max(seconds, 0.0)
        if until > self._paused_until:
            self._paused_until = until
        self._slowdowns += 1

    def waiting(self) -> Mapping[Hashable, Waiting]:
        """Who waits now (as ``waiting_as`` named them); a live view."""
        return self._waiting

    def statistics(self) -> LimiterStatistics:
        return LimiterStatistics(
            provider=self.provider,
            model=self.model,
            requests_per_minute=self.limit.requests_per_minute,
            tokens_per_minute=self.limit.tokens_per_minute,
            admitted=self._admitted,
            waited=self._waited,
            waiting=self._queued,
            wait_seconds=self._wait_seconds,
            tokens_estimated=self._estimated,
            tokens_reported=self._reported,
            slowdowns=self._slowdowns,
            paused_until=self._paused_until,
        )


class _Limiters:
    """The limiters of one trio run, and the limit of models that set none."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], RateLimiter] = {}
        self.default: RateLimit | None = None


_run_limiters: trio.lowlevel.RunVar[_Limiters] = trio.lowlevel.RunVar("loopruntime_limiters")


def _limiters() -> _Limiters:
    try:
        return _run_limiters.get()
    except LookupError:
        found = _Limiters()
        _run_limiters.set(found)
        return found


def checked_rate_limit(value: object) -> RateLimit | None:
    """``value`` as a ``rate_limit=`` argument: a ``RateLimit`` or None, else
    a ``RateLimitError`` (raised where the model or host is made)."""
    if value is None or isinstance(value, RateLimit):
        return value
    raise RateLimitError(
        "rate_limit", value, expected="a RateLimit(requests_per_minute=..., tokens_per_minute=...)"
    )


def use_default_rate_limit(limit: RateLimit | None) -> None:
    """The limit of this run's models that set none themselves (a host's
    ``rate_limit``); None: such models are not limited."""
    _limiters().default = checked_rate_limit(limit)


def limiter_for(provider: str, model: str, limit: RateLimit | None) -> RateLimiter | None:
    """The run's limiter of (``provider``, ``model``), made on first use with
    ``limit``, else with the run's default; None when neither is set.

    The first limit set for a key holds for the run: a model asking for a
    different one is a ``ModelError`` (code ``model.rate_limit_conflict``),
    because two budgets for one provider quota would each let through what
    the other also lets through."""
    limiters = _limiters()
    key = (provider, model)
    found = limiters.by_key.get(key)
    if found is not None:
        if limit is not None and limit != found.limit:
            raise ModelError(
                f"{provider}:{model} already has a rate limit in this process "
                f"({_words(found.limit)}); a model asking for {_words(limit)} conflicts: "
                "give every model of this provider and name the same rate_limit",
                kind="invalid_request",
                code="model.rate_limit_conflict",
            )
        return found
    chosen = limit if limit is not None else limiters.default
    if chosen is None:
        return None
    made = limiters.by_key[key] = RateLimiter(provider, model, chosen)
    return made


def limiters() -> list[RateLimiter]:
    """The limiters this trio run has made so far."""
    return list(_limiters().by_key.values())


def waiting_of(who: Hashable) -> Waiting | None:
    """The limiter ``who`` waits for now (None: it waits for none); a loop is
    ``who`` as ``id(loop)``."""
    for limiter in _limiters().by_key.values():
        found = limiter.waiting().get(who)
        if found is not None:
            return found
    return None


def _words(limit: RateLimit) -> str:
    parts = []
    if limit.requests_per_minute is not None:
        parts.append(f"{limit.requests_per_minute} requests")
    if limit.tokens_per_minute is not None:
        parts.append(f"{limit.tokens_per_minute} tokens")
    return (" and ".join(parts) or "no limit") + " per minute"


def estimate_tokens(params: Mapping[str, Any], max_tokens: int) -> int:
    """A call's tokens before it is sent: its encoded body at four bytes a
    token, plus the reply's ceiling (the provider's usage corrects it)."""
    body = msgspec.json.encode(params, enc_hook=str)
    return math.ceil(len(body) / 4) + max(max_tokens, 0)
