"""What a session is doing, from its loops' folds and its live lease.

The journal alone cannot tell a turn running in a live process from one a
crash left open; the lease can: a turn is "running" only while its owner's
lease is live (as the journal judges it, ``SessionInfo.live``).  ``describe``
is pure; ``statuses`` reads each session's fold and lease.  ``loopruntime sessions`` and
``Client.sessions`` show the same words.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import msgspec

from journal import BlockingJournal, HostInfo, Journal, JournalError, SessionInfo
from loopruntime import LoopState, LoopStatus
from loopruntime.models import Waiting

from .checkpoints import SessionFolder
from .restore import read_states

__all__ = [
    "SessionStatus",
    "Status",
    "blocking_statuses",
    "describe",
    "never_started",
    "serves",
    "statuses",
    "waiting_for_host",
]


class Status(enum.Enum):
    IDLE = "idle"
    """Nothing to do: no open turn, no entry waiting (a host may hold it or not)."""
    RUNNING = "running"
    """A turn is open or inbox entries are being applied, under a live lease."""
    RATE_LIMITED = "waiting for a rate limit"
    """A turn is open and its model call waits for the process's shared rate
    limit (known only in the process running it: ``Session.rate_limited``)."""
    PAUSED = "paused"
    """A loop was paused: it starts no new work until ``loopruntime resume``
    (its gates stay answerable meanwhile)."""
    WAITING_ON_PERSON = "waiting on a person"
    """A gate (an approval or a question) is open: ``answer`` / ``decide``."""
    UNKNOWN_EFFECTS = "unknown effects"
    """A tool call's outcome is unknown: ``resolve`` each one."""
    CRASHED = "crashed and unowned"
    """Work was in flight and its owner's lease expired: the next host running
    its definition takes it over."""
    OPEN = "open"
    """A turn is open in a session no host owns: running in a process that
    opened it directly, or left by a crash (restoring it settles it)."""
    WAITING_FOR_HOST = "waiting for a host"
    """Inbox entries wait and no live host owns the session."""
    STOPPED = "stopped"
    """Every loop stopped for good."""
    DAMAGED = "damaged"
    """Its records do not read back (``replay --check`` names the first bad seq)."""


class SessionStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A session as a person watching hosts wants to see it."""

    session: str
    status: Status
    detail: str
    """Why, in words: what it waits for, what to do ("" when idle)."""
    owner: str | None
    """The owner of the lease, live or expired."""
    expires_at: int
    """unix ns when the owner's lease expires (0: none, or handed over)."""
    live: bool
    """Whether the owner's lease was live when the session was listed."""
    pending: int
    """Inbox entries not yet applied."""
    definition: str | None
    head: int
    loops: int
    updated_at: int
    tokens_used: int = 0
    """Tokens every loop of it spent, children included (the sum of their
    folds; docs/boundaries.md says which of a call's tokens count)."""


def describe(
    info: SessionInfo,
    states: Mapping[str, LoopState] | None,
    hosts: Sequence[HostInfo] | None = None,
    rate_limited: Mapping[str, Waiting] | None = None,
) -> SessionStatus:
    """The status of the session ``info`` lists, whose loops fold to
    ``states`` (None: its records do not read back); ``hosts``, the
    registered hosts, lets it say when no live host serves its definition;
    ``rate_limited``, the loops of it waiting for a shared rate limit
    (``Session.rate_limited()``, in the process running it)."""
    live = info.live
    status, detail = _decide(info, states, live, hosts)
    if status in (Status.RUNNING, Status.OPEN) and rate_limited and states is not None:
        # Open here, in the process that passed what its loops wait for.
        status, detail = _rate_limited(states, rate_limited, status, detail)
    return SessionStatus(
        session=info.session,
        status=status,
        detail=detail,
        owner=info.owner,
        expires_at=info.expires_at,
        live=live,
        pending=info.pending,
        definition=info.definition,
        head=info.head,
        loops=len(states) if states is not None else 0,
        updated_at=info.updated_at,
        tokens_used=sum(st.tokens_used for st in states.values()) if states is not None else 0,
    )


def _decide(
    info: SessionInfo,
    states: Mapping[str, LoopState] | None,
    live: bool,
    hosts: Sequence[HostInfo] | None,
) -> tuple[Status, str]:
    owner = info.owner
    waiting = f"{info.pending} waiting in the inbox" if info.pending else ""
    if states is None:
        return Status.DAMAGED, "its records do not read back: `loopruntime replay --check`"
    loops = {st.status for st in states.values()}
    if LoopStatus.PAUSED in loops:
        # Only a resume releases it: said first, whatever else waits.
        paused = sorted(k for k, st in states.items() if st.status is LoopStatus.PAUSED)
        which = f"loop {paused[0]}" if len(paused) == 1 else f"loops {', '.join(paused)}"
        return Status.PAUSED, _join(f"{which} paused: `loopruntime resume`", waiting)
    if LoopStatus.AWAITING_RESOLUTION in loops:
        return Status.UNKNOWN_EFFECTS, _join(
            "a tool call's outcome is unknown: `loopruntime resolve`", waiting
        )
    if LoopStatus.AWAITING_GATE in loops:
        return Status.WAITING_ON_PERSON, _join(
            "a gate is open: `loopruntime answer` or `decide`", waiting
        )
    if LoopStatus.RUNNING in loops:
        if live:
            return Status.RUNNING, _join("a turn is running", waiting)
        if owner is not None:
            return Status.CRASHED, _join(
                f"owner {owner} is gone (its lease expired) with a turn open",
                _for_host(info, hosts),
                waiting,
            )
        return Status.OPEN, _join(
            "a turn is open and no host owns it: running in a process that opened it "
            "directly, or left by a crash (restoring it settles it)",
            waiting,
        )
    if info.pending:
        if live:
            return Status.RUNNING, _join(waiting, "being applied")
        wanted = waiting_for_host(info, live, hosts)
        return Status.WAITING_FOR_HOST, _join(wanted or "", waiting)
    if states and loops == {LoopStatus.STOPPED}:
        return Status.STOPPED, "every loop stopped"
    return Status.IDLE, never_started(info) or ""


def _rate_limited(
    states: Mapping[str, LoopState], waits: Mapping[str, Waiting], status: Status, detail: str
) -> tuple[Status, str]:
    # Only a loop whose turn is open waits for its model call: a stale entry
    # for a loop that moved on is not shown.
    open_turns = {k for k, st in states.items() if st.status is LoopStatus.RUNNING}
    waiting = sorted((k, w) for k, w in waits.items() if k in open_turns)
    if not waiting or len(waiting) < len(open_turns):
        # Some turn is doing work: the session is as it was.
        return status, detail
    names = sorted({w.limiter for _, w in waiting})
    return Status.RATE_LIMITED, (
        f"its model call waits for the shared rate limit of {', '.join(names)} "
        "(raise the limit, or wait)"
    )


def never_started(info: SessionInfo) -> str | None:
    """Words for a session ``info`` lists with no records and no entries
    waiting (None: it has either): most often a host refused every command
    sent to it, its create included, and each entry's outcome says why."""
    if info.head or info.pending:
        return None
    return (
        "never started: no record was written and no command waits (a command a host "
        "refused has its reason in its outcome: `loopruntime submit --wait`, `Client.wait`)"
    )


def waiting_for_host(info: SessionInfo, live: bool, hosts: Sequence[HostInfo] | None) -> str | None:
    """Why the session ``info`` lists waits for a host, in words (None: it
    does not, having no entries waiting or a live owner).  ``live``: whether
    its owner's lease is live; ``hosts``: the registered hosts (None when
    not known), which say whether any live one serves its definition.  The
    console and ``loopruntime sessions`` both show these words."""
    if not info.pending or live:
        return None
    return _for_host(info, hosts)


def serves(hosts: Sequence[HostInfo], definition: str) -> bool:
    """Whether a live host among ``hosts`` serves ``definition``."""
    return any(h.live and definition in h.definitions for h in hosts)


def _for_host(info: SessionInfo, hosts: Sequence[HostInfo] | None) -> str:
    name = info.definition
    if name is None:
        return "the next host running its definition takes it"
    if hosts is not None and not serves(hosts, name):
        return (
            f"no live host serves definition {name!r}: start one that does "
            "(`loopruntime host --definitions module:NAME`)"
        )
    return f"waits for a host running definition {name!r}"


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


async def statuses(journal: Journal) -> list[SessionStatus]:
    """Every session's status, oldest activity first.  A session whose
    records do not read back is listed as damaged, never hides the others."""
    infos = await journal.sessions()
    hosts = await journal.hosts()
    found: list[SessionStatus] = []
    for info in sorted(infos, key=lambda i: i.updated_at):
        try:
            states: dict[str, LoopState] | None = await read_states(journal, info.session)
        except JournalError:
            states = None
        found.append(describe(info, states, hosts))
    return found


def blocking_statuses(journal: BlockingJournal) -> list[SessionStatus]:
    """``statuses`` through a blocking journal (a client's, in a worker
    thread): each session's loops folded from its records (checkpoints are
    derived data)."""
    hosts = journal.hosts()
    found: list[SessionStatus] = []
    for info in sorted(journal.sessions(), key=lambda i: i.updated_at):
        folder = SessionFolder()
        try:
            while batch := journal.read(info.session, after=folder.head):
                for record in batch:
                    folder.feed(record)
        except JournalError:
            found.append(describe(info, None, hosts))
            continue
        found.append(describe(info, {k: v for k, v in folder.states.items() if v.loop}, hosts))
    return found
