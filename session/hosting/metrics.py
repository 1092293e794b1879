"""A host's numbers for Prometheus, and its health checks.

``open_host_metrics`` registers a collector for one ``Host`` on a
``prometheus_client`` registry (the application's own, or a fresh one) and
runs, in the host's trio run, what feeds it: a projection of the records the
host's sessions commit (turns, model calls, tokens, tool calls), and a
snapshot of what the host and the run's rate limiters count, taken in the
run (the limiters live in it) and read by ``collect()`` from any thread.
``loopruntime host --metrics HOST:PORT`` serves it (``session.metrics_endpoint``).

The core counts nothing for this: ``prometheus_client`` (the ``metrics``
extra) is imported here only.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import msgspec
import structlog
import trio

from journal import JournalUnavailableError, Record
from journal.events import (
    ModelCallFailed,
    ModelCallStarted,
    ModelMessageCommitted,
    ModelOutput,
    ToolCompleted,
    ToolStarted,
    TurnEnded,
    TurnRejected,
    TurnStarted,
)
from loopruntime.models import limiters

from ..embedded.commit_latency import commit_latency
from ..embedded.errors import SessionLagError
from ..embedded.runtime import Session
from .host import Host

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = [
    "DURATION_BUCKETS",
    "HostMetrics",
    "RecordTally",
    "open_host_metrics",
]

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the tool duration histogram's buckets."""

log = structlog.wrap_logger(logging.getLogger(__name__))

_JOURNAL_SECONDS = 5.0
"""How long one read of the journal's inbox figures may take before the last ones stay."""
_FOLLOW_RETRY_SECONDS = 5.0
"""A session whose records could not be followed is tried again this much later."""
_SEEN_SESSIONS = 100_000
"""Sessions whose last counted seq is remembered, at most (past it, the session
counted longest ago is forgotten, and counted by time alone if loaded again)."""
_OLDEST_READS = 100
"""Sessions with entries pending whose inbox is read for the oldest entry, at most."""


class _Histogram:
    """Observations in ``DURATION_BUCKETS``: per-bucket counts and their sum."""

    def __init__(self) -> None:
        self.counts = [0] * (len(DURATION_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        index = next((i for i, bound in enumerate(DURATION_BUCKETS) if value <= bound), -1)
        self.counts[index] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative counts keyed by upper bound, ``+Inf`` last."""
        out, running = [], 0
        for bound, count in zip((*DURATION_BUCKETS, math.inf), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == math.inf else repr(bound), float(running)))
        return out


class RecordTally:
    """What the records fed to it tell: a pure projection, no I/O.

    A model call's model and a tool call's name are on its start record; the
    ends name only the call, so the starts are held until their end."""

    def __init__(self) -> None:
        self.turns_started = 0
        self.turns_ended: Counter[str] = Counter()
        """By outcome."""
        self.inputs_rejected: Counter[str] = Counter()
        """By ``turn.rejected`` reason."""
        self.model_calls: Counter[tuple[str, str]] = Counter()
        """By (model, outcome): ``completed``, ``truncated``, ``interrupted``, a failure's code."""
        self.tokens: Counter[tuple[str, str]] = Counter()
        """By (model, ``input`` / ``output``)."""
        self.tool_calls: Counter[tuple[str, str]] = Counter()
        """By (tool, disposition)."""
        self.tool_durations: dict[str, _Histogram] = {}
        self.model_seconds: dict[str, _Histogram] = {}
        """By model: from a call's start to its message or failure, by the records' times."""
        self.first_output_seconds: dict[str, _Histogram] = {}
        """By model: from a call's start to its first ``model.output`` record."""
        self._models: dict[str, tuple[str, int]] = {}
        """A call in progress: its model and its start's time (unix ns)."""
        self._streaming: set[str] = set()
        """Calls whose first output was counted."""
        self._tools: dict[str, str] = {}

    def feed(self, record: Record) -> None:
        match record.event:
            case TurnStarted():
                self.turns_started += 1
            case TurnEnded(outcome=outcome):
                self.turns_ended[outcome] += 1
            case TurnRejected(reason=reason):
                self.inputs_rejected[reason] += 1
            case ModelCallStarted(effect_id=effect, model=model):
                self._models[effect] = (model, record.at)
            case ModelOutput(effect_id=effect) if effect not in self._streaming:
                if effect in self._models:
                    self._streaming.add(effect)
                    model, began = self._models[effect]
                    _observe(self.first_output_seconds, model, record.at - began)
            case ModelMessageCommitted(effect_id=effect, usage=usage, notice=notice):
                model = self._call_ended(effect, record.at)
                self.model_calls[(model, notice or "completed")] += 1
                if usage is not None:
                    self.tokens[(model, "input")] += usage.input_tokens
                    self.tokens[(model, "output")] += usage.output_tokens
            case ModelCallFailed(effect_id=effect, code=code, retryable=retryable):
                # A retryable failure is followed by another attempt under the same call.
                if retryable:
                    model = self._models.get(effect, ("unknown", 0))[0]
                else:
                    model = self._call_ended(effect, record.at)
                self.model_calls[(model, code)] += 1
            case ToolStarted(execution_id=execution, name=name):
                self._tools[execution] = name
            case ToolCompleted(execution_id=execution, disposition=disposition, duration_ns=ns):
                # A rejected call may have no start: it never ran.
                name = self._tools.pop(execution, "unknown")
                self.tool_calls[(name, disposition)] += 1
                if disposition != "rejected":
                    _observe(self.tool_durations, name, ns)
            case _:
                pass

    def _call_ended(self, effect: str, at: int) -> str:
        """The ended call's model; its total time observed."""
        self._streaming.discard(effect)
        found = self._models.pop(effect, None)
        if found is None:
            return "unknown"  # started before the metrics began
        model, began = found
        _observe(self.model_seconds, model, at - began)
        return model


def _observe(histograms: dict[str, _Histogram], label: str, ns: int) -> None:
    histograms.setdefault(label, _Histogram()).observe(max(ns, 0) / 1e9)


class _Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What the host and the run's limiters counted, taken in the host's run."""

    host: Any
    """``HostStatistics``."""
    states: dict[str, int]
    gates: int
    limiters: list[Any]
    """``LimiterStatistics``, one per limiter."""


class _Inbox(msgspec.Struct, frozen=True, kw_only=True):
    """The journal's inbox as last read (journal-wide: every host reads the same)."""

    pending: int = 0
    waiting_for_host: int = 0
    """Sessions with entries pending and no live owner."""
    passivated: int = 0
    """Sessions at rest: no live owner and nothing pending."""
    oldest_ns: int | None = None
    """When the oldest pending entry was put (unix ns; None: none pending)."""


class HostMetrics:
    """The collector ``open_host_metrics`` registers (``collect()`` reads the
    latest snapshot and the tally; it never awaits)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.tally = RecordTally()
        self._snapshot = self._take()
        self._inbox = _Inbox()

    async def read_journal(self) -> None:
        """Read the journal's inbox figures; the last ones stay while it is out
        of reach or slower than ``_JOURNAL_SECONDS``."""
        journal = self.host.journal
        with trio.move_on_after(_JOURNAL_SECONDS):
            try:
                listed = await journal.sessions()
                infos = [info for info in listed if info.pending]
                oldest = None
                for info in infos[:_OLDEST_READS]:
                    entries = await journal.inbox(info.session)
                    if entries:
                        first = entries[0].created_at
                        oldest = first if oldest is None else min(oldest, first)
            except JournalUnavailableError:
                return
            self._inbox = _Inbox(
                pending=sum(info.pending for info in infos),
                waiting_for_host=sum(1 for info in infos if not info.live),
                passivated=sum(1 for info in listed if not info.live and not info.pending),
                oldest_ns=oldest,
            )

    def refresh(self) -> None:
        """Take a new snapshot; in the host's trio run."""
        self._snapshot = self._take()

    def _take(self) -> _Snapshot:
        states: Counter[str] = Counter()
        gates = 0
        for hosted in list(self.host.sessions.values()):
            session = hosted.session
            if session is None:
                states["opening"] += 1
                continue
            loops = [loop.state for loop in session.loops.values()]
            gates += sum(len(state.gates) for state in loops)
            if any(state.unknown for state in loops):
                states["unknown_effects"] += 1
            elif any(state.gates for state in loops):
                states["waiting_on_person"] += 1
            elif session.rate_limited():
                states["rate_limited"] += 1
            elif all(loop.quiescent for loop in session.loops.values()):
                states["idle"] += 1
            else:
                states["running"] += 1
        return _Snapshot(
            host=self.host.statistics(),
            states=dict(states),
            gates=gates,
            limiters=[limiter.statistics() for limiter in limiters()],
        )

    # Long as a list is long: one family after another, each a few lines, in
    # the order docs/host.md's table lists them (a test compares the two).
    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        snapshot, tally = self._snapshot, self.tally
        stats = snapshot.host
        yield GaugeMetricFamily(
            "loopruntime_host_ready",
            "1 when the host takes new work: registered, not stopping, journal within reach.",
            value=1.0 if stats.ready else 0.0,
        )
        yield GaugeMetricFamily(
            "loopruntime_host_sessions_loaded", "Sessions this host holds now.", value=stats.loaded
        )
        for name, value, text in (
            ("claims", stats.claims, "Sessions this host claimed."),
            ("failovers", stats.failovers, "Claims of sessions whose owner's lease had expired."),
            ("passivations", stats.passivations, "Sessions unloaded at rest."),
            ("commands_applied", stats.applied, "Inbox entries applied (refusals included)."),
            ("fenced", stats.fenced, "Sessions dropped because another host took them."),
            ("leases_expired", stats.expired, "Sessions stopped because a lease ran out."),
            ("journal_outages", stats.outages, "Times the journal went out of reach."),
        ):
            yield CounterMetricFamily(f"loopruntime_host_{name}", text, value=value)
        refused = CounterMetricFamily(
            "loopruntime_host_commands_refused",
            "Inbox entries consumed as refused (also in commands_applied), by the error "
            "named in their outcome.",
            labels=["reason"],
        )
        for reason, count in sorted(stats.refused.items()):
            refused.add_metric([reason], count)
        yield refused
        commits = commit_latency()
        yield HistogramMetricFamily(
            "loopruntime_commit_seconds",
            "Durable commits (journal appends) of the session writers in this process, "
            "from the call to its return.",
            buckets=[(_bound(le), float(n)) for le, n in commits.cumulative()],
            sum_value=commits.seconds,
        )
        sessions = GaugeMetricFamily(
            "loopruntime_sessions",
            "Sessions this host holds, by state.",
            labels=["state"],
        )
        for state in (
            "opening",
            "idle",
            "running",
            "rate_limited",
            "waiting_on_person",
            "unknown_effects",
        ):
            sessions.add_metric([state], snapshot.states.get(state, 0))
        yield sessions
        yield GaugeMetricFamily(
            "loopruntime_gates_open",
            "Gates (approvals, questions) open in the sessions this host holds.",
            value=snapshot.gates,
        )
        inbox = self._inbox
        yield GaugeMetricFamily(
            "loopruntime_inbox_pending",
            "Inbox entries not yet applied, in the whole journal.",
            value=inbox.pending,
        )
        yield GaugeMetricFamily(
            "loopruntime_inbox_oldest_age_seconds",
            "Age of the oldest inbox entry not yet applied (0: none).",
            value=0.0
            if inbox.oldest_ns is None
            else max(time.time_ns() - inbox.oldest_ns, 0) / 1e9,
        )
        yield GaugeMetricFamily(
            "loopruntime_sessions_waiting_for_host",
            "Sessions with inbox entries pending and no live owner, in the whole journal.",
            value=inbox.waiting_for_host,
        )
        yield GaugeMetricFamily(
            "loopruntime_sessions_passivated",
            "Sessions at rest (no live owner, nothing pending), in the whole journal.",
            value=inbox.passivated,
        )
        yield from _record_families(tally, CounterMetricFamily, HistogramMetricFamily)
        yield from _limiter_families(snapshot.limiters, CounterMetricFamily, GaugeMetricFamily)


def _bound(le: float) -> str:
    return "+Inf" if le == math.inf else repr(le)


def _record_families(tally: RecordTally, counter: Any, histogram: Any) -> Iterator[Any]:
    yield counter(
        "loopruntime_turns_started",
        "Turns started in sessions this host held.",
        value=tally.turns_started,
    )
    ended = counter("loopruntime_turns_ended", "Turns ended, by outcome.", labels=["outcome"])
    for outcome, count in sorted(tally.turns_ended.items()):
        ended.add_metric([outcome], count)
    yield ended
    rejected = counter(
        "loopruntime_inputs_rejected",
        "Inputs refused and never queued, by reason (queue_full, shutting_down, budget_exhausted).",
        labels=["reason"],
    )
    for reason, count in sorted(tally.inputs_rejected.items()):
        rejected.add_metric([reason], count)
    yield rejected
    calls = counter(
        "loopruntime_model_calls",
        "Model calls ended, by model and outcome (completed, truncated, interrupted, "
        "or the failure's code).",
        labels=["model", "outcome"],
    )
    for (model, outcome), count in sorted(tally.model_calls.items()):
        calls.add_metric([model, outcome], count)
    yield calls
    tokens = counter(
        "loopruntime_model_tokens",
        "Tokens the provider reported, by model and direction (input, output).",
        labels=["model", "direction"],
    )
    for (model, direction), count in sorted(tally.tokens.items()):
        tokens.add_metric([model, direction], count)
    yield tokens
    tools = counter(
        "loopruntime_tool_calls",
        "Tool calls ended, by tool and outcome (succeeded, failed, rejected).",
        labels=["tool", "outcome"],
    )
    for (tool, outcome), count in sorted(tally.tool_calls.items()):
        tools.add_metric([tool, outcome], count)
    yield tools
    for name, text, label, observed in (
        (
            "loopruntime_tool_duration_seconds",
            "How long tool calls that ran took, by tool.",
            "tool",
            tally.tool_durations,
        ),
        (
            "loopruntime_model_call_seconds",
            "Model calls from their start to their message or failure, by the records' "
            "commit times, by model.",
            "model",
            tally.model_seconds,
        ),
        (
            "loopruntime_model_first_output_seconds",
            "Model calls from their start to their first committed output, by model.",
            "model",
            tally.first_output_seconds,
        ),
    ):
        family = histogram(name, text, labels=[label])
        for value, observations in sorted(observed.items()):
            family.add_metric([value], observations.buckets(), sum_value=observations.total)
        yield family


def _limiter_families(stats: list[Any], counter: Any, gauge: Any) -> Iterator[Any]:
    labels = ["provider", "model"]
    admitted = counter(
        "loopruntime_rate_limit_admitted",
        "Model calls the shared rate limiter let through.",
        labels=labels,
    )
    waited = counter(
        "loopruntime_rate_limit_waited", "Admitted calls that had to wait.", labels=labels
    )
    seconds = counter(
        "loopruntime_rate_limit_wait_seconds",
        "Seconds admitted calls spent waiting.",
        labels=labels,
    )
    slowdowns = counter(
        "loopruntime_rate_limit_slowdowns",
        "Times a provider's 429 paused the shared limiter.",
        labels=labels,
    )
    waiting = gauge(
        "loopruntime_rate_limit_waiting", "Calls waiting for the limiter now.", labels=labels
    )
    for limiter in stats:
        key = [limiter.provider, limiter.model]
        admitted.add_metric(key, limiter.admitted)
        waited.add_metric(key, limiter.waited)
        seconds.add_metric(key, limiter.wait_seconds)
        slowdowns.add_metric(key, limiter.slowdowns)
        waiting.add_metric(key, limiter.waiting)
    yield from (admitted, waited, seconds, slowdowns, waiting)


@asynccontextmanager
async def open_host_metrics(
    host: Host, registry: CollectorRegistry | None = None, *, refresh: float = 1.0
) -> AsyncIterator[HostMetrics]:
    """Register ``host``'s metrics on ``registry`` (None: the default
    registry of ``prometheus_client``) for the block, in the host's run.

    The records counted are those the sessions this host holds commit once
    the block has begun (a session's history before is not counted again);
    the host's and the limiters' numbers are taken every ``refresh`` seconds
    (``HostMetrics.refresh`` takes them at once)."""
    try:
        from prometheus_client import REGISTRY
    except ImportError:
        raise ValueError(
            "metrics need prometheus-client: pip install 'loopruntime[metrics]'"
        ) from None
    if not refresh > 0 or math.isinf(refresh):
        raise ValueError(f"open_host_metrics refresh must be a positive number, not {refresh!r}")
    target = REGISTRY if registry is None else registry
    metrics = HostMetrics(host)
    target.register(metrics)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch, host, metrics.tally, time.time_ns())
            nursery.start_soon(_refresher, metrics, refresh)
            try:
                yield metrics
            finally:
                nursery.cancel_scope.cancel()
    finally:
        target.unregister(metrics)


async def _refresher(metrics: HostMetrics, every: float) -> None:
    while True:
        await trio.sleep(every)
        metrics.refresh()
        await metrics.read_journal()


async def _watch(host: Host, tally: RecordTally, since_ns: int) -> None:
    """Follow each session the host loads: one subscriber per loaded instance."""
    seen: dict[str, int] = {}
    """Each session's last seq counted: a session loaded again resumes there."""
    following: set[int] = set()
    async with trio.open_nursery() as nursery:
        while True:
            for hosted in list(host.sessions.values()):
                session = hosted.session
                if session is not None and id(session) not in following:
                    following.add(id(session))
                    nursery.start_soon(_follow, session, tally, seen, since_ns, following)
            await trio.sleep(min(host.poll, 0.25))


async def _follow(
    session: Session,
    tally: RecordTally,
    seen: dict[str, int],
    since_ns: int,
    following: set[int],
) -> None:
    try:
        while True:
            try:
                async for item in session.subscribe(seen.get(session.id, 0)):
                    if not isinstance(item, Record):
                        continue
                    seen.pop(session.id, None)  # moved last: the order is of the latest record
                    seen[session.id] = item.seq
                    if len(seen) > _SEEN_SESSIONS:
                        del seen[next(iter(seen))]  # the session counted longest ago
                    if item.at >= since_ns:
                        tally.feed(item)
                return
            except SessionLagError:
                continue  # resumes after the last record counted
    except Exception as exc:
        # The metrics never take the host down: the watcher follows this
        # session again at its next pass, from the last record counted.
        log.warning("metrics_follow_failed", session=session.id, error=repr(exc))
        await trio.sleep(_FOLLOW_RETRY_SECONDS)
    finally:
        following.discard(id(session))
