"""Errors of the OpenAI-compatible adapter: the one place ``openai`` SDK and
``httpx2`` exceptions become ``ModelError`` (see docs/models.md).

Rules: the kind follows the HTTP status (429 ``insufficient_quota`` is a
billing refusal, not a rate limit); retryable are rate limits, 5xx, 408,
409 and connection failures, unless the server's ``x-should-retry`` says
otherwise, and only while nothing was yielded; a credential never appears in
an error message or in a chained exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

import httpx2
import openai

from loopruntime.errors import ModelError, ModelErrorKind

from ..credentials import redacted, secret_forms
from ..retries import Attempt, after_output, attempt_error, retry_after_seconds

__all__ = ["ADVICE", "FOREIGN_ERRORS", "NO_KEY", "client_secrets", "translate"]

NO_KEY: Final = "no-key"
"""The key the SDK is given for a server that wants none: no secret to hide."""

FOREIGN_ERRORS: Final = (openai.OpenAIError, httpx2.HTTPError, json.JSONDecodeError)
"""What the SDK and its transport raise: API errors (an error body inside a
200 stream too), transport errors, and a ``data`` line that is not JSON."""

ADVICE: Final[Mapping[ModelErrorKind, str]] = {
    "overloaded": "the server is temporarily overloaded; try again shortly",
    "rate_limited": "this API key hit its rate limit; wait and try again, or send less",
    "authentication": "the API key was rejected; check OPENAI_API_KEY",
    "permission": "this API key may not use this model, or its quota or billing is "
    "exhausted; check the account",
    "invalid_request": "the server rejected the request; check the model name, the token "
    "allowance (max_tokens_field) and options",
    "not_found": "check the model name and the base URL (the server's /v1 address)",
    "server": "the server failed internally; try again",
    "connection": "check network access to the server (the base URL, or OPENAI_BASE_URL)",
    "protocol": "the server's response could not be read; try again, and report it if it recurs",
    "script": "",
    "timeout": "the reply stopped arriving within the loop's deadline; try again, or raise "
    "Limits.model_first_token_timeout / model_call_timeout",
}

_RETRYABLE_KINDS: Final = frozenset({"overloaded", "rate_limited", "server", "connection"})

# Error codes of a 429 that no wait mends.
_QUOTA_CODES: Final = frozenset({"insufficient_quota", "billing_hard_limit_reached"})


def client_secrets(client: openai.AsyncOpenAI) -> tuple[str, ...]:
    """The credentials a client holds, read when needed rather than kept."""
    held = (getattr(client, "api_key", None), getattr(client, "admin_api_key", None))
    return secret_forms(*(k for k in held if k != NO_KEY))


def translate(
    exc: Exception, attempt: Attempt, *, model: str, secrets: Sequence[str] = ()
) -> ModelError:
    """The ``ModelError`` for a foreign exception, knowing whether output began;
    ``secrets`` are cut from its message."""
    return redacted(_translate_unredacted(exc, attempt, model=model), secrets)


def _translate_unredacted(exc: Exception, attempt: Attempt, *, model: str) -> ModelError:
    """What ``translate`` returns before credentials are cut out."""
    where = f"attempt {attempt.number}"
    if isinstance(exc, openai.APIStatusError):
        return _status_error(exc, attempt, model=model)
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) else exc
        what = (
            "timed out"
            if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException)
            else "failed"
        )
        reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        return attempt_error(
            f"the connection to the OpenAI-compatible server {what} ({reason}; {where})"
            f"{after_output(attempt)}; {ADVICE['connection']}",
            kind="connection",
            retryable=True,
            attempt=attempt,
        )
    if isinstance(exc, openai.APIError):
        # An error object sent inside a 200 stream: no status to go by.
        detail = exc.message
        kind: ModelErrorKind = "rate_limited" if exc.code == "rate_limit_exceeded" else "server"
        return attempt_error(
            f"OpenAI-compatible server error in the stream ({exc.type or exc.code or 'error'}): "
            f"{detail} ({where}){after_output(attempt)}; {ADVICE[kind]}",
            kind=kind,
            retryable=True,
            attempt=attempt,
        )
    return attempt_error(
        f"the OpenAI-compatible server's response could not be read "
        f"({type(exc).__name__}: {exc}; {where}){after_output(attempt)}; {ADVICE['protocol']}",
        kind="protocol",
        retryable=False,
        attempt=attempt,
    )


def _status_error(exc: openai.APIStatusError, attempt: Attempt, *, model: str) -> ModelError:
    status = exc.status_code
    kind = _status_kind(status)
    if status == 429 and exc.code in _QUOTA_CODES:
        kind = "permission"
    headers = exc.response.headers
    should_retry = headers.get("x-should-retry")
    retryable = (
        should_retry == "true"
        if should_retry in ("true", "false")
        else (kind in _RETRYABLE_KINDS or status in (408, 409))
    )
    retry_after = retry_after_seconds(headers)
    where = f"attempt {attempt.number}"
    if exc.request_id:
        where += f", request-id {exc.request_id}"
    hint = f"retry after {retry_after:g} s" if retry_after is not None else ADVICE[kind]
    if kind == "not_found":
        hint = f"model {model!r} or the endpoint was not found; {hint}"
    return attempt_error(
        f"OpenAI-compatible server {kind.replace('_', ' ')}: HTTP {status}: {_detail(exc)} "
        f"({where}){after_output(attempt)}; {hint}",
        kind=kind,
        retryable=retryable,
        retry_after=retry_after,
        status=status,
        attempt=attempt,
    )


def _detail(exc: openai.APIStatusError) -> str:
    """The server's own message: ``error.message`` of an OpenAI-shaped body,
    else what the SDK made of the body."""
    body = exc.body
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        if isinstance(message, str) and message:
            return message
    return exc.message


def _status_kind(status: int) -> ModelErrorKind:
    if status in (503, 529):
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
