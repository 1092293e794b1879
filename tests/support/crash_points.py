"""The crash-point scenario: tests/crash/test_crash_points.py runs it in child processes,
the replay tests run it in their own process for a realistic journal.

Scenarios (``tests.support.crash_child``):

* ``crash-points WORKDIR [KILL_AFTER]`` starts the session from nothing and drives the
  whole scenario; with ``KILL_AFTER`` = k it SIGKILLs itself right after the k-th
  ``append`` call on the journal returned (the k-th durable commit; a group commit
  counts once);
* ``crash-points-restore WORKDIR`` restores the session in a fresh process, settles what
  a crash left open the way a host would, and drives the scenario to its end.

The scenario: a parallel batch of replay-safe tools, a tool behind a
permission gate (with steering queued while the gate is open), a resumable
tool asking the user a question, a non-idempotent tool, a compaction, and a
last plain turn.  The brain answers as a function of the request, so a
restored process replies exactly as the original would have.

Files in WORKDIR, all appended with single ``os.write`` calls so a SIGKILL
never leaves half a line:

* ``seen``    — ``seq digest-hex`` of every record an append returned;
* ``effects`` — ``phase execution-id tool result-json``, one per tool effect;
* ``appends`` — the number of append calls (written at the end of ``run``);
* ``head``    — the journal head the restoring process found.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from journal import Draft, Journal, Record, SessionLease, open_journal
from journal.content import Message, Text, ToolResult
from journal.events import (
    CompactionCommitted,
    CompactionRejected,
    InputCancelled,
    InputQueued,
    SteerQueued,
    TurnEnded,
    TurnRejected,
    TurnStarted,
)
from journal.forwarding import ForwardingJournal
from journal.inbox import Consumed
from loopruntime import Limits, LoopDefinition, QueueFullError, ToolContext, tool
from loopruntime.compaction import Summary, render_summary
from loopruntime.model import Model, ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.processes import kill_self

SESSION = "crash-scenario"
CHECKPOINT_EVERY = 9
"""Records between checkpoints: small, so that kill points fall before and
after checkpoints and restores start from them (after a compaction too)."""
COMPACT = "<compact>"
STEPS = (
    "What's the weather in Paris and Oslo?",
    "Book a table for two.",
    "Pick a colour for the invitation.",
    "Send the invoice to ACME.",
    COMPACT,
    "What do you remember?",
)
STEER = "Make it for four people."
OVERFLOW = ("Also note the dress code.", "And the parking.")
ANSWER = "blue"
REPLAY_SAFE = frozenset({"forecast"})
RESUMABLE = frozenset({"pick_colour"})

_FORECASTS = {"Paris": "14°C, light rain", "Oslo": "-3°C, clear skies"}


def journal_url(workdir: Path) -> str:
    return "sqlite:///" + str(workdir / "journal.db")


def _append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


# -- tools: each effect is recorded by execution id -------------------------------------


def perform(name: str, args: dict[str, Any]) -> str:
    """What a tool's effect produces: the tools and the host share it, so a
    host settling an unknown effect gives the result the tool would have."""
    if name == "forecast":
        return f"{args['city']}: {_FORECASTS[args['city']]}."
    if name == "book_table":
        return f"Table for {args['people']} booked at {args['place']}."
    if name == "pick_colour":
        return f"Colour {args.get('answer', ANSWER)} saved."
    if name == "send_invoice":
        return f"Invoice for {args['amount']} EUR sent to {args['customer']}."
    raise ValueError(name)


class Ledger:
    """The side file of tool effects (what a host would check after a crash)."""

    def __init__(self, workdir: Path, phase: str) -> None:
        self.path = workdir / "effects"
        self.phase = phase

    def record(self, execution_id: str, name: str, result: str) -> None:
        _append_line(self.path, f"{self.phase} {execution_id} {name} {json.dumps(result)}")

    def results(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        out: dict[str, str] = {}
        for line in self.path.read_text().splitlines():
            _, execution_id, _, result = line.split(" ", 3)
            out[execution_id] = json.loads(result)
        return out


def definition(ledger: Ledger) -> LoopDefinition:
    def effect(ctx: ToolContext, name: str, args: dict[str, Any]) -> str:
        result = perform(name, args)
        ledger.record(ctx.execution_id, name, result)
        return result

    @tool(permission="allow", concurrency="parallel", replay_safe=True)
    async def forecast(ctx: ToolContext, *, city: str) -> str:
        """Today's weather for a city (idempotent)."""
        return effect(ctx, "forecast", {"city": city})

    @tool(permission="ask")
    async def book_table(ctx: ToolContext, *, place: str, people: int) -> str:
        """Book a table (asks for permission)."""
        return effect(ctx, "book_table", {"place": place, "people": people})

    @tool(permission="allow", resumable=True)
    async def pick_colour(ctx: ToolContext) -> str:
        """Ask the user for a colour and save it."""
        answer = await ctx.ask_user("Which colour?", ["red", "blue"])
        return effect(ctx, "pick_colour", {"answer": answer})

    @tool(permission="allow")
    async def send_invoice(ctx: ToolContext, *, customer: str, amount: int) -> str:
        """Send an invoice (not idempotent)."""
        return effect(ctx, "send_invoice", {"customer": customer, "amount": amount})

    return LoopDefinition(
        name="crash",
        model=ScriptedModel(brain, name="scripted:crash"),
        system="You run errands.",
        tools=[forecast, book_table, pick_colour, send_invoice],
        compactor=FixedCompactor(),
        # One input may wait behind a turn: the second overflow input is refused.
        limits=Limits(max_queued_inputs=1),
    )


class FixedCompactor:
    """A compactor whose summary does not depend on timing or ids."""

    async def summarize(
        self, messages: Sequence[Message], obligations: Sequence[str], *, model: Model
    ) -> str:
        return render_summary(
            Summary(
                goal="Run the user's errands.",
                constraints="Ask before booking.",
                decisions="Weather checked; table booked.",
                state="Errands in progress.",
                open_items="",
            )
        )


def _texts(message: Message) -> list[str]:
    return [b.text for b in message.blocks if isinstance(b, Text)]


def brain(request: ModelRequest) -> Reply:
    """The reply as a function of the request alone."""
    last = request.messages[-1]
    results = [b for b in last.blocks if isinstance(b, ToolResult)]
    if results:
        said = [" ".join(c.text for c in r.content if isinstance(c, Text)) for r in results]
        steered = any(STEER in t for m in request.messages for t in _texts(m))
        noted = " Noted: four people." if steered else ""
        return Reply(text="Done. " + " ".join(said) + noted)
    said = " ".join(_texts(last)).lower()
    if "weather" in said:
        return Reply(
            text="Checking both cities at once.",
            tool_calls=[
                ToolCall(name="forecast", input={"city": "Paris"}),
                ToolCall(name="forecast", input={"city": "Oslo"}),
            ],
        )
    if "book" in said:
        return Reply(
            text="Booking needs your approval.",
            tool_calls=[ToolCall(name="book_table", input={"place": "Chez Loop", "people": 2})],
        )
    if "colour" in said:
        return Reply(text="Let me ask you.", tool_calls=[ToolCall(name="pick_colour")])
    if "invoice" in said:
        return Reply(
            text="Sending it.",
            tool_calls=[ToolCall(name="send_invoice", input={"customer": "ACME", "amount": 120})],
        )
    first = _texts(request.messages[0])
    return Reply(text="I remember: " + (first[0][:40] if first else "nothing"))


# -- the journal wrapper that picks the moment of death -----------------------------------


class KillingJournal(ForwardingJournal):
    """The real journal, recording every record an append returned, and
    SIGKILLing this process right after the ``kill_after``-th append."""

    def __init__(self, inner: Journal, workdir: Path, kill_after: int | None) -> None:
        super().__init__(inner)
        self.seen = workdir / "seen"
        self.kill_after = kill_after
        self.appends = 0

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Consumed] = (),
    ) -> list[Record]:
        records = await self.inner.append(
            lease, drafts, expected_seq=expected_seq, consumes=consumes
        )
        self.appends += 1
        _append_line(self.seen, "\n".join(f"{r.seq} {r.digest.hex()}" for r in records))
        if self.dies_now():
            kill_self()
        return records

    def dies_now(self) -> bool:
        """Whether to die right after the append just counted (and written down)."""
        return self.appends == self.kill_after


# -- the host: drives the scenario from whatever state the journal is in -------------------


async def _records(journal: Journal) -> list[Record]:
    return [r async for r in journal.read(SESSION)]


def step_status(records: list[Record], text: str) -> str:
    """``absent`` (never submitted), ``pending`` (queued or running),
    ``done`` (its last turn completed) or ``retry`` (its last turn ended
    otherwise: a crash mid-reply ends a turn ``crashed``)."""
    ids = {
        r.event.input_id
        for r in records
        if isinstance(r.event, InputQueued)
        and r.event.trigger == "external"
        and any(text in t for m in r.event.messages for t in _texts(m))
    }
    if not ids:
        return "absent"
    cancelled = {r.event.input_id for r in records if isinstance(r.event, InputCancelled)}
    consumed: set[str] = set()
    outcome: str | None = None
    open_turn = False
    for r in records:
        if isinstance(r.event, TurnStarted):
            mine = ids & set(r.event.input_ids)
            consumed |= mine
            open_turn = bool(mine)
            if mine:
                outcome = None
        elif isinstance(r.event, TurnEnded) and open_turn:
            outcome = r.event.outcome
            open_turn = False
    if ids - consumed - cancelled or outcome is None:
        return "pending"
    return "done" if outcome == "completed" else "retry"


async def settle(s: Session, ledger: Ledger) -> None:
    """Wait until the loop needs nobody; answer gates and resolve unknown
    effects as a host would, until it is idle."""
    while True:
        await s.wait_idle()
        state = await s.snapshot()
        if state.unknown_effects:
            done = ledger.results()
            for started in state.unknown_effects:
                result = done.get(started.execution_id)
                if result is None:
                    # Not in the ledger: the effect never happened; the host
                    # performs it now (under the same execution id).
                    args = dict(started.input)
                    result = perform(started.name, args)
                    _append_line(
                        ledger.path,
                        f"host {started.execution_id} {started.name} {json.dumps(result)}",
                    )
                await s.resolve(started.execution_id, result, key=f"resolve:{started.execution_id}")
            continue
        if state.open_gates:
            for gate in state.open_gates:
                if gate.kind == "permission":
                    records = await _records(s.journal)
                    if not any(isinstance(r.event, SteerQueued) for r in records):
                        await s.steer(STEER, key="steer")
                    # While the turn waits here, two more inputs: the first
                    # queues, the second finds the queue full; then the first
                    # is withdrawn.  Keyed, so a host repeating this after a
                    # restore adds nothing (the outcome stays the clean run's).
                    first = await s.submit(OVERFLOW[0], key="overflow-0")
                    if not any(isinstance(r.event, TurnRejected) for r in records):
                        try:
                            await s.submit(OVERFLOW[1], key="overflow-1")
                        except QueueFullError:
                            pass
                    if any(q.input_id == first for q in (await s.snapshot()).queued):
                        await s.cancel_queued(first, key="overflow-cancel")
                    await s.decide(gate.gate_id, allow=True, key=f"decide:{gate.gate_id}")
                else:
                    await s.answer(gate.gate_id, ANSWER, key=f"answer:{gate.gate_id}")
            continue
        return


async def drive(s: Session, ledger: Ledger) -> None:
    await settle(s, ledger)
    for step in STEPS:
        for _ in range(5):
            records = await _records(s.journal)
            if step == COMPACT:
                if any(isinstance(r.event, CompactionCommitted) for r in records):
                    break
                # One key per attempt: a retry after a crash repeats the
                # request (a restore runs it), a rejected attempt asks anew.
                tries = sum(isinstance(r.event, CompactionRejected) for r in records)
                await s.compact(key=f"compact:{tries}")
            else:
                status = step_status(records, step)
                if status == "done":
                    break
                if status in ("absent", "retry"):
                    tries = sum(isinstance(r.event, InputQueued) for r in records)
                    await s.submit(step, key=f"step:{STEPS.index(step)}:{tries}")
            await settle(s, ledger)
        else:
            raise RuntimeError(f"scenario step {step!r} did not complete")


async def run(workdir: str, kill_after: str | None = None) -> None:
    """The scenario from nothing, SIGKILLed after commit ``kill_after`` if given."""
    path = Path(workdir)
    ledger = Ledger(path, "run")
    async with open_journal(journal_url(path)) as real:
        journal = KillingJournal(real, path, None if kill_after is None else int(kill_after))
        async with Session.create(
            journal, definition(ledger), session_id=SESSION, checkpoint_every=CHECKPOINT_EVERY
        ) as s:
            await drive(s, ledger)
        (path / "appends").write_text(str(journal.appends))


async def restore(workdir: str) -> None:
    """The scenario restored from whatever the journal in ``workdir`` holds, to its end."""
    path = Path(workdir)
    ledger = Ledger(path, "restore")
    async with open_journal(journal_url(path)) as journal:
        (path / "head").write_text(str(await journal.head(SESSION)))
        async with Session.restore(
            journal, SESSION, definition(ledger), checkpoint_every=CHECKPOINT_EVERY
        ) as s:
            await drive(s, ledger)
