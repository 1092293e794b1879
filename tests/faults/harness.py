"""The fault run: real ``loopruntime host`` processes on one journal, faults
injected while keyed commands flow, and what the run left to be checked.

Rules: the harness reaches hosts only through signals and the journal, and
the hosts reach the tools' effects log only through the tool
(``workload.py``).  It waits for the journal (or the log) to show a state,
never for a span of time: a host paused "past its lease" is woken once the
journal shows another host settled the call it was running.  Every wait on
the journal outlives an outage of it (a PostgreSQL restart).  Clients resend
a command that could not reach the journal under its key until it is stored.

The checks are pure functions over the ``Outcome`` (``check_*``); the
failover figures are the time from a fault to the first record another
host wrote in a session the faulted host held with work, read from the
records' times and the journal's writer spans.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from journal import (
    InboxUnavailableError,
    Journal,
    JournalUnavailableError,
    Record,
    WriterSpan,
)
from journal.events import (
    InputQueued,
    ToolAbandoned,
    ToolCompleted,
    ToolResolved,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from journal.inbox import InboxEntry
from session import Client
from session.replay import CheckReport, check

from .workload import EFFECTS_ENV, HOST_ENV, Effect, effects

__all__ = ["Fault", "Fleet", "HostProcess", "Outcome", "Sent", "failover_table"]

ROOT = Path(__file__).resolve().parents[2]

LEASE_TTL = 5.0
"""The hosts' lease (and registration) seconds: short, so a takeover comes
soon, and longer than a host process takes to start, so one launched again
at once after a SIGKILL meets its old registration still live."""

DEFINITION = "worker"


async def wait_for(predicate: Callable[[], Awaitable[bool]]) -> None:
    """Until ``predicate()`` holds; an unreachable journal counts as "not yet"."""
    while True:
        try:
            if await predicate():
                return
        except JournalUnavailableError:
            pass
        await trio.sleep(0.05)


# -- the hosts ---------------------------------------------------------------------------


@dataclass
class Exit:
    """A host process that ended without being told to."""

    host: str
    returncode: int | None
    said: str
    """The end of what it wrote on stderr."""


@dataclass
class HostProcess:
    host: str
    process: trio.Process
    log: Path
    ended_by_us: bool = False


class Fleet:
    """The host processes of one run, each under a stable ``--host-id``."""

    def __init__(
        self, url: str, workdir: Path, nursery: trio.Nursery, *, lease_ttl: float = LEASE_TTL
    ) -> None:
        self.url, self.workdir, self.nursery = url, workdir, nursery
        self.lease_ttl = lease_ttl
        self.running: dict[str, HostProcess] = {}
        self.exits: list[Exit] = []
        self._launches = 0

    async def _spawn(self, host: str, *, warm: bool) -> HostProcess:
        self._launches += 1
        log = self.workdir / f"{host}.{self._launches}.log"
        env = {**os.environ, EFFECTS_ENV: str(self.workdir / "effects.jsonl"), HOST_ENV: host}
        module = "tests.faults.prewarmed" if warm else "session.cli.main"
        command = [
            sys.executable, "-m", module, "host", "--journal", self.url,
            "--definitions", "tests.faults.workload:definitions", "--host-id", host,
            "--lease-ttl", str(self.lease_ttl), "--poll", "0.05", "--idle-after", "600",
        ]  # fmt: skip
        err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            process = await trio.lowlevel.open_process(
                command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE if warm else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        finally:
            os.close(err)
        return HostProcess(host, process, log)

    async def _said(self, started: HostProcess, word: bytes) -> bool:
        """Read its stdout until it says ``word`` (True) or closes it (False)."""
        stdout = started.process.stdout
        assert stdout is not None
        said = b""
        while word not in said:
            chunk = await stdout.receive_some()
            if not chunk:
                return False
            said += chunk
        return True

    async def launch(self, host: str, *, warm: HostProcess | None = None) -> bool:
        """Start ``host`` (or let ``warm``, from ``warm_up``, go on as it);
        True once it runs, False when it ended first (an exit)."""
        if warm is None:
            started = await self._spawn(host, warm=False)
        else:
            started = warm
            assert started.process.stdin is not None
            await started.process.stdin.send_all(b"go\n")
        runs = await self._said(started, b"runs")
        self.nursery.start_soon(self._watch, started)
        if not runs:
            await started.process.wait()
            return False
        self.running[host] = started
        return True

    async def warm_up(self, host: str) -> HostProcess:
        """A process that runs ``loopruntime host`` as ``host`` once ``launch``
        tells it to, its imports done already; ``discard`` it when unused."""
        started = await self._spawn(host, warm=True)
        assert await self._said(started, b"warm"), started.log.read_text(errors="replace")
        return started

    async def discard(self, warm: HostProcess) -> None:
        warm.process.kill()
        await warm.process.wait()

    async def _watch(self, started: HostProcess) -> None:
        await started.process.wait()
        if self.running.get(started.host) is started:
            del self.running[started.host]
        if not started.ended_by_us:
            said = started.log.read_text(errors="replace")[-2000:]
            self.exits.append(Exit(started.host, started.process.returncode, said))

    async def keep_running(
        self, host: str, journal: Journal, *, warm: HostProcess | None = None
    ) -> None:
        """Launch ``host`` (``warm`` first, when given) until it runs; after a
        refusal, again once the journal shows its old registration expired."""
        while not await self.launch(host, warm=warm):
            warm = None

            async def registration_gone() -> bool:
                return not any(h.host == host and h.live for h in await journal.hosts())

            await wait_for(registration_gone)

    def signal(self, host: str, signum: int) -> None:
        target = self.running[host]
        if signum in (signal.SIGKILL, signal.SIGTERM):
            target.ended_by_us = True
        os.kill(target.process.pid, signum)

    async def stop_all(self) -> None:
        """SIGKILL every host and wait for each.  Not SIGTERM: a clean stop
        is not what this run checks, and one that hangs must not hang it."""
        for started in list(self.running.values()):
            started.ended_by_us = True
            os.kill(started.process.pid, signal.SIGKILL)
        for started in list(self.running.values()):
            await started.process.wait()


# -- the commands --------------------------------------------------------------------


@dataclass
class Sent:
    """Every keyed command the run sent: ``(session, key)`` -> the entry stored."""

    entries: dict[tuple[str, str], InboxEntry] = field(default_factory=dict)
    resent: int = 0
    refused_puts: int = 0
    """Puts that could not reach the journal (``InboxUnavailableError``) and were sent again."""

    async def put(self, put: Callable[[], Awaitable[InboxEntry]], session: str, key: str) -> None:
        """Send until stored, as a client does: again under the same key."""
        while True:
            try:
                entry = await put()
            except InboxUnavailableError:
                self.refused_puts += 1
                await trio.sleep(0.05)
                continue
            stored = self.entries.setdefault((session, key), entry)
            assert stored.number == entry.number, "one key was stored twice"
            return

    async def create(self, client: Client, journal: Journal, session: str) -> None:
        key = f"{session}/create"

        async def create() -> InboxEntry:
            await client.create(DEFINITION, session_id=session, key=key)
            entry = await journal.entry(session, key)
            assert entry is not None
            return entry

        await self.put(create, session, key)

    async def submit(self, client: Client, session: str, key: str) -> None:
        text = f"{session}/{key}"
        await self.put(lambda: client.submit(session, text, key=key), session, key)


# -- faults and what they cost ---------------------------------------------------------


@dataclass
class Fault:
    kind: str
    host: str
    at: int
    """unix ns when the signal was sent."""
    sessions: tuple[str, ...]
    """The sessions the host held, with work, at that moment."""


async def held_with_work(journal: Journal, host: str) -> tuple[str, ...]:
    """The sessions ``host`` holds that have an open turn or waiting inbox entries."""
    held = []
    for info in await journal.sessions():
        if info.owner != host:
            continue
        records = [r async for r in journal.read(info.session)]
        started = sum(isinstance(r.event, TurnStarted) for r in records)
        ended = sum(isinstance(r.event, TurnEnded) for r in records)
        if info.pending or started > ended:
            held.append(info.session)
    return tuple(held)


async def call_in_flight(
    journal: Journal, hosts: Sequence[str]
) -> tuple[tuple[str, str, str], int] | None:
    """The newest call started and not settled in a session one of ``hosts``
    holds live: ``(host, session, tool_use_id)`` and when it started (unix
    ns), or None."""
    newest: tuple[tuple[str, str, str], int] | None = None
    for info in await journal.sessions():
        if info.owner is None or info.owner not in hosts or not info.live:
            continue
        open_calls: dict[str, int] = {}
        async for r in journal.read(info.session):
            match r.event:
                case ToolStarted(tool_use_id=t):
                    open_calls[t] = r.at
                case ToolCompleted(tool_use_id=t) | ToolAbandoned(tool_use_id=t):
                    open_calls.pop(t, None)
        for tool_use_id, at in open_calls.items():
            if newest is None or at > newest[1]:
                newest = ((info.owner, info.session, tool_use_id), at)
    return newest


def failovers(
    faults: Sequence[Fault],
    records: dict[str, list[Record]],
    spans: dict[str, list[WriterSpan]],
) -> dict[str, list[float]]:
    """Seconds from each fault to the first record of the session's next
    owner, per fault kind, over the sessions the faulted host held with work.

    The next owner is another host, or, after a SIGKILL, the killed host's id
    launched again: a new process that took the session under a new lease once
    the old one expired, the same wait as another host's (it may win that race,
    and then the session never reaches another host before the next fault).
    A stopped host's own later spans are not a failover: it is the one
    that was left behind."""
    found: dict[str, list[float]] = {}
    for fault in faults:
        for session in fault.sessions:
            at = {r.seq: r.at for r in records[session]}
            relaunched = fault.kind == "SIGKILL"
            firsts = [
                at[s.first_seq]
                for s in spans[session]
                if (relaunched or s.owner != fault.host) and at.get(s.first_seq, 0) > fault.at
            ]
            if firsts:
                found.setdefault(fault.kind, []).append((min(firsts) - fault.at) / 1e9)
    return found


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def failover_table(backend: str, figures: dict[str, list[float]]) -> str:
    """The failover figures as a Markdown table."""
    lines = [
        f"failover on {backend}, lease {LEASE_TTL:g} s "
        "(fault to the first record by the next owner)",
        "| fault | sessions | p50 | p99 |",
        "|---|---:|---:|---:|",
    ]
    for kind, values in figures.items():
        lines.append(
            f"| {kind} | {len(values)} | {_percentile(values, 0.5):.2f} s "
            f"| {_percentile(values, 0.99):.2f} s |"
        )
    return "\n".join(lines)


# -- what the run left ---------------------------------------------------------------


@dataclass
class Outcome:
    """What a fault run left: the journal read back whole, the effects log,
    the exits; the checks below read only this."""

    backend: str
    sent: Sent
    stored: dict[tuple[str, str], InboxEntry | None]
    records: dict[str, list[Record]]
    spans: dict[str, list[WriterSpan]]
    reports: dict[str, CheckReport]
    effects: list[Effect]
    exits: list[Exit]
    faults: list[Fault]
    figures: dict[str, list[float]]
    paused_call: tuple[str, str, str] | None = None
    """``(host, session, tool_use_id)`` of the call a paused host was running."""
    relaunched_while_registered: bool = False
    """The killed host was launched again while its old registration was live."""


async def read_back(
    journal: Journal, backend: str, sent: Sent, workdir: Path, fleet: Fleet, faults: list[Fault]
) -> Outcome:
    sessions = sorted({s for s, _ in sent.entries})
    records = {s: [r async for r in journal.read(s)] for s in sessions}
    spans = {s: await journal.writers(s) for s in sessions}
    return Outcome(
        backend=backend,
        sent=sent,
        stored={k: await journal.entry(*k) for k in sent.entries},
        records=records,
        spans=spans,
        reports={s: await check(journal, s) for s in sessions},
        effects=effects(workdir / "effects.jsonl"),
        exits=list(fleet.exits),
        faults=faults,
        figures=failovers(faults, records, spans),
    )


def check_applied_once(outcome: Outcome) -> list[str]:
    """Each keyed input is stored once, applied once, as one ``input.queued``."""
    problems = []
    for (session, key), entry in outcome.sent.entries.items():
        if key.endswith("/create"):
            continue
        stored = outcome.stored[(session, key)]
        if stored is None or stored.number != entry.number:
            problems.append(f"{session} {key}: the stored entry is {stored}, not {entry.number}")
            continue
        if stored.outcome is None or stored.outcome.error is not None:
            problems.append(f"{session} {key}: not applied ({stored.outcome})")
        texts = [
            "".join(getattr(b, "text", "") for m in r.event.messages for b in m.blocks)
            for r in outcome.records[session]
            if isinstance(r.event, InputQueued)
        ]
        count = texts.count(f"{session}/{key}")
        if count != 1:
            problems.append(f"{session} {key}: input.queued {count} times")
    return problems


def check_nothing_lost(outcome: Outcome) -> list[str]:
    """Every applied entry's record is in the journal, every input was taken
    by a turn, and every session's last turn ended."""
    problems = []
    for (session, key), stored in outcome.stored.items():
        if stored is None or stored.outcome is None or stored.outcome.record is None:
            continue
        ids = {r.id for r in outcome.records[session]}
        if stored.outcome.record not in ids:
            problems.append(f"{session} {key}: its record {stored.outcome.record} is gone")
    for session, records in outcome.records.items():
        queued = {r.event.input_id for r in records if isinstance(r.event, InputQueued)}
        taken = {i for r in records if isinstance(r.event, TurnStarted) for i in r.event.input_ids}
        if queued - taken:
            problems.append(f"{session}: inputs never taken by a turn: {sorted(queued - taken)}")
        turns = [r.event for r in records if isinstance(r.event, TurnStarted | TurnEnded)]
        if turns and not isinstance(turns[-1], TurnEnded):
            problems.append(f"{session}: its last turn never ended")
    return problems


def _settlements(outcome: Outcome) -> dict[str, tuple[int, str | None]]:
    """tool_use_id -> (unix ns, host) of the record that settled the call."""
    settled: dict[str, tuple[int, str | None]] = {}
    for session, records in outcome.records.items():
        spans = outcome.spans[session]
        for r in records:
            if isinstance(r.event, ToolCompleted | ToolAbandoned | ToolResolved):
                owner = next((s.owner for s in reversed(spans) if s.first_seq <= r.seq), None)
                settled.setdefault(r.event.tool_use_id, (r.at, owner))
    return settled


def check_no_effect_after_settlement(outcome: Outcome) -> list[str]:
    """No host performed a call's effect after another host had settled that call."""
    settled = _settlements(outcome)
    problems = []
    for e in outcome.effects:
        found = settled.get(e.tool_use_id)
        if found is not None and found[1] != e.host and e.at > found[0]:
            problems.append(
                f"{e.text}: host {e.host} performed the effect of {e.tool_use_id} "
                f"{(e.at - found[0]) / 1e9:.2f} s after host {found[1]} had settled it"
            )
    return problems


def check_replay(outcome: Outcome) -> list[str]:
    return [f"{s}: {r.summary()}" for s, r in outcome.reports.items() if not r.ok]


def check_no_exit(outcome: Outcome) -> list[str]:
    return [f"host {e.host} exited with {e.returncode}: {e.said}" for e in outcome.exits]


def now_ns() -> int:
    return time.time_ns()
