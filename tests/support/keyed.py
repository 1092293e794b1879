"""Keyed commands, one scenario per command: the session brought to where the
command applies, the command given with a key, and its effects counted.

The in-process tests (tests/loop/test_keys.py) and the crash child
(``python -m tests.support.crash_child keyed COMMAND URL SESSION WORKDIR``) share
them, so the killed process and the restoring test run the same loop.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from journal import Draft, Journal, Record, SessionLease, open_journal
from journal.content import Piece, Text, ToolResult
from journal.events import (
    CommandKeyed,
    CompactionStarted,
    GateOpened,
    GateResolved,
    InputCancelled,
    InputQueued,
    LoopModeChanged,
    LoopPaused,
    LoopResumed,
    ModelOutput,
    SteerQueued,
    ToolResolved,
    ToolStarted,
    TurnEnded,
)
from journal.forwarding import ForwardingJournal
from loopruntime import Limits, LoopDefinition, Mode, ToolContext, tool
from loopruntime.model import Delta, ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.host.support import wait_for
from tests.support.loops import crashed_copy, records
from tests.support.processes import kill_self

KEY = "client-retry-7f3a"
COMMANDS = (
    "submit",
    "steer",
    "cancel_queued",
    "answer",
    "decide",
    "resolve",
    "interrupt",
    "compact",
    "change_mode",
    "pause",
    "resume",
)


def _said(request: ModelRequest) -> str:
    """The last text the model was given (steering merged after an input is
    the last block of its message)."""
    texts = [b.text for b in request.messages[-1].blocks if isinstance(b, Text)]
    return texts[-1].lower() if texts else ""


def brain(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    if any(isinstance(b, ToolResult) for b in last.blocks):
        return Reply(text="done")
    said = _said(request)
    if "ask" in said:
        return Reply(tool_calls=[ToolCall(name="confirm", input={"question": "go?"})])
    if "deploy" in said:
        return Reply(tool_calls=[ToolCall(name="deploy", input={"target": "prod"})])
    if "charge" in said:
        return Reply(tool_calls=[ToolCall(name="charge", input={"amount": 7})])
    if "slow" in said:
        return Reply(text="a slow reply " * 40, chunk_size=3)
    return Reply(text="ok")


class Stalling:
    """The scripted brain, except that a "slow" reply stalls after its first
    piece until the call is cancelled: a turn that stays busy whatever the
    clock does (the autojump clock skips any finite delay)."""

    def __init__(self) -> None:
        self.inner = ScriptedModel(brain, name="scripted:keyed")
        self.name = self.inner.name
        self.context_window = self.inner.context_window

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Delta]]:
        async with self.inner.stream(request) as deltas:
            yield _stalled(deltas) if "slow" in _said(request) else deltas


async def _stalled(deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
    async for delta in deltas:
        yield delta
        if isinstance(delta, Piece):
            await trio.sleep_forever()


STALLING_LIMITS = Limits(model_first_token_timeout=None, model_call_timeout=None)
"""No model deadlines: a stalled reply must keep its turn busy (under the autojump
clock a default deadline would otherwise cut it as soon as nothing else runs)."""


def definition() -> LoopDefinition:
    @tool(permission="allow", resumable=True)
    async def confirm(ctx: ToolContext, *, question: str) -> str:
        """Ask, then act on the answer."""
        return f"user said {await ctx.ask_user(question, choices=['yes', 'no'])}"

    @tool(permission="ask")
    async def deploy(ctx: ToolContext, *, target: str) -> str:
        """Deploy (needs approval)."""
        return f"deployed {target}"

    @tool(permission="allow")
    async def charge(ctx: ToolContext, *, amount: int) -> str:
        """Charge a card (never returns here: the test crashes it)."""
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return LoopDefinition(
        name="keyed",
        model=Stalling(),
        tools=[confirm, deploy, charge],
        modes=[Mode(name="careful", system="Be careful."), Mode(name="bold", system="Be bold.")],
        limits=STALLING_LIMITS,
    )


async def _wait_for(s: Session, kind: type) -> None:
    async for r in s.subscribe():
        if isinstance(getattr(r, "event", None), kind):
            return


@asynccontextmanager
async def prepared(
    journal: Journal, command: str, session_id: str
) -> AsyncIterator[tuple[Session, dict[str, Any]]]:
    """A running session where ``command`` applies, and what the command
    names (a gate, an input, an execution)."""
    d = definition()
    ctx: dict[str, Any] = {}
    if command == "resolve":
        # An unknown effect: a crash while ``charge`` runs, restored.
        async with Session.create(journal, d, session_id=session_id + "_live") as live:
            await live.submit("charge the card")
            await _wait_for(live, ToolStarted)
            head = (await records(journal, live.id))[-1].seq
            copy = await crashed_copy(journal, live.id, head)
            await live.interrupt()
        async with Session.restore(journal, copy, d) as s:
            ctx["execution_id"] = (await s.snapshot()).unknown_effects[0].execution_id
            yield s, ctx
        return
    async with Session.create(journal, d, session_id=session_id) as s:
        if command in ("steer", "cancel_queued", "interrupt"):
            await s.submit("a slow one please")
            await _wait_for(s, ModelOutput)
            if command == "cancel_queued":
                ctx["input_id"] = await s.submit("queued behind it")
        elif command in ("answer", "decide"):
            await s.submit("ask me" if command == "answer" else "deploy it")
            await _wait_for(s, GateOpened)

            # The record is durable before the loop folds it (commit, then
            # fold): wait for the state too, not only for the journal.
            async def folded() -> bool:
                return bool((await s.snapshot()).open_gates)

            await wait_for(folded, poll=0.01)
            ctx["gate_id"] = (await s.snapshot()).open_gates[0].gate_id
        elif command == "compact":
            for text in ("one", "two", "three"):
                await s.submit(text)
                await s.wait_idle()
        elif command == "resume":
            await s.pause()
        yield s, ctx


async def issue(s: Session, command: str, ctx: dict[str, Any], *, other: bool = False) -> Any:
    """Give ``command`` with ``KEY``; ``other``: the same key on other content."""
    match command:
        case "submit":
            return await s.submit("hello there" if not other else "something else", key=KEY)
        case "steer":
            return await s.steer("be brief" if not other else "be long", key=KEY)
        case "cancel_queued":
            return await s.cancel_queued(ctx["input_id"] if not other else "in_other", key=KEY)
        case "answer":
            return await s.answer(ctx["gate_id"], "yes" if not other else "no", key=KEY)
        case "decide":
            return await s.decide(ctx["gate_id"], allow=not other, key=KEY)
        case "resolve":
            return await s.resolve(ctx["execution_id"], "charged" if not other else "?", key=KEY)
        case "interrupt":
            if other:
                return await s.steer("stop", key=KEY)  # the key, on another command
            return await s.interrupt(key=KEY)
        case "compact":
            if other:
                return await s.change_mode("bold", key=KEY)
            return await s.compact(key=KEY)
        case "change_mode":
            return await s.change_mode("careful" if not other else "bold", key=KEY)
        case "pause" | "resume":
            if other:
                return await s.steer("go on", key=KEY)  # the key, on another command
            return await (s.pause if command == "pause" else s.resume)(key=KEY)
    raise ValueError(command)


def effects(command: str, rs: list[Record]) -> int:
    """How many times ``command`` took effect in the records ``rs``."""
    events = [r.event for r in rs]
    match command:
        case "submit":
            return sum(
                isinstance(e, InputQueued) and "hello there" in str(e.messages) for e in events
            )
        case "steer":
            return sum(isinstance(e, SteerQueued) for e in events)
        case "cancel_queued":
            return sum(isinstance(e, InputCancelled) and e.reason == "requested" for e in events)
        case "answer" | "decide":
            return sum(isinstance(e, GateResolved) for e in events)
        case "resolve":
            return sum(isinstance(e, ToolResolved) for e in events)
        case "interrupt":
            # The keyed record is the effect: the turn it stops ends once
            # (interrupted, or crashed when the process died first).
            ended = sum(isinstance(e, TurnEnded) and e.turn == 1 for e in events)
            assert ended <= 1
            return sum(isinstance(e, CommandKeyed) for e in events)
        case "compact":
            return sum(isinstance(e, CompactionStarted) for e in events)
        case "change_mode":
            return sum(isinstance(e, LoopModeChanged) for e in events)
        case "pause":
            return sum(isinstance(e, LoopPaused) for e in events)
        case "resume":
            return sum(isinstance(e, LoopResumed) for e in events)
    raise ValueError(command)


def keyed_records(rs: list[Record]) -> list[Record]:
    return [r for r in rs if isinstance(r.event, CommandKeyed) and r.event.key == KEY]


# -- the crash child -------------------------------------------------------------------


class KillOnKeyed(ForwardingJournal):
    """SIGKILLs this process right after an append that holds a ``command.keyed``
    record returned (once ``armed``): the command is durable, its caller never
    hears back."""

    armed = False

    async def append(
        self, lease: SessionLease, drafts: Sequence[Draft], *, expected_seq: int
    ) -> list[Record]:
        stored = await self.inner.append(lease, drafts, expected_seq=expected_seq)
        if self.armed and any(isinstance(d.event, CommandKeyed) for d in drafts):
            kill_self()
        return stored


async def crash(command: str, url: str, session_id: str, workdir: str) -> None:
    """Prepare ``command``'s session, write what it names to WORKDIR/ctx.json,
    then give the keyed command and die right after it is committed."""
    async with open_journal(url) as real:
        journal = KillOnKeyed(real)
        async with prepared(journal, command, session_id) as (s, ctx):
            ctx["session"] = s.id
            await trio.Path(workdir, "ctx.json").write_text(json.dumps(ctx))
            journal.armed = True
            await issue(s, command, ctx)
    raise AssertionError("the keyed command was never committed")


__all__ = ["COMMANDS", "KEY", "crash", "definition", "effects", "issue", "prepared", "records"]
