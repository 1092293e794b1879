"""The console's own logic without a browser or a server: statuses and the
list's order, the transcript items (the replay tool's words), the actions,
and the session list kept current by folding only what changed."""

from __future__ import annotations

from typing import Any

import pytest

from journal import ForwardingJournal, Record, SessionInfo
from journal.events import GateOpened, ToolStarted
from loopruntime import LoopState
from session import Session
from session.console.overview import Overview
from session.console.views import (
    TranscriptFeed,
    _spans,
    actions_of,
    session_row,
    session_status,
    sorted_rows,
    summary_of,
)
from session.replay import render_transcript
from tests.console.scenario import definition
from tests.host.support import trio_clock_journal

NOW = 1_000_000_000_000


def info(
    owner: str | None = None, expires: int = 0, updated: int = 1, session: str = "s"
) -> SessionInfo:
    return SessionInfo(
        session=session,
        head=3,
        incarnation=1,
        created_at=0,
        updated_at=updated,
        owner=owner,
        expires_at=expires,
    )


def gate() -> GateOpened:
    return GateOpened(
        gate_id="g1", kind="permission", execution_id="e1", tool_name="t", prompt="ok?"
    )


def started() -> ToolStarted:
    return ToolStarted(execution_id="e2", tool_use_id="u", name="charge", input={"amount": 1})


@pytest.mark.parametrize(
    ("state", "owner", "expires", "status"),
    [
        (LoopState(), None, 0, "idle"),
        (LoopState(gates={"g1": gate()}, turn_open=True), None, 0, "waiting"),
        (LoopState(unknown={"e2": started()}, turn_open=True), "h", NOW + 1, "unknown"),
        (LoopState(turn_open=True), "h", NOW + 1, "running"),
        (LoopState(turn_open=True), "h", NOW - 1, "crashed"),
        (LoopState(turn_open=True), None, 0, "crashed"),
        (LoopState(turn_open=True, stopped=True), None, 0, "idle"),
        (LoopState(paused=True, gates={"g1": gate()}, turn_open=True), "h", NOW + 1, "paused"),
        (LoopState(paused=True, stopped=True), None, 0, "idle"),
    ],
)
def test_a_sessions_status(state: LoopState, owner: str | None, expires: int, status: str) -> None:
    assert session_status(summary_of({"m": state}, 3), info(owner, expires), NOW) == status


def test_the_list_puts_what_needs_a_person_first_then_the_newest() -> None:
    rows = [
        session_row(info(session="old", updated=1), summary_of({"m": LoopState()}, 3), now_ns=NOW),
        session_row(info(session="new", updated=5), summary_of({"m": LoopState()}, 3), now_ns=NOW),
        session_row(
            info(session="ask", updated=0),
            summary_of({"m": LoopState(gates={"g1": gate()})}, 3),
            now_ns=NOW,
        ),
        session_row(info(session="bad", updated=9), None, now_ns=NOW, problem="damaged at 3"),
        session_row(
            info(session="lost", updated=2),
            summary_of({"m": LoopState(unknown={"e2": started()})}, 3),
            now_ns=NOW,
        ),
    ]
    assert [r.session for r in sorted_rows(rows)] == ["ask", "lost", "bad", "new", "old"]
    assert rows[3].status == "damaged" and rows[3].problem == "damaged at 3"


def test_actions_are_the_open_gates_and_unknown_effects() -> None:
    states = {"main": LoopState(gates={"g1": gate()}, unknown={"e2": started()})}
    assert actions_of(states) == {
        "gates": [
            {
                "loop": "main",
                "gate_id": "g1",
                "kind": "permission",
                "prompt": "ok?",
                "choices": None,
                "tool": "t",
                "preview": None,
                "form": None,
                "form_title": "",
                "form_description": "",
                "fields": None,
                "url": None,
                "link": None,
                "needs_value": False,
                "reviews": [],
            }
        ],
        "unknown": [
            {"loop": "main", "execution_id": "e2", "name": "charge", "input": {"amount": 1}}
        ],
        "paused": [],
    }


def test_a_paused_loop_is_offered_for_resume_and_listed_before_running_work() -> None:
    states = {"main": LoopState(paused=True, turn_open=True), "c": LoopState(paused=True)}
    states["done"] = LoopState(paused=True, stopped=True)
    assert actions_of(states)["paused"] == [
        {"loop": "main", "turn_open": True},
        {"loop": "c", "turn_open": False},
    ]
    rows = [
        session_row(info(session="run", updated=9), summary_of({"m": LoopState()}, 3), now_ns=NOW),
        session_row(
            info(session="held", updated=0),
            summary_of({"m": LoopState(paused=True)}, 3),
            now_ns=NOW,
        ),
    ]
    assert [r.session for r in sorted_rows(rows)] == ["held", "run"]
    assert (rows[1].status, rows[1].status_text) == ("paused", "paused")


def test_spans_keep_text_that_holds_the_markers_as_it_is() -> None:
    assert _spans("\ue000user\ue001user: \ue002hi") == [["user", "user: "], ["", "hi"]]
    assert _spans("odd \ue000 text") == [["", "odd "], ["", "\ue000 text"]]


async def _records(*said: str) -> list[Record]:
    journal = trio_clock_journal()
    async with Session.create(journal, definition(), session_id="s") as s:
        for text in said:
            await s.submit(text)
            await s.wait_idle()
    return [r async for r in journal.read("s")]


async def test_items_say_what_the_replay_transcript_says(autojump_clock: Any) -> None:
    records = await _records("hello", "page it", "stream it")
    feed = TranscriptFeed()
    shown = []
    for r in records:
        item = feed.item(r)
        assert item["seq"] == r.seq and item["id"] == r.id
        for line in item["lines"]:
            shown.append(
                f"{r.seq:>5} " + "    " * line["depth"] + "".join(t for _, t in line["spans"])
            )
    assert "\n".join(shown) == render_transcript(records)


async def test_a_model_calls_records_carry_its_streamed_text(autojump_clock: Any) -> None:
    from tests.console.scenario import STREAMED

    records = await _records("stream it")
    feed = TranscriptFeed()
    streams = [feed.item(r)["stream"] for r in records]
    streams = [s for s in streams if s is not None]
    assert streams[0]["state"] == "open" and streams[-1]["state"] == "closed"
    assert {s["effect"] for s in streams} == {streams[0]["effect"]}
    more = [s["text"] for s in streams if s["state"] == "more"]
    assert len(more) > 1 and "".join(more) == STREAMED


class CountingReads(ForwardingJournal):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.read_from: list[tuple[str, int]] = []

    def read(self, session: str, *, after: int = 0, skip_stream: str | None = None) -> Any:
        self.read_from.append((session, after))
        return self.inner.read(session, after=after, skip_stream=skip_stream)


async def test_the_list_folds_only_the_records_after_the_last_it_saw(autojump_clock: Any) -> None:
    inner = trio_clock_journal()
    journal = CountingReads(inner)
    overview = Overview(journal, fresh=0, clock=lambda: 0)
    async with Session.create(inner, definition(), session_id="s") as s:
        await s.submit("hello")
        await s.wait_idle()
        [row] = await overview.rows()
        first = row.records
        assert row.status == "idle" and first == await inner.head("s")
        journal.read_from.clear()
        await s.submit("book it")
        await s.wait_idle()
        [row] = await overview.rows()
        assert row.status == "waiting" and row.records > first
        assert journal.read_from == [("s", first)]
        journal.read_from.clear()
        await overview.rows()
        assert journal.read_from == []  # nothing changed, nothing read


async def test_the_list_keeps_the_states_of_the_latest_sessions_only(autojump_clock: Any) -> None:
    journal = trio_clock_journal()
    overview = Overview(journal, fresh=0, clock=lambda: 0, keep=1)
    async with (
        Session.create(journal, definition(), session_id="a") as a,
        Session.create(journal, definition(), session_id="b") as b,
    ):
        for s in (a, b):
            await s.submit("hello")
            await s.wait_idle()
        assert {r.session: r.status for r in await overview.rows()} == {"a": "idle", "b": "idle"}
        assert overview.folded == 1
        # a's states were let go: its next change is read from the journal again.
        await a.submit("book it")
        await a.wait_idle()
        rows = await overview.rows()
        assert [(r.session, r.status) for r in rows] == [("a", "waiting"), ("b", "idle")]
        assert rows[0].records == await journal.head("a")
        assert overview.folded == 1
