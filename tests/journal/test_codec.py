"""The codec: event bytes, their failures, the schema version and the digest chain."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import SCHEMA_VERSION, JournalCorruptError, JournalSchemaError
from journal.codec import (
    GENESIS,
    chain,
    chain_body,
    check_schema_version,
    decode_event,
    encode_event,
)
from journal.events import EVENT_TYPES, Event, Notice, TurnStarted
from journal.rules import Row, plan_append

from .contract import EVENT_STRATEGIES, any_event, tag_of


# Each example draws and round-trips one event of every kind: its time grows
# with the catalog, and on a busy machine it passes hypothesis's time bounds.
@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_every_event_type_round_trips(data: st.DataObject) -> None:
    for t in EVENT_TYPES:
        event = data.draw(EVENT_STRATEGIES[t], label=tag_of(t))
        body = encode_event(event)
        back = decode_event(body)
        assert type(back) is t
        assert back == event
        # Deterministic: idempotent appends compare these bytes.
        assert encode_event(back) == body


@given(event=any_event)
def test_the_tag_is_the_event_kind(event: Event) -> None:
    raw = msgspec.msgpack.decode(encode_event(event))
    assert raw["type"] == tag_of(type(event))


def test_an_unknown_kind_is_a_schema_error_naming_it() -> None:
    body = msgspec.msgpack.encode({"type": "future.thing", "x": 1})
    with pytest.raises(JournalSchemaError, match=r"'future\.thing'") as caught:
        decode_event(body, session="s1", seq=7)
    assert "s1" in str(caught.value)
    assert "seq 7" in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1",  # a byte msgpack never uses
        b"",
        b"\x92\x01",  # an array cut short
        msgspec.msgpack.encode([1, 2, 3]),  # msgpack, but not a map
        msgspec.msgpack.encode({"type": "turn.started"}),  # a known kind missing a field
        msgspec.msgpack.encode({"type": "turn.started", "turn": "one"}),  # wrong field type
    ],
)
def test_damaged_bytes_are_corrupt_with_their_place(body: bytes) -> None:
    with pytest.raises(JournalCorruptError) as caught:
        decode_event(body, session="s1", seq=42)
    assert (caught.value.session, caught.value.seq) == ("s1", 42)
    assert "seq 42" in str(caught.value)


def test_decoding_never_leaks_a_msgspec_error() -> None:
    good = encode_event(TurnStarted(turn=1))
    for cut in range(len(good)):
        with pytest.raises((JournalCorruptError, JournalSchemaError)):
            decode_event(good[:cut])


def test_genesis_is_sixteen_zero_bytes() -> None:
    assert bytes(16) == GENESIS


_FIELDS = st.tuples(
    st.integers(min_value=1, max_value=2**63 - 1),  # seq
    st.text(max_size=12),  # id
    st.text(max_size=12),  # session
    st.text(max_size=12),  # loop
    st.integers(min_value=-(2**63), max_value=2**63 - 1),  # at
    st.none() | st.text(max_size=12),  # cause
)


@given(previous=st.binary(min_size=16, max_size=16), fields=_FIELDS, body=st.binary(max_size=200))
def test_chain_is_blake2b_128_of_the_packed_envelope_then_body(
    previous: bytes, fields: tuple[int, str, str, str, int, str | None], body: bytes
) -> None:
    digest = chain(previous, *fields, body)
    assert len(digest) == 16
    envelope = msgspec.msgpack.encode([previous, *fields])
    assert digest == hashlib.blake2b(envelope + body, digest_size=16).digest()


@given(previous=st.binary(min_size=16, max_size=16), body=st.binary(max_size=200))
def test_chain_body_is_the_schema_2_rule(previous: bytes, body: bytes) -> None:
    assert chain_body(previous, body) == hashlib.blake2b(previous + body, digest_size=16).digest()


@given(
    previous=st.binary(min_size=16, max_size=16),
    a=_FIELDS,
    b=_FIELDS,
    body=st.binary(max_size=64),
    other=st.binary(max_size=64),
)
def test_chain_depends_on_every_field_and_the_body(
    previous: bytes,
    a: tuple[int, str, str, str, int, str | None],
    b: tuple[int, str, str, str, int, str | None],
    body: bytes,
    other: bytes,
) -> None:
    if a != b:
        assert chain(previous, *a, body) != chain(previous, *b, body)
    if body != other:
        assert chain(previous, *a, body) != chain(previous, *a, other)


@pytest.mark.parametrize(
    "edit",
    [
        {"seq": 8},
        {"id": "ev-2"},
        {"session": "t"},
        {"loop": "main/child"},
        {"at": 1},
        {"cause": None},
        {"cause": ""},
        # A value moved between two fields is still an edit.
        {"id": "ev-1main", "loop": ""},
    ],
)
def test_editing_any_field_changes_the_digest(edit: dict[str, object]) -> None:
    fields: dict[str, object] = {
        "seq": 7, "id": "ev-1", "session": "s", "loop": "main", "at": 5, "cause": "cmd",
    }  # fmt: skip
    body = encode_event(Notice(code="c", text="x"))
    original = chain(GENESIS, *fields.values(), body)  # type: ignore[arg-type]
    assert chain(GENESIS, *{**fields, **edit}.values(), body) != original  # type: ignore[arg-type]


@given(
    a=st.binary(min_size=16, max_size=16),
    b=st.binary(min_size=16, max_size=16),
    fields=_FIELDS,
    body=st.binary(max_size=64),
)
def test_chain_depends_on_the_previous_digest(
    a: bytes, b: bytes, fields: tuple[int, str, str, str, int, str | None], body: bytes
) -> None:
    if a != b:
        assert chain(a, *fields, body) != chain(b, *fields, body)


def test_a_changed_record_changes_every_later_digest() -> None:
    bodies = [encode_event(Notice(code="c", text=str(i))) for i in range(5)]

    def digests(bs: list[bytes]) -> list[bytes]:
        out, previous = [], GENESIS
        for seq, body in enumerate(bs, 1):
            previous = chain(previous, seq, f"ev-{seq}", "s", "main", 0, None, body)
            out.append(previous)
        return out

    original = digests(bodies)
    changed = digests([*bodies[:2], encode_event(Notice(code="c", text="x")), *bodies[3:]])
    assert changed[:2] == original[:2]
    assert all(c != o for c, o in zip(changed[2:], original[2:], strict=True))


def test_the_hot_paths_chain_by_the_codec_rule() -> None:
    # rules.plan_append inlines codec.chain (the readers do too: the contract's
    # test_digest_chain_links_every_record holds them to it).
    rows: list[Row] = []
    drafts = [
        (f"ev-{i}", "main", None if i % 2 else "cmd", Notice(code="c", text=str(i)))
        for i in range(3)
    ]
    pending = [(i, loop, cause, e, encode_event(e)) for i, loop, cause, e in drafts]
    records = plan_append("s", 4, GENESIS, pending, 99, rows, [])
    previous = GENESIS
    for r, row in zip(records, rows, strict=True):
        expected = chain(previous, r.seq, r.id, "s", r.loop, 99, r.cause, row[7])
        assert r.digest == row[6] == expected
        previous = expected


def test_schema_versions() -> None:
    check_schema_version(SCHEMA_VERSION, where="here")
    if SCHEMA_VERSION > 1:
        check_schema_version(1, where="here")
    with pytest.raises(JournalSchemaError, match=f"newer than {SCHEMA_VERSION}"):
        check_schema_version(SCHEMA_VERSION + 1, where="journal x.db")
    with pytest.raises(JournalSchemaError, match="invalid"):
        check_schema_version(0, where="journal x.db")


def test_records_drafts_events_and_content_are_not_tracked_by_the_cyclic_collector() -> None:
    # Envelopes, events and content can be in no cycle (they hold data, never
    # anything that refers back to them), so a thousand busy loops' appends and
    # the conversations they keep add nothing to the collector's generations.
    import gc

    from journal import Draft, Record
    from journal.content import Message, Text, ToolUse
    from journal.events import InputQueued

    use = ToolUse(id="tu_1", name="lookup", input={"query": ["a", "b"]})
    message = Message(role="assistant", blocks=(Text(text="hello"), use))
    event = InputQueued(input_id="in_1", messages=(message,))
    draft = Draft(id="ev_1", loop="main", event=event)
    record = Record(
        seq=1, id="ev_1", session="s", loop="main", at=0, cause=None, digest=b"", event=event
    )
    for value in (use, message, event, draft, record):
        assert not gc.is_tracked(value), value
    decoded = decode_event(encode_event(event))
    assert decoded == event and not gc.is_tracked(decoded)
    assert not any(gc.is_tracked(struct) for struct in _structs_in(decoded))


def _structs_in(value: object) -> list[msgspec.Struct]:
    """Every Struct reachable from ``value`` through Structs, tuples, lists and dicts."""
    found: list[msgspec.Struct] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, msgspec.Struct):
            found.append(item)
            stack.extend(getattr(item, name) for name in item.__struct_fields__)
        elif isinstance(item, tuple | list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return found


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(any_event)
def test_no_event_nor_struct_it_holds_is_tracked_by_the_cyclic_collector(event: Event) -> None:
    # Covers every event type as the catalog grows (a new one declared without
    # ``gc=False``, or a new nested Struct, fails here), built and decoded.
    import gc

    for value in (event, decode_event(encode_event(event))):
        structs = _structs_in(value)
        assert [type(s).__name__ for s in structs if gc.is_tracked(s)] == []
