"""The shared rate limiter's overhead per model call, with and without it, in one run.

Rules: the limits are set so high that no call ever waits, so every microsecond
measured is the limiter's bookkeeping, not its pacing.  Two levels:

* ``retries``: ``retries.with_retries`` around an attempt that yields one usage and one
  stop delta and does no I/O: the cost the limiter adds to the adapters' shared path,
  undiluted (requests only; requests and tokens, which estimates the request's tokens
  from its encoded body);
* ``anthropic``: whole ``AnthropicModel`` calls through the real SDK to the local SSE
  server the adapter tests use (``tests/support/sse_server.py``), over loopback: the
  overhead beside what a call costs before any provider answers.

Variants run interleaved, round after round, each round starting with the next one, and
each reports its median round, so a slow patch of the machine falls on all of them alike.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

import trio

from journal.content import Message, Text, Usage
from loopruntime.model import Delta, ModelRequest, StopDelta, UsageDelta
from loopruntime.models import RateLimit
from loopruntime.models.anthropic import AnthropicModel, request_params
from loopruntime.models.limiter import RateLimiter, estimate_tokens
from loopruntime.models.retries import Attempt, with_retries

from .harness import Progress, quiet_logs, stderr_progress
from .report import limiter_section

__all__ = ["run"]

DEFAULT_CALLS, QUICK_CALLS = 20_000, 2_000
"""Calls per round of the ``retries`` level."""
DEFAULT_HTTP_CALLS, QUICK_HTTP_CALLS = 300, 40
"""Calls per round of the ``anthropic`` level."""
ROUNDS = 6
HUGE = 10**12
"""A limit no run reaches: nothing waits."""

VARIANTS: tuple[tuple[str, RateLimit | None], ...] = (
    ("none", None),
    ("requests", RateLimit(requests_per_minute=HUGE)),
    ("requests+tokens", RateLimit(requests_per_minute=HUGE, tokens_per_minute=HUGE)),
)

_REQUEST = ModelRequest(
    system="You are a careful assistant. " * 20,
    messages=tuple(
        Message(role="user" if i % 2 == 0 else "assistant", blocks=(Text(text="word " * 200),))
        for i in range(9)
    ),
)
"""A mid-sized conversation (~9 KiB): what the token estimate encodes."""
_REPLY: tuple[Delta, ...] = (
    UsageDelta(usage=Usage(input_tokens=2_300, output_tokens=12)),
    StopDelta(stop_reason="end_turn"),
)


async def _bare_attempt(attempt: Attempt) -> AsyncGenerator[Delta, None]:
    for delta in _REPLY:
        yield delta


class _Log:
    def info(self, *args: Any, **kwargs: Any) -> None:
        pass


async def _retries_round(limit: RateLimit | None, calls: int) -> float:
    limiter = None if limit is None else RateLimiter("bench", "m", limit)
    params = request_params(_REQUEST, model="m", max_tokens=None, thinking=None, prompt_cache=True)
    start = time.perf_counter()
    for _ in range(calls):
        counted = limiter is not None and limiter.counts_tokens
        tokens = estimate_tokens(params, params["max_tokens"]) if counted else 0
        deltas = with_retries(
            _bare_attempt,
            model="bench:m",
            max_retries=2,
            max_retry_wait=60.0,
            log=_Log(),
            limiter=limiter,
            tokens=tokens,
        )
        async for _ in deltas:
            pass
    return (time.perf_counter() - start) / calls


async def _anthropic_round(limit: RateLimit | None, calls: int, model_name: str) -> float:
    from tests.models.test_anthropic import KEY, text_reply
    from tests.support.sse_server import open_sse_server

    async with open_sse_server([text_reply("ok") for _ in range(calls)]) as server:
        # A model name per variant and round: each gets a limiter of its own.
        async with AnthropicModel(
            model_name, api_key=KEY, base_url=server.url, rate_limit=limit
        ) as model:
            start = time.perf_counter()
            for _ in range(calls):
                async with model.stream(_REQUEST) as deltas:
                    async for _ in deltas:
                        pass
            return (time.perf_counter() - start) / calls


def _interleaved(
    measure: Callable[[str, RateLimit | None, int], Awaitable[float]],
    rounds: int,
    progress: Progress,
) -> dict[str, list[float]]:
    """Seconds per call of each variant in each round, rounds interleaved."""
    seen: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    for index in range(rounds):
        # Each round starts with another variant: whatever the first run of a
        # round pays (a cold cache, a new server) falls on each in turn.
        shift = index % len(VARIANTS)
        for name, limit in VARIANTS[shift:] + VARIANTS[:shift]:
            seen[name].append(trio.run(measure, name, limit, index))
        progress(f"round {index + 1}/{rounds}")
    return seen


def _rows(level: str, rounds: dict[str, list[float]], calls: int) -> list[dict[str, Any]]:
    base, best_base = statistics.median(rounds["none"]), min(rounds["none"])
    return [
        {
            "level": level,
            "limiter": name,
            "calls": calls,
            "rounds": len(values),
            "seconds_per_call": statistics.median(values),
            "overhead_seconds": statistics.median(values) - base,
            "best_seconds_per_call": min(values),
            "best_overhead_seconds": min(values) - best_base,
        }
        for name, values in rounds.items()
    ]


def run(
    *,
    quick: bool = False,
    calls: int | None = None,
    http_calls: int | None = None,
    rounds: int = ROUNDS,
    progress: Progress = stderr_progress,
) -> list[dict[str, Any]]:
    """One row per level and variant; ``overhead_seconds`` is against ``none``."""
    calls = calls or (QUICK_CALLS if quick else DEFAULT_CALLS)
    http_calls = http_calls or (QUICK_HTTP_CALLS if quick else DEFAULT_HTTP_CALLS)
    # The adapter logs each call at info; nothing of it belongs in the timing.
    logging.getLogger("loopruntime.models.anthropic").setLevel(logging.WARNING)

    async def bare(name: str, limit: RateLimit | None, index: int) -> float:
        return await _retries_round(limit, calls)

    async def http(name: str, limit: RateLimit | None, index: int) -> float:
        return await _anthropic_round(limit, http_calls, f"bench-{name}-{index}")

    progress(f"with_retries alone, {calls:,} calls a round")
    rows = _rows("retries", _interleaved(bare, rounds, progress), calls)
    progress(f"AnthropicModel over loopback, {http_calls} calls a round")
    rows += _rows("anthropic", _interleaved(http, rounds, progress), http_calls)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limiter", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls a round")
    args = parser.parse_args(argv)
    quiet_logs()
    print("\n".join(limiter_section(run(quick=args.quick))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
