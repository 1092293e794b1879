"""The error classification every adapter shares (``loopruntime/models/statuses.py``):
the kind by HTTP status, whether a wait mends it, and what the message says."""

from __future__ import annotations

import pytest

from loopruntime.models.retries import Attempt
from loopruntime.models.statuses import (
    SHARED_ADVICE,
    Provider,
    incomplete_stream_error,
    status_error,
    status_kind,
)

ADVICE = {
    **SHARED_ADVICE,
    **{
        kind: f"advice for {kind}"
        for kind in (
            "overloaded",
            "authentication",
            "permission",
            "invalid_request",
            "not_found",
            "server",
            "connection",
            "protocol",
        )
    },
}
PROVIDER = Provider(title="Test API", advice=ADVICE)


def first_attempt() -> Attempt:
    attempt = Attempt()
    attempt.number = 1
    return attempt


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request"),
        (401, "authentication"),
        (402, "permission"),
        (403, "permission"),
        (404, "not_found"),
        (408, "invalid_request"),
        (429, "rate_limited"),
        (500, "server"),
        (503, "server"),
        (529, "overloaded"),
    ],
)
def test_the_kind_follows_the_status(status: int, kind: str) -> None:
    assert status_kind(status) == kind


def test_a_provider_names_its_own_overload_statuses() -> None:
    assert status_kind(503, overloaded=frozenset({503, 529})) == "overloaded"


@pytest.mark.parametrize(
    ("status", "headers", "retryable"),
    [
        (500, {}, True),
        (429, {}, True),
        (408, {}, True),
        (409, {}, True),
        (400, {}, False),
        (500, {"x-should-retry": "false"}, False),
        (400, {"x-should-retry": "true"}, True),
        (400, {"x-should-retry": "maybe"}, False),
    ],
)
def test_retrying_follows_the_kind_unless_the_server_says(
    status: int, headers: dict[str, str], retryable: bool
) -> None:
    error = status_error(
        PROVIDER,
        first_attempt(),
        kind=status_kind(status),
        status=status,
        label=f"HTTP {status}",
        detail="no",
        headers=headers,
        request_id=None,
        model="m",
    )
    assert error.retryable is retryable and error.status == status


def test_a_retry_after_replaces_the_advice() -> None:
    error = status_error(
        PROVIDER,
        first_attempt(),
        kind="rate_limited",
        status=429,
        label="HTTP 429",
        detail="slow down",
        headers={"retry-after": "7"},
        request_id="req_1",
        model="m",
    )
    assert error.retry_after == 7.0
    assert str(error) == (
        "Test API rate limited: HTTP 429: slow down (attempt 1, request-id req_1); retry after 7 s"
    )


def test_a_stream_cut_after_output_is_not_retried() -> None:
    attempt = first_attempt()
    assert incomplete_stream_error(PROVIDER, attempt, until="the end").retryable
    attempt.output_started = True
    error = incomplete_stream_error(PROVIDER, attempt, until="the end")
    assert not error.retryable and error.code == "model.connection.incomplete_stream"
    assert "stream ended before the end" in str(error)
