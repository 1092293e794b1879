"""What `loopruntime sessions` prints: one row per session of a journal, its
status, owner and the tokens its loops spent, forks listed under their source."""

from __future__ import annotations

import sys
import time

from journal import JournalError

from ..embedded.fork import lineage
from ..embedded.restore import read_states
from ..embedded.status import SessionStatus, Status, describe
from ..replay import open_for_replay
from ..replay.terminal import tracked

__all__ = ["list_sessions"]

_OPEN = "open*"


async def list_sessions(url: str) -> int:
    """Print every session of the journal at ``url`` with its status, forks
    under their source; 1 when a session is damaged (named on stderr)."""
    # Opened like replay: a missing or foreign file is refused, never created.
    async with open_for_replay(url) as journal:
        infos = await journal.sessions()
        hosts = await journal.hosts()
        if not infos:
            print("no sessions")
            return 0
        print(
            f"{'session':<24} {'loops':>5} {'records':>8} {'tokens':>9}  "
            f"{'last activity':<19}  status"
        )
        damaged: list[str] = []
        open_turns = False
        rows: dict[str, str] = {}
        forks: dict[str, list[str]] = {}
        for info in tracked(sorted(infos, key=lambda i: i.updated_at), "reading sessions"):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.updated_at / 1e9))
            try:
                states = await read_states(journal, info.session)
                forked = await lineage(journal, info.session)
            except JournalError as exc:
                # One damaged session must not hide the others from the list.
                damaged.append(f"loopruntime sessions: {exc}")
                seq = getattr(exc, "seq", None)
                status = "damaged" + (f" at seq {seq}" if seq is not None else "")
                rows[info.session] = (
                    f"{info.session:<24} {'?':>5} {info.head:>8} {'?':>9}  {when:<19}  {status}"
                )
                continue
            listed = describe(info, states, hosts)
            label = _OPEN if listed.status is Status.OPEN else listed.status.value
            if listed.status is Status.WAITING_FOR_HOST and listed.detail:
                label = f"{label}: {listed.detail}"
            open_turns = open_turns or listed.status is Status.OPEN
            origin = ""
            if forked is not None:
                forks.setdefault(forked.source, []).append(info.session)
                origin = f"  (fork of {forked.source} at seq {forked.seq})"
            rows[info.session] = (
                f"{info.session:<24} {len(states):>5} {info.head:>8} {listed.tokens_used:>9}  "
                f"{when:<19}  "
                f"{label}{origin}{_hosting(listed)}"
            )
        # Forks are listed under their source (a fork whose source is not in
        # this journal stands on its own).
        shown: set[str] = set()

        def show(session: str, depth: int) -> None:
            shown.add(session)
            print(("  " * depth + "└ " if depth else "") + rows[session])
            for fork in forks.get(session, []):
                if fork not in shown:
                    show(fork, depth + 1)

        nested = {fork for children in forks.values() for fork in children}
        for session in rows:
            if session not in shown and not (
                session in nested and _source_listed(session, forks, rows)
            ):
                show(session, 0)
        if open_turns:
            # The journal alone cannot tell a turn running in a live process from
            # one a crash left open; saying "running" would be a guess.
            print(
                f"{_OPEN}: a turn is open: running in a live process, or left by a crash "
                "(restoring the session settles it)"
            )
        for line in damaged:
            print(line, file=sys.stderr)
        if damaged:
            print(
                "loopruntime sessions: `loopruntime replay SESSION --check` names the first "
                "bad seq of a damaged session",
                file=sys.stderr,
            )
            return 1
    return 0


def _hosting(status: SessionStatus) -> str:
    """Who owns the session, until when, and why it is in its status."""
    parts: list[str] = []
    if status.owner is not None:
        if status.live:
            until = time.strftime("%H:%M:%S", time.localtime(status.expires_at / 1e9))
            parts.append(f"owner {status.owner}, lease until {until}")
        else:
            parts.append(f"owner {status.owner}, lease expired")
    if status.detail and status.status not in (Status.OPEN, Status.WAITING_FOR_HOST):
        parts.append(status.detail)
    return f"  [{'; '.join(parts)}]" if parts else ""


def _source_listed(session: str, forks: dict[str, list[str]], rows: dict[str, str]) -> bool:
    return any(session in children and source in rows for source, children in forks.items())
