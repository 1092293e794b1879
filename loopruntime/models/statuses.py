"""A provider's failure as a ``ModelError``, the same for every adapter over
an HTTP API; each adapter keeps only what its provider says differently.

Rules: the kind follows the HTTP status; retryable are the kinds a wait
mends (overload, rate limit, server failure, connection) and 408 and 409,
unless the server's ``x-should-retry`` header says otherwise, and only while
nothing was yielded; a ``retry-after`` the server sends replaces the advice
in the message, since it is the one thing the reader should do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from loopruntime.errors import ModelError, ModelErrorKind

from .retries import Attempt, after_output, attempt_error, retry_after_seconds

__all__ = [
    "SHARED_ADVICE",
    "Provider",
    "connection_error",
    "incomplete_stream_error",
    "status_error",
    "status_kind",
    "unreadable_error",
]

SHARED_ADVICE: Final[Mapping[ModelErrorKind, str]] = {
    "rate_limited": "this API key hit its rate limit; wait and try again, or send less",
    "script": "",
    "timeout": "the reply stopped arriving within the loop's deadline; try again, or raise "
    "Limits.model_first_token_timeout / model_call_timeout",
}
"""The advice that names nothing of one provider; each adapter's ``ADVICE``
adds the rest (its environment variables, its words for the server)."""

_RETRYABLE_KINDS: Final = frozenset({"overloaded", "rate_limited", "server", "connection"})


class Provider(msgspec.Struct, frozen=True, kw_only=True):
    """How an adapter's errors name its provider."""

    title: str
    """The provider as a message names it: ``"Anthropic API"``."""
    advice: Mapping[ModelErrorKind, str]
    """What to do, per kind of error: the end of every message."""


def status_kind(status: int, *, overloaded: frozenset[int] = frozenset({529})) -> ModelErrorKind:
    """The kind of an HTTP error status; ``overloaded`` lists the statuses the
    provider uses for a temporary overload."""
    if status in overloaded:
        return "overloaded"
    if status == 429:
        return "rate_limited"
    if status == 401:
        return "authentication"
    if status in (402, 403):
        return "permission"
    if status == 404:
        return "not_found"
    if status >= 500:
        return "server"
    return "invalid_request"


def status_error(
    provider: Provider,
    attempt: Attempt,
    *,
    kind: ModelErrorKind,
    status: int | None,
    label: str,
    detail: str,
    headers: Mapping[str, str],
    request_id: str | None,
    model: str,
) -> ModelError:
    """The error of a reply the server refused: an HTTP error ``status``, or
    None for an error sent inside a 200 stream; ``label`` says which, and
    ``detail`` is the server's own message."""
    should_retry = headers.get("x-should-retry")
    retryable = (
        should_retry == "true"
        if should_retry in ("true", "false")
        else (kind in _RETRYABLE_KINDS or status in (408, 409))
    )
    retry_after = retry_after_seconds(headers)
    where = f"attempt {attempt.number}"
    if request_id:
        where += f", request-id {request_id}"
    hint = f"retry after {retry_after:g} s" if retry_after is not None else provider.advice[kind]
    if kind == "not_found":
        hint = f"model {model!r} or the endpoint was not found; {hint}"
    return attempt_error(
        f"{provider.title} {kind.replace('_', ' ')}: {label}: {detail} ({where})"
        f"{after_output(attempt)}; {hint}",
        kind=kind,
        retryable=retryable,
        retry_after=retry_after,
        status=status,
        attempt=attempt,
    )


def connection_error(
    provider: Provider,
    attempt: Attempt,
    exc: BaseException,
    *,
    cause: BaseException | None,
    timed_out: bool,
) -> ModelError:
    """The error of a connection that failed or timed out: ``exc`` as the SDK
    raised it, ``cause`` the transport's own error inside it, if any."""
    what = "timed out" if timed_out else "failed"
    reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
    return attempt_error(
        f"the connection to the {provider.title} {what} ({reason}; attempt {attempt.number})"
        f"{after_output(attempt)}; {provider.advice['connection']}",
        kind="connection",
        retryable=True,
        attempt=attempt,
    )


def unreadable_error(provider: Provider, attempt: Attempt, exc: BaseException) -> ModelError:
    """The error of a response that could not be read: never retried, since
    the same server would most likely send the same again."""
    return attempt_error(
        f"the {provider.title}'s response could not be read "
        f"({type(exc).__name__}: {exc}; attempt {attempt.number})"
        f"{after_output(attempt)}; {provider.advice['protocol']}",
        kind="protocol",
        retryable=False,
        attempt=attempt,
    )


def incomplete_stream_error(provider: Provider, attempt: Attempt, *, until: str) -> ModelError:
    """The error of a stream that ended before its last event (``until``
    names it): the connection dropped, so a retry may mend it while nothing
    was yielded."""
    return ModelError(
        f"the {provider.title}'s stream ended before {until} "
        f"(attempt {attempt.number}){after_output(attempt)}; {provider.advice['connection']}",
        kind="connection",
        code="model.connection.incomplete_stream",
        retryable=not attempt.output_started,
    )
