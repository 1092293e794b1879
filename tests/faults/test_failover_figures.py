"""The fault run's failover figure: from a fault to the first record of the
session's next owner, which after a SIGKILL may be the killed host's id
launched again (a new process under a new lease), never a stopped host's own
later records."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from journal import WriterSpan

from .harness import Fault, failovers

S = 1_000_000_000  # ns


def records(*ats: int) -> list[Any]:
    """Records of seqs 1, 2, ... committed at ``ats`` (seconds)."""
    return [SimpleNamespace(seq=n, at=at * S) for n, at in enumerate(ats, start=1)]


def test_a_killed_host_launched_again_that_takes_its_session_back_is_its_next_owner() -> None:
    # h0 wrote seqs 1-2, was killed at 10 s; launched again, it took the
    # session back at 15.5 s (seq 3), before h1 could.
    spans = {"s": [WriterSpan(first_seq=1, incarnation=1, owner="h0"),
                   WriterSpan(first_seq=3, incarnation=2, owner="h0")]}  # fmt: skip
    found = failovers([Fault("SIGKILL", "h0", 10 * S, ("s",))], {"s": records(1, 2, 15)}, spans)
    assert found == {"SIGKILL": [5.0]}


def test_a_stopped_hosts_own_later_records_are_not_a_failover() -> None:
    stopped = Fault("SIGSTOP past the lease", "h0", 10 * S, ("s",))
    h0, h1, h0_again = (
        WriterSpan(first_seq=1, incarnation=1, owner="h0"),
        WriterSpan(first_seq=3, incarnation=2, owner="h1"),
        WriterSpan(first_seq=4, incarnation=3, owner="h0"),
    )
    found = failovers([stopped], {"s": records(1, 2, 16, 30)}, {"s": [h0, h1, h0_again]})
    assert found == {"SIGSTOP past the lease": [6.0]}
    # Only h0 itself wrote after its stop: no failover to count.
    h0_again = WriterSpan(first_seq=3, incarnation=3, owner="h0")
    assert failovers([stopped], {"s": records(1, 2, 30)}, {"s": [h0, h0_again]}) == {}
