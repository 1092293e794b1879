"""Errors and retries of the Anthropic adapter: the one place SDK and
``httpx2`` exceptions become ``ModelError`` (see docs/anthropic.md).

Rules: a failure is retryable only while nothing was yielded to the caller;
retry waits honour the API's ``retry-after`` and ``x-should-retry``; a
credential never appears in an error message or in a chained exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

import anthropic
import httpx2

from loopruntime.errors import ModelError, ModelErrorKind

from ..credentials import redacted, secret_forms
from ..retries import Attempt, after_output, attempt_error, retry_after_seconds

__all__ = ["ADVICE", "FOREIGN_ERRORS", "client_secrets", "translate"]

FOREIGN_ERRORS: Final = (anthropic.AnthropicError, httpx2.HTTPError, json.JSONDecodeError)
"""What the SDK and its transport raise: API errors, transport errors that
escape mid-stream unwrapped, and an SSE ``data`` line that is not JSON."""

ADVICE: Final[Mapping[ModelErrorKind, str]] = {
    "overloaded": "the API is temporarily overloaded; try again shortly",
    "rate_limited": "this API key hit its rate limit; wait and try again, or send less",
    "authentication": "the API key was rejected; check ANTHROPIC_API_KEY",
    "permission": "this API key may not use this model or feature; check its workspace, "
    "permissions and billing",
    "invalid_request": "the API rejected the request; check the model name, max_tokens, "
    "thinking and options",
    "not_found": "check the model name and the base URL (ANTHROPIC_BASE_URL)",
    "server": "the API failed internally; try again",
    "connection": "check network access to the API (or ANTHROPIC_BASE_URL)",
    "protocol": "the API's response could not be read; try again, and report it if it recurs",
    "script": "",
    "timeout": "the reply stopped arriving within the loop's deadline; try again, or raise "
    "Limits.model_first_token_timeout / model_call_timeout",
}

# Error `type`s of the API's error body, for errors that arrive as an
# `error` event inside a 200 stream (no HTTP status to go by).
_ERROR_TYPE_KIND: Final[Mapping[str, ModelErrorKind]] = {
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limited",
    "authentication_error": "authentication",
    "permission_error": "permission",
    "billing_error": "permission",
    "not_found_error": "not_found",
    "invalid_request_error": "invalid_request",
    "request_too_large": "invalid_request",
    "api_error": "server",
    "timeout_error": "server",
}

_RETRYABLE_KINDS: Final = frozenset({"overloaded", "rate_limited", "server", "connection"})


def client_secrets(client: anthropic.AsyncAnthropic) -> tuple[str, ...]:
    """The credentials a client holds, read when needed rather than kept, each
    also as the ``repr`` of its text and of its bytes show it: the HTTP stack
    names a header value it refuses in ``repr`` form (``b'Bearer sk-...\\n...'``)."""
    return secret_forms(getattr(client, "api_key", None), getattr(client, "auth_token", None))


def translate(
    exc: Exception, attempt: Attempt, *, model: str, secrets: Sequence[str] = ()
) -> ModelError:
    """The ``ModelError`` for a foreign exception, knowing whether output began;
    ``secrets`` are cut from its message."""
    return redacted(_translate_unredacted(exc, attempt, model=model), secrets)


def _translate_unredacted(exc: Exception, attempt: Attempt, *, model: str) -> ModelError:
    """What ``translate`` returns before credentials are cut out."""
    where = f"attempt {attempt.number}"
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        in_stream = not 400 <= status <= 599
        kind = _ERROR_TYPE_KIND.get(exc.type or "", "server") if in_stream else _status_kind(status)
        headers = exc.response.headers
        should_retry = headers.get("x-should-retry")
        retryable = (
            should_retry == "true"
            if should_retry in ("true", "false")
            else (kind in _RETRYABLE_KINDS or status in (408, 409))
        )
        retry_after = retry_after_seconds(headers)
        detail = exc.api_message or exc.message
        label = f"an error event in the stream ({exc.type})" if in_stream else f"HTTP {status}"
        if exc.request_id:
            where += f", request-id {exc.request_id}"
        hint = f"retry after {retry_after:g} s" if retry_after is not None else ADVICE[kind]
        if kind == "not_found":
            hint = f"model {model!r} or the endpoint was not found; {hint}"
        return attempt_error(
            f"Anthropic API {kind.replace('_', ' ')}: {label}: {detail} ({where})"
            f"{after_output(attempt)}; {hint}",
            kind=kind,
            retryable=retryable,
            retry_after=retry_after,
            status=None if in_stream else status,
            attempt=attempt,
        )
    if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        cause = exc.__cause__ if isinstance(exc, anthropic.APIConnectionError) else exc
        what = (
            "timed out"
            if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException)
            else "failed"
        )
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        return attempt_error(
            f"the connection to the Anthropic API {what} ({reason}; {where})"
            f"{after_output(attempt)}; {ADVICE['connection']}",
            kind="connection",
            retryable=True,
            attempt=attempt,
        )
    if isinstance(exc, anthropic.CredentialsError):
        return attempt_error(
            f"Anthropic credentials could not be loaded ({exc}); {ADVICE['authentication']}",
            kind="authentication",
            retryable=False,
            attempt=attempt,
        )
    return attempt_error(
        f"the Anthropic API response could not be read ({type(exc).__name__}: {exc}; {where})"
        f"{after_output(attempt)}; {ADVICE['protocol']}",
        kind="protocol",
        retryable=False,
        attempt=attempt,
    )


def _status_kind(status: int) -> ModelErrorKind:
    if status == 529:
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
