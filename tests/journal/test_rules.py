"""The append rules as pure functions, without a backend."""

from __future__ import annotations

import pytest

from journal import ConflictError, Draft, DuplicateEventError, FencedError
from journal.codec import GENESIS, chain, encode_event
from journal.events import CHECKPOINT_STREAM, SessionCheckpoint
from journal.record import check_drafts
from journal.rules import (
    Mark,
    Pending,
    Row,
    check_lease,
    decide_append,
    plan_append,
    repeated_id,
    stored_records,
)

from .contract import checkpoint, drafts


def pending(ds: list[Draft]) -> list[Pending]:
    return [(d.id, d.loop, d.cause, d.event, encode_event(d.event)) for d in ds]


def test_a_plan_chains_digests_numbers_seqs_and_marks_checkpoints() -> None:
    rows: list[Row] = []
    marks: list[Mark] = []
    planned = pending([*drafts("x", 2), checkpoint(1)])
    records = plan_append("s", 4, GENESIS, planned, 7, rows, marks)
    assert [r.seq for r in records] == [5, 6, 7]
    digest = GENESIS
    for record, row, p in zip(records, rows, planned, strict=True):
        digest = chain(digest, record.seq, p[0], "s", p[1], 7, p[2], p[4])
        assert record.digest == digest
        assert row == ("s", record.seq, p[0], p[1], 7, p[2], digest, p[4])
    assert marks == [("s", 7)]


def test_a_subclass_of_a_checkpoint_is_marked_too() -> None:
    # The plan tells checkpoints by exact class first; an instance of a
    # subclass is stored under the same tag, so it is indexed all the same.
    class Mine(SessionCheckpoint, frozen=True):
        pass

    original = checkpoint(1).event
    assert isinstance(original, SessionCheckpoint)
    event = Mine(previous=0, loops=original.loops)
    marks: list[Mark] = []
    planned = pending([*drafts("x", 1), Draft(id="cp", loop=CHECKPOINT_STREAM, event=event)])
    plan_append("s", 0, GENESIS, planned, 7, [], marks)
    assert marks == [("s", 2)]


def test_idempotency_conflict_and_fencing() -> None:
    rows: list[Row] = []
    stored = pending(drafts("x", 2))
    first = plan_append("s", 0, GENESIS, stored, 1, rows, [])
    # A retry with a stale expected_seq gets the stored records back.
    again, fresh = decide_append("s", 0, 2, first[-1].digest, stored, rows, 9, [], [])
    assert (again, fresh) == (first, False)
    with pytest.raises(ConflictError):
        decide_append("s", 1, 2, first[-1].digest, pending(drafts("y", 1)), [None], 9, [], [])
    # Part stored, part new: the error names a stored id.
    with pytest.raises(DuplicateEventError) as caught:
        stored_records("s", pending(drafts("y", 1)) + stored[:1], [None, rows[0]])
    assert caught.value.event_id == "x-0"
    other = pending([Draft(id="x-0", loop="elsewhere", event=stored[0][3])])
    with pytest.raises(DuplicateEventError):
        stored_records("s", other, rows[:1])
    assert stored_records("s", [], []) is None
    assert repeated_id(["a", "b", "b", "a"]) == "a" and repeated_id(["a", "b"]) is None
    with pytest.raises(FencedError):
        check_lease("s", 1, 2)
    check_lease("s", 2, 2)


def test_drafts_text_checked_field_by_field_past_the_ascii_test() -> None:
    # check_drafts lets an all-ASCII draft through at once; any other goes
    # field by field: valid Unicode passes, a lone surrogate is named.
    event = drafts("x", 1)[0].event
    check_drafts([Draft(id="é-1", loop="boucle-ü", event=event, cause="ñ")])
    for bad, field in [
        (Draft(id="x-\ud800", loop="main", event=event), "event id"),
        (Draft(id="x-1", loop="main-\udfff", event=event), "loop id"),
        (Draft(id="x-1", loop="main", event=event, cause="é\ud83d"), "cause"),
    ]:
        with pytest.raises(ValueError, match=f"^{field} .* is not valid Unicode text"):
            check_drafts([drafts("x", 1)[0], bad])
