"""The client contract: what every client kind does against a host in another
process.  Each scenario is an async function of a client (``Client`` under
trio or asyncio, or ``SyncClient`` through ``ThreadedSync``) and the host's
id; ``test_contract.py`` runs each one every way, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from journal import InboxKeyError, Record, SessionNotFoundError
from journal.content import Text
from journal.events import (
    CommandKeyed,
    GateOpened,
    GateResolved,
    InputQueued,
    LoopModeChanged,
    ModelMessageCommitted,
    SteerQueued,
    TurnEnded,
)
from session import CommandRefusedError, InvalidContentError, WaitTimeoutError

__all__ = ["SCENARIOS"]

HANG_GUARD = 120.0


def fresh(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def read_until(
    client: Any, session_id: str, done: Callable[[Record], bool], *, after: int = 0
) -> list[Record]:
    """The session's records after ``after`` up to the first that is ``done``."""
    seen: list[Record] = []
    with anyio.fail_after(HANG_GUARD):  # a hang guard, not a timing assertion
        async for record in client.subscribe(session_id, after):
            seen.append(record)
            if done(record):
                return seen
    raise AssertionError(f"the stream of {session_id} ended before the record looked for")


def reply_text(records: list[Record]) -> str:
    return " ".join(
        b.text
        for r in records
        if isinstance(r.event, ModelMessageCommitted)
        for b in r.event.message.blocks
        if isinstance(b, Text)
    )


def ended(record: Record) -> bool:
    return isinstance(record.event, TurnEnded)


async def converse(client: Any, host_id: str) -> None:
    """create, submit, wait, and the reply read back through subscribe."""
    sid = await client.create("echo", key=fresh("create"))
    entry = await client.submit(sid, "hello there", key="s1")
    assert entry.number == 2 and not entry.consumed
    outcome = await client.wait(sid, "s1", timeout=HANG_GUARD)
    assert isinstance(outcome.value, str) and outcome.value.startswith("in_")
    records = await read_until(client, sid, ended)
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    [queued] = [r for r in records if isinstance(r.event, InputQueued)]
    assert isinstance(queued.event, InputQueued)
    assert queued.event.input_id == outcome.value
    # The outcome names the command's own record (command.keyed, carrying the
    # entry's key), committed with the input it made.
    [keyed] = [r for r in records if r.id == outcome.record]
    assert isinstance(keyed.event, CommandKeyed) and keyed.event.key == "s1"
    assert keyed.seq < queued.seq
    assert reply_text(records) == "You said: hello there"
    last = records[-1].event
    assert isinstance(last, TurnEnded) and last.outcome == "completed"
    # Subscribing after a seq starts right after it.
    later = await read_until(client, sid, ended, after=queued.seq)
    assert later[0].seq == queued.seq + 1


async def retries_are_one_input(client: Any, host_id: str) -> None:
    """The same key again is the same entry, applied once; another command
    under it is refused before anything is written."""
    sid = await client.create("echo", key="c")
    assert await client.create("echo", session_id=sid, key="c") == sid
    first = await client.submit(sid, "once", key="m1")
    again = await client.submit(sid, "once", key="m1")
    assert again.number == first.number
    with pytest.raises(InboxKeyError):
        await client.submit(sid, "something else", key="m1")
    await client.wait(sid, "m1", timeout=HANG_GUARD)
    await client.submit(sid, "twice", key="m2")
    await client.wait(sid, "m2", timeout=HANG_GUARD)
    records = await read_until(client, sid, second_end)
    inputs = [
        b.text
        for r in records
        if isinstance(r.event, InputQueued)
        for m in r.event.messages
        for b in m.blocks
        if isinstance(b, Text)
    ]
    assert inputs == ["once", "twice"]


def second_end(record: Record) -> bool:
    return isinstance(record.event, TurnEnded) and record.event.turn == 2


async def answers_a_gate(client: Any, host_id: str) -> None:
    """A question gate opened by the loop, answered through the client."""
    sid = await client.create("confirm", key="c")
    await client.submit(sid, "send the report", key="m1")
    records = await read_until(client, sid, lambda r: isinstance(r.event, GateOpened))
    gate = records[-1].event
    assert isinstance(gate, GateOpened) and gate.prompt == "Shall I send the report?"
    # A wrong gate id is refused by the owner: nothing applied.
    await client.answer(sid, "gate_nope", "yes", key="a0")
    with pytest.raises(CommandRefusedError) as refused:
        await client.wait(sid, "a0", timeout=HANG_GUARD)
    assert refused.value.session == sid and refused.value.key == "a0"
    await client.answer(sid, gate.gate_id, "yes, send it", key="a1")
    await client.wait(sid, "a1", timeout=HANG_GUARD)
    rest = await read_until(client, sid, ended, after=records[-1].seq)
    assert any(isinstance(r.event, GateResolved) for r in rest)
    assert reply_text(rest) == "Done. The person said: yes, send it"


async def other_commands(client: Any, host_id: str) -> None:
    """steer, change_mode, compact, interrupt, pause, resume, cancel_queued,
    decide and resolve each reach the owner and come back applied or refused by name."""
    sid = await client.create("echo", key="c")
    await client.submit(sid, "first", key="m1")
    await client.wait(sid, "m1", timeout=HANG_GUARD)
    await read_until(client, sid, ended)
    await client.change_mode(sid, None, key="mode")
    await client.wait(sid, "mode", timeout=HANG_GUARD)
    await client.steer(sid, "be brief", key="steer")
    steered = await client.wait(sid, "steer", timeout=HANG_GUARD)
    assert isinstance(steered.value, str)
    await client.compact(sid, key="compact")
    await client.wait(sid, "compact", timeout=HANG_GUARD)
    await client.interrupt(sid, key="interrupt")
    await client.wait(sid, "interrupt", timeout=HANG_GUARD)
    await client.pause(sid, key="pause")
    assert (await client.wait(sid, "pause", timeout=HANG_GUARD)).value is True
    await client.resume(sid, key="resume")
    assert (await client.wait(sid, "resume", timeout=HANG_GUARD)).value is True
    for key, send in [
        ("cancel", client.cancel_queued(sid, "in_nope", key="cancel")),
        ("decide", client.decide(sid, "gate_nope", True, key="decide")),
        ("resolve", client.resolve(sid, "exe_nope", "done", key="resolve")),
        ("mode2", client.change_mode(sid, "no-such-mode", key="mode2")),
        ("pause2", client.pause(sid, key="pause2", loop="no-such-loop")),
    ]:
        await send
        with pytest.raises(CommandRefusedError):
            await client.wait(sid, key, timeout=HANG_GUARD)
    records = await read_until(client, sid, lambda r: isinstance(r.event, SteerQueued))
    assert not any(isinstance(r.event, LoopModeChanged) and r.event.mode for r in records)


async def lists_sessions(client: Any, host_id: str) -> None:
    sid = await client.create("echo", key="c")
    await client.submit(sid, "hi", key="m1")
    await client.wait(sid, "m1", timeout=HANG_GUARD)
    info = {i.session: i for i in await client.sessions()}[sid]
    assert info.owner == host_id and info.definition == "echo" and info.pending == 0


async def waits_for_a_missing_host(client: Any, host_id: str) -> None:
    """No host runs the definition: the command waits in the inbox, and
    ``wait`` says so, naming the session and the definition."""
    sid = await client.create("nobody-runs-this", key="c")
    await client.submit(sid, "anyone?", key="m1")
    with pytest.raises(WaitTimeoutError) as caught:
        await client.wait(sid, "m1", timeout=0.2)
    error = caught.value
    assert isinstance(error, TimeoutError)
    assert (error.session, error.owner, error.definition) == (sid, None, "nobody-runs-this")
    assert sid in str(error) and "'nobody-runs-this'" in str(error)
    assert "no host has taken the session" in str(error) and "loopruntime host" in str(error)
    info = {i.session: i for i in await client.sessions()}[sid]
    assert info.pending == 2 and info.owner is None


async def refuses_bad_input(client: Any, host_id: str) -> None:
    """Bad input is refused before anything is written."""
    sid = await client.create("echo", key="c")
    with pytest.raises(KeyError, match="never-sent"):
        await client.wait(sid, "never-sent", timeout=1)
    with pytest.raises(SessionNotFoundError):
        await client.submit(fresh("ses_missing"), "hi", key="m1")
    with pytest.raises(InvalidContentError):
        await client.submit(sid, ["not a block"], key="m1")
    with pytest.raises(ValueError, match="idempotency key"):
        await client.submit(sid, "hi", key="")
    with pytest.raises(ValueError, match="timeout"):
        await client.wait(sid, "c", timeout=-1)
    # Nothing of the refused commands was stored: "m1" is still free.
    entry = await client.submit(sid, "hi", key="m1")
    assert entry.number == 2


SCENARIOS = [
    converse,
    retries_are_one_input,
    answers_a_gate,
    other_commands,
    lists_sessions,
    waits_for_a_missing_host,
    refuses_bad_input,
]
