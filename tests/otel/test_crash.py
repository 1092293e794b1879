"""A session SIGKILLed mid-turn and restored gives one trace, no span twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from journal import open_journal
from journal.events import TurnEnded, TurnStarted
from session.traces.otel import span_id_of, spans_of, trace_id_of
from tests.support import crash_points as scenario
from tests.support.processes import run_child

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("first_try", [9, 17, 26])
async def test_a_restored_session_continues_its_trace(tmp_path: Path, first_try: int) -> None:
    # Group commits vary with scheduling, so the kill after a given commit may
    # fall between turns: the next commits are tried until one falls inside.
    for kill_after in range(first_try, first_try + 8):
        workdir = tmp_path / str(kill_after)
        workdir.mkdir()
        killed = await run_child("crash-traces", str(workdir), str(kill_after))
        assert killed.returncode == -9, killed.stderr.decode()
        restored = await run_child("crash-traces-restore", str(workdir))
        assert restored.returncode == 0, restored.stderr.decode()
        head = int((workdir / "head").read_text())
        async with open_journal(scenario.journal_url(workdir)) as journal:
            records = [r async for r in journal.read(scenario.SESSION)]
        started = {r.event.turn for r in records[:head] if isinstance(r.event, TurnStarted)}
        ended = {r.event.turn for r in records[:head] if isinstance(r.event, TurnEnded)}
        if started - ended:
            break  # the kill fell inside a turn: it started before and ended after
    else:
        pytest.fail(f"no kill from commit {first_try} on fell inside a turn")
    emitted = [json.loads(line) for line in (workdir / "spans").read_text().splitlines()]
    # One trace, each span once.
    assert {s["trace"] for s in emitted} == {trace_id_of(scenario.SESSION)}
    ids = [s["span"] for s in emitted]
    assert len(ids) == len(set(ids)), "a span was emitted twice"
    # Every emitted span is the one the journal gives, under the same parent.
    expected = {
        s.context.span_id: (s, closed)
        for s, closed in zip(
            spans_of(scenario.SESSION, records),
            _closing_seqs(records),
            strict=True,
        )
    }
    for s in emitted:
        span, _ = expected[s["span"]]
        assert (s["name"], s["parent"]) == (
            span.name,
            span.parent.span_id if span.parent is not None else None,
        )
    # Each span closed after the kill was emitted by the restored process;
    # the turn cut by the kill among them, with its earlier calls from before.
    got = {s["span"]: s["phase"] for s in emitted}
    for span_id, (span, closed) in expected.items():
        if closed > head:
            assert got.get(span_id) == "restore", (span.name, closed, head)
    # The turn the kill cut: started by the first process, ended by the second,
    # its span emitted once, by the second, in the trace the first began.
    [open_turn] = started - ended
    turn_span = span_id_of(scenario.SESSION, "turn", "main", str(open_turn))
    assert got[turn_span] == "restore"
    before = [s for s in emitted if s["parent"] == turn_span and expected[s["span"]][1] <= head]
    assert all(s["phase"] == "run" for s in before)


def _closing_seqs(records: list) -> list[int]:
    from session.traces.otel import SpanBuilder

    return [span.closed_by for span in SpanBuilder(scenario.SESSION).feed_all(records)]
