"""The shared rate limiter: pacing, fairness, token correction, a 429
pausing every loop, the status of a waiting loop, and bad limits.

Time is trio's ``autojump_clock``: a limiter's pacing is read in virtual
seconds.  The 429 tests use the real SDKs against the local SSE server.
"""

from __future__ import annotations

import argparse

import pytest
import trio
import trio.testing

from journal import open_journal
from loopruntime import LoopDefinition, LoopStatus
from loopruntime.models import (
    LimiterStatistics,
    OpenAIModel,
    RateLimit,
    RateLimiter,
    RateLimitError,
    limiters,
    use_default_rate_limit,
    waiting_of,
)
from loopruntime.models.anthropic import AnthropicModel
from loopruntime.models.limiter import limiter_for, waiting_as
from session import Client, Host, Session
from session.embedded.status import Status, describe
from tests.host.support import trio_clock_journal, wait_for
from tests.models import test_anthropic as claude
from tests.models import test_openai as gpt
from tests.support.sse_server import Status as HttpStatus
from tests.support.sse_server import open_sse_server

# -- pacing and fairness --------------------------------------------------------


async def test_loops_sharing_a_limiter_are_paced_to_its_rate(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = RateLimiter("anthropic", "m", RateLimit(requests_per_minute=6))
    admitted: list[float] = []

    async def loop() -> None:
        for _ in range(4):
            await limiter.admit()
            admitted.append(trio.current_time())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(loop)
    offsets = [round(t - start, 6) for t in admitted]
    # A minute's worth (6) at once, then one every 10 s, whoever asks.
    assert offsets == [0.0] * 6 + [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    stats = limiter.statistics()
    assert (stats.admitted, stats.waited, stats.waiting) == (12, 6, 0)
    # Each loop takes two at once; the third asks waited 10, 20 and 30 s, and
    # each fourth, asked as its third came in, 30 s more.
    assert stats.wait_seconds == pytest.approx(10 + 20 + 30 + 3 * 30)


async def test_calls_are_admitted_in_the_order_they_asked(autojump_clock: trio.abc.Clock) -> None:
    limiter = RateLimiter("openai", "m", RateLimit(requests_per_minute=60))
    order: list[str] = []

    async def loop(name: str, calls: int) -> None:
        for _ in range(calls):
            await limiter.admit()
            order.append(name)

    # "greedy" asks first and often; the others still get every other turn.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop, "greedy", 70)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(loop, "a", 5)
        nursery.start_soon(loop, "b", 5)
    after_burst = order[60:]
    # Once the bucket is empty, the line goes round: nobody is starved.
    rounds = [sorted(after_burst[i : i + 3]) for i in range(0, 15, 3)]
    assert rounds == [["a", "b", "greedy"]] * 5
    assert order[:60] == ["greedy"] * 60


async def test_tokens_are_corrected_from_the_reported_usage(autojump_clock: trio.abc.Clock) -> None:
    limiter = RateLimiter("anthropic", "m", RateLimit(tokens_per_minute=1000))
    first = await limiter.admit(600)
    first.settle(100)  # it used far less than estimated: the rest comes back
    start = trio.current_time()
    second = await limiter.admit(600)
    assert trio.current_time() == start
    second.settle(1500)  # and far more: the next call waits for the overdraft
    await limiter.admit(600)
    # Level was 1000 - 100 - 1500 = -600; 600 more needs 1200 tokens at 1000/min.
    assert trio.current_time() - start == pytest.approx(72.0)
    stats = limiter.statistics()
    assert (stats.tokens_estimated, stats.tokens_reported) == (1800, 1600)


async def test_a_call_larger_than_the_bucket_waits_for_a_full_one(
    autojump_clock: trio.abc.Clock,
) -> None:
    limiter = RateLimiter("anthropic", "m", RateLimit(tokens_per_minute=100))
    (await limiter.admit(100)).settle(100)
    start = trio.current_time()
    await limiter.admit(10_000)
    assert trio.current_time() - start == pytest.approx(60.0)


async def test_a_cancelled_wait_takes_nothing(autojump_clock: trio.abc.Clock) -> None:
    limiter = RateLimiter("anthropic", "m", RateLimit(requests_per_minute=1))
    await limiter.admit()
    with trio.move_on_after(5):
        with waiting_as("loop-a"):
            await limiter.admit()
    assert limiter.statistics().waiting == 0
    assert limiter.waiting() == {}
    start = trio.current_time()
    await limiter.admit()
    assert trio.current_time() - start == pytest.approx(55.0)


async def test_one_limiter_per_run_and_model(autojump_clock: trio.abc.Clock) -> None:
    limit = RateLimit(requests_per_minute=10)
    one = limiter_for("anthropic", "m", limit)
    assert one is not None
    assert limiter_for("anthropic", "m", None) is one
    assert limiter_for("anthropic", "m", RateLimit(requests_per_minute=10)) is one
    assert limiter_for("openai", "m", None) is None
    use_default_rate_limit(RateLimit(requests_per_minute=3))
    other = limiter_for("openai", "m", None)
    assert other is not None and other.limit.requests_per_minute == 3
    assert limiters() == [one, other]
    with pytest.raises(Exception) as caught:
        limiter_for("anthropic", "m", RateLimit(requests_per_minute=20))
    assert getattr(caught.value, "code", None) == "model.rate_limit_conflict"
    assert "10 requests per minute" in str(caught.value)


# -- a provider's 429 ---------------------------------------------------------


async def test_a_429_from_anthropic_pauses_every_loop_sharing_the_limiter(
    autojump_clock: trio.abc.Clock,
) -> None:
    replies = [
        HttpStatus(429, "rate_limit_error", "slow down", headers=[("retry-after", "5")]),
        claude.text_reply("one"),
        claude.text_reply("two"),
    ]
    limit = RateLimit(requests_per_minute=600)
    async with open_sse_server(replies) as server:
        first = AnthropicModel(
            claude.MODEL, api_key=claude.KEY, base_url=server.url, rate_limit=limit
        )
        other = AnthropicModel(
            claude.MODEL, api_key=claude.KEY, base_url=server.url, rate_limit=limit
        )
        async with first, other, trio.open_nursery() as nursery:
            nursery.start_soon(claude.collect, first)
            # The other loop asks only once the 429 has paused the limiter.
            while not limiters() or not limiters()[0].statistics().slowdowns:
                await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(claude.collect, other)
    told, *after = server.requests
    assert len(after) == 2
    # Neither loop sent anything before the 5 s the provider asked for.
    assert all(r.at - told.at >= 5.0 for r in after)
    stats = limiters()[0].statistics()
    assert (stats.slowdowns, stats.admitted) == (1, 3)
    assert stats.waited == 2


async def test_a_429_from_an_openai_server_pauses_every_loop(
    autojump_clock: trio.abc.Clock,
) -> None:
    replies = [
        HttpStatus(429, "requests", "Rate limit reached", headers=[("retry-after", "7")]),
        gpt.text_reply("one"),
        gpt.text_reply("two"),
    ]
    limit = RateLimit(requests_per_minute=600)
    async with open_sse_server(replies) as server:
        first = OpenAIModel(gpt.MODEL, api_key=gpt.KEY, base_url=server.url, rate_limit=limit)
        other = OpenAIModel(gpt.MODEL, api_key=gpt.KEY, base_url=server.url, rate_limit=limit)
        async with first, other, trio.open_nursery() as nursery:
            nursery.start_soon(gpt.collect, first)
            while not limiters() or not limiters()[0].statistics().slowdowns:
                await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(gpt.collect, other)
    told, *after = server.requests
    assert len(after) == 2
    assert all(r.at - told.at >= 7.0 for r in after)
    assert limiters()[0].statistics().slowdowns == 1


async def test_usage_the_provider_reports_settles_the_estimate(
    autojump_clock: trio.abc.Clock,
) -> None:
    limit = RateLimit(tokens_per_minute=100_000)
    async with claude.serve([claude.text_reply("ok")], rate_limit=limit) as (_, model):
        await claude.collect(model)
    stats = limiters()[0].statistics()
    # message_start reports 25 input tokens, message_delta 12 output tokens.
    assert stats.tokens_reported == 37
    assert stats.tokens_estimated > stats.tokens_reported


# -- a waiting loop's status --------------------------------------------------


async def test_a_loop_waiting_for_the_limit_shows_so_in_its_status(
    autojump_clock: trio.abc.Clock,
) -> None:
    replies = [claude.text_reply("first"), claude.text_reply("second")]
    async with open_sse_server(replies) as server:
        model = AnthropicModel(
            claude.MODEL,
            api_key=claude.KEY,
            base_url=server.url,
            rate_limit=RateLimit(requests_per_minute=1),
        )
        definition = LoopDefinition(name="claude", model=model, system="Be brief.")
        async with model, open_journal("memory:") as journal:
            async with Session.create(journal, definition) as session:
                await session.submit("one")
                await session.wait_idle()
                assert session.rate_limited() == {}
                await session.submit("two")
                limiter = limiters()[0]
                while not limiter.statistics().waiting:
                    await trio.testing.wait_all_tasks_blocked()
                started = trio.current_time()
                (loop_id,) = session.loops
                waits = session.rate_limited()
                assert list(waits) == [loop_id]
                assert waits[loop_id].limiter == f"anthropic:{claude.MODEL}"
                assert waiting_of(id(session.loops[loop_id])) == waits[loop_id]
                (info,) = await journal.sessions()
                states = {loop_id: await session.snapshot()}
                assert states[loop_id].status is LoopStatus.RUNNING
                shown = describe(info, states, rate_limited=waits)
                assert shown.status is Status.RATE_LIMITED
                assert f"anthropic:{claude.MODEL}" in shown.detail
                # Without the live view, the same session reads as running.
                assert describe(info, states).status is not Status.RATE_LIMITED
                await session.wait_idle()
                # The wait counted against no deadline and ended at the minute.
                assert trio.current_time() - started <= 60.0 + 1e-6  # float rounding of clock sums
                assert session.rate_limited() == {}
    assert len(server.requests) == 2
    assert server.requests[1].at - server.requests[0].at == pytest.approx(60.0, abs=2.0)


async def test_the_wait_counts_against_no_first_token_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    from loopruntime import Limits

    replies = [claude.text_reply("first"), claude.text_reply("second")]
    async with open_sse_server(replies) as server:
        model = AnthropicModel(
            claude.MODEL,
            api_key=claude.KEY,
            base_url=server.url,
            rate_limit=RateLimit(requests_per_minute=1),
        )
        definition = LoopDefinition(
            name="claude",
            model=model,
            system="Be brief.",
            limits=Limits(model_first_token_timeout=10.0),
        )
        async with model, open_journal("memory:") as journal:
            async with Session.create(journal, definition) as session:
                await session.submit("one")
                await session.wait_idle()
                await session.submit("two")
                await session.wait_idle()
                snapshot = await session.snapshot()
    # Both calls answered, the second after a 60 s wait the 10 s deadline never saw.
    assert len(server.requests) == 2
    assert snapshot.status is LoopStatus.IDLE
    assert server.requests[1].at - server.requests[0].at == pytest.approx(60.0, abs=2.0)


# -- bad input ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("requests_per_minute", 0),
        ("requests_per_minute", -5),
        ("tokens_per_minute", 0),
        ("tokens_per_minute", 1.5),
        ("tokens_per_minute", "1000"),
        ("requests_per_minute", True),
    ],
)
def test_a_bad_limit_is_a_named_error(field: str, value: object) -> None:
    with pytest.raises(RateLimitError) as caught:
        RateLimit(**{field: value})  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.value) == (field, value)
    assert caught.value.code == "model.rate_limit_invalid"
    assert field in str(caught.value) and repr(value) in str(caught.value)


def test_a_rate_limit_that_is_no_rate_limit_is_refused_by_each_model() -> None:
    with pytest.raises(RateLimitError, match="rate_limit must be a RateLimit"):
        AnthropicModel("m", api_key="k", rate_limit=60)  # type: ignore[arg-type]
    with pytest.raises(RateLimitError, match="rate_limit must be a RateLimit"):
        OpenAIModel("m", api_key="k", rate_limit={"requests_per_minute": 60})  # type: ignore[arg-type]


async def test_a_default_that_is_no_rate_limit_is_refused() -> None:
    with pytest.raises(RateLimitError):
        use_default_rate_limit(10)  # type: ignore[arg-type]


def test_the_host_options_make_the_run_default() -> None:
    from session.cli.hosting import rate_limit_of

    both = argparse.Namespace(requests_per_minute=50, tokens_per_minute=40_000)
    assert rate_limit_of(both) == RateLimit(requests_per_minute=50, tokens_per_minute=40_000)
    assert (
        rate_limit_of(argparse.Namespace(requests_per_minute=None, tokens_per_minute=None)) is None
    )


async def test_the_runs_default_limits_a_model_that_sets_none(
    autojump_clock: trio.abc.Clock,
) -> None:
    # What `loopruntime host --requests-per-minute 1` does for its definitions' models.
    use_default_rate_limit(RateLimit(requests_per_minute=1))
    replies = [claude.text_reply("one"), claude.text_reply("two")]
    async with claude.serve(replies) as (server, model):
        assert model.rate_limit is None
        await claude.collect(model)
        await claude.collect(model)
    first, second = server.requests
    assert second.at - first.at == pytest.approx(60.0)
    assert limiters()[0].statistics().requests_per_minute == 1


async def _two_sessions_through_a_host(
    host_limit: RateLimit, model_limit: RateLimit | None
) -> LimiterStatistics:
    """Two sessions of a host with ``rate_limit=host_limit`` each send one
    model call; what the run's one limiter counted."""
    replies = [claude.text_reply("one"), claude.text_reply("two")]
    journal = trio_clock_journal()
    client = Client(journal)
    async with open_sse_server(replies) as server:
        async with AnthropicModel(
            claude.MODEL, api_key=claude.KEY, base_url=server.url, rate_limit=model_limit
        ) as model:
            chat = LoopDefinition(name="chat", model=model)
            async with Host.open(journal, {"chat": chat}, host_id="h", rate_limit=host_limit):
                for n in range(2):
                    sid = await client.create("chat", key=f"c{n}")
                    await client.submit(sid, "hi", key=f"s{n}")
                await wait_for(lambda: len(server.requests) == 2)
    [limiter] = limiters()
    return limiter.statistics()


async def test_a_hosts_rate_limit_limits_the_models_that_set_none(
    autojump_clock: trio.abc.Clock,
) -> None:
    # What `loopruntime host --requests-per-minute 1` passes to its Host: the
    # second call waits for the minute's one request to come back.
    stats = await _two_sessions_through_a_host(RateLimit(requests_per_minute=1), None)
    assert (stats.requests_per_minute, stats.admitted, stats.waited) == (1, 2, 1)
    assert stats.wait_seconds > 30


async def test_a_models_own_rate_limit_wins_over_its_hosts(
    autojump_clock: trio.abc.Clock,
) -> None:
    own = RateLimit(requests_per_minute=60)
    stats = await _two_sessions_through_a_host(RateLimit(requests_per_minute=1), own)
    assert (stats.requests_per_minute, stats.admitted, stats.waited) == (60, 2, 0)


def test_a_hosts_rate_limit_that_is_no_rate_limit_is_refused() -> None:
    with pytest.raises(RateLimitError) as caught:
        Host(trio_clock_journal(), {}, rate_limit=60)  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.value) == ("rate_limit", 60)
    assert "RateLimit(requests_per_minute=" in str(caught.value)
