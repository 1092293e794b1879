"""Who wrote each record: `replay --format json` shows the writer spans and
`replay --check` proves that no fenced writer appended after a newer one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import trio

from journal import Draft, WriterSpan, open_journal
from session.cli.main import main
from session.embedded.check.report import Problem
from session.embedded.check.writers import (
    FENCED_NEVER_FOLLOWS,
    SPAN_AT_A_RECORD,
    WRITER_RULES,
    writer_problems,
)
from session.replay import RULES
from tests.replay.bad import SESSION, good_turn


def test_the_writer_rules_are_rules_of_the_checker() -> None:
    assert set(WRITER_RULES) <= set(RULES)


def span(first_seq: int, incarnation: int, owner: str | None = None) -> WriterSpan:
    return WriterSpan(first_seq=first_seq, incarnation=incarnation, owner=owner)


def test_rising_incarnations_pass() -> None:
    assert writer_problems([], 0) == []
    assert writer_problems([span(3, 2), span(5, 4, "host-a"), span(9, 7, "host-b")], 9) == []


@pytest.mark.parametrize(
    ("spans", "found"),
    [
        # host-a's lease (incarnation 4) was fenced by host-b's (5), then appended.
        (
            [span(1, 4, "host-a"), span(6, 5, "host-b"), span(8, 4, "host-a")],
            [Problem(8, FENCED_NEVER_FOLLOWS, "")],
        ),
        ([span(1, 4), span(6, 4)], [Problem(6, FENCED_NEVER_FOLLOWS, "")]),
        ([span(1, 4), span(11, 5)], [Problem(11, SPAN_AT_A_RECORD, "")]),
        ([span(5, 4), span(5, 5)], [Problem(5, SPAN_AT_A_RECORD, "")]),
        ([span(0, 4)], [Problem(0, SPAN_AT_A_RECORD, "")]),
    ],
)
def test_each_writer_rule_names_its_seq(spans: list[WriterSpan], found: list[Problem]) -> None:
    problems = writer_problems(spans, 10)
    assert [(p.seq, p.rule) for p in problems] == [(p.seq, p.rule) for p in found]


def test_the_detail_names_both_writers() -> None:
    (problem,) = writer_problems(
        [span(1, 4, "host-a"), span(6, 5, "host-b"), span(8, 4, "host-a")], 9
    )
    assert problem.detail == (
        "written by incarnation 4 (host host-a) after incarnation 5 (host host-b) had "
        "written from seq 6: a fenced writer appended"
    )


def write_session(path: Path) -> tuple[int, int]:
    """A good turn whose first records an embedded session wrote and whose
    rest host-a wrote; the incarnations of both."""
    events = good_turn()

    async def run() -> tuple[int, int]:
        async with open_journal(f"sqlite:///{path}") as journal:
            opened = await journal.open_session(SESSION)
            first = [Draft(id=f"ev{i}", loop="main", event=e) for i, e in enumerate(events)]
            await journal.append(opened, first[:4], expected_seq=0)
            held = await journal.acquire(SESSION, "host-a", ttl=60)
            await journal.append(held, first[4:], expected_seq=4)
            return opened.incarnation, held.incarnation

    return trio.run(run)


def replay(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["replay", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_shows_the_writers_and_check_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "journal.db"
    opened, held = write_session(db)
    code, out, _ = replay(capsys, "--journal", str(db), SESSION, "--format", "json")
    assert code == 0
    assert json.loads(out)["writers"] == [
        {"first_seq": 1, "incarnation": opened, "host": None},
        {"first_seq": 5, "incarnation": held, "host": "host-a"},
    ]
    code, out, _ = replay(capsys, "--journal", str(db), SESSION, "--check")
    assert code == 0, out


def test_check_fails_where_a_fenced_writer_appended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "journal.db"
    opened, held = write_session(db)
    # As if the embedded session's lease, fenced by host-a's, had appended
    # the last record.
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO writers (session, first_seq, incarnation, owner) VALUES (?, ?, ?, NULL)",
            (SESSION, len(good_turn()), opened),
        )
    conn.close()
    code, out, err = replay(capsys, "--journal", str(db), SESSION, "--check")
    assert code == 1
    seq = len(good_turn())
    assert (
        f"seq {seq}: {FENCED_NEVER_FOLLOWS}: written by incarnation {opened} after "
        f"incarnation {held} (host host-a) had written from seq 5" in err
    )
    assert f"FAILED at seq {seq}" in out
