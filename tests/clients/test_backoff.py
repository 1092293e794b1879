"""A polling stream's pauses: short after records came, doubling to ``poll``."""

from __future__ import annotations

from session.clients.client import Backoff


def test_pauses_start_at_poll_and_shorten_after_records() -> None:
    backoff = Backoff(0.08)
    assert [backoff.pause() for _ in range(2)] == [0.08, 0.08]
    backoff.found()
    assert [backoff.pause() for _ in range(6)] == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]
    backoff.found()
    assert backoff.pause() == 0.01
