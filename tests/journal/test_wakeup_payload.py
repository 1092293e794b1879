"""The text a PostgreSQL inbox notification carries names the session and its live holder."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from journal.inbox import Wakeup, wakeup_of, wakeup_payload


@given(st.text(min_size=1), st.none() | st.text())
def test_a_payload_names_its_session_and_holder(session: str, holder: str | None) -> None:
    assert wakeup_of(wakeup_payload(session, holder)) == Wakeup(session=session, holder=holder)


def test_a_bare_session_id_names_no_holder() -> None:
    # What a host of an earlier version notifies: a pass, as before.
    assert wakeup_of("ses_1") == Wakeup(session="ses_1")
    assert wakeup_of('["not", "a", "wakeup"]') == Wakeup(session='["not", "a", "wakeup"]')
    assert wakeup_of("[") == Wakeup(session="[")
    assert wakeup_of("") == Wakeup(session="")
