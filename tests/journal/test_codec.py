"""The codec: event bytes, their failures, the schema version and the digest chain."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from journal import SCHEMA_VERSION, JournalCorruptError, JournalSchemaError
from journal.codec import GENESIS, chain, check_schema_version, decode_event, encode_event
from journal.events import EVENT_TYPES, Event, Notice, TurnStarted

from .contract import EVENT_STRATEGIES, any_event, tag_of


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


@given(previous=st.binary(min_size=16, max_size=16), body=st.binary(max_size=200))
def test_chain_is_blake2b_128_of_previous_then_body(previous: bytes, body: bytes) -> None:
    digest = chain(previous, body)
    assert len(digest) == 16
    assert digest == hashlib.blake2b(previous + body, digest_size=16).digest()
    assert chain(previous, body) == digest


@given(
    previous=st.binary(min_size=16, max_size=16),
    body=st.binary(max_size=64),
    other=st.binary(max_size=64),
)
def test_chain_depends_on_the_body(previous: bytes, body: bytes, other: bytes) -> None:
    if body != other:
        assert chain(previous, body) != chain(previous, other)


@given(
    a=st.binary(min_size=16, max_size=16),
    b=st.binary(min_size=16, max_size=16),
    body=st.binary(max_size=64),
)
def test_chain_depends_on_the_previous_digest(a: bytes, b: bytes, body: bytes) -> None:
    if a != b:
        assert chain(a, body) != chain(b, body)


def test_a_changed_record_changes_every_later_digest() -> None:
    bodies = [encode_event(Notice(code="c", text=str(i))) for i in range(5)]

    def digests(bs: list[bytes]) -> list[bytes]:
        out, previous = [], GENESIS
        for body in bs:
            previous = chain(previous, body)
            out.append(previous)
        return out

    original = digests(bodies)
    changed = digests([*bodies[:2], encode_event(Notice(code="c", text="x")), *bodies[3:]])
    assert changed[:2] == original[:2]
    assert all(c != o for c, o in zip(changed[2:], original[2:], strict=True))


def test_schema_versions() -> None:
    check_schema_version(SCHEMA_VERSION, where="here")
    if SCHEMA_VERSION > 1:
        check_schema_version(1, where="here")
    with pytest.raises(JournalSchemaError, match=f"newer than {SCHEMA_VERSION}"):
        check_schema_version(SCHEMA_VERSION + 1, where="journal x.db")
    with pytest.raises(JournalSchemaError, match="invalid"):
        check_schema_version(0, where="journal x.db")
