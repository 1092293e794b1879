"""Errors and retries of the Anthropic adapter: the one place SDK and
``httpx2`` exceptions become ``ModelError`` (see docs/anthropic.md).

Rules: a failure is retryable only while nothing was yielded to the caller;
retry waits honour the API's ``retry-after`` and ``x-should-retry``; a
credential never appears in an error message or in a chained exception.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import time
from collections.abc import Mapping, Sequence
from typing import Final

import anthropic
import httpx2

from loopruntime.errors import ModelError, ModelErrorKind

__all__ = [
    "ADVICE",
    "FOREIGN_ERRORS",
    "Attempt",
    "after_output",
    "chainable",
    "client_secrets",
    "retry_delay",
    "translate",
]

# Backoff when the API gives no retry-after: 0.5 s doubling to at most 8 s,
# shortened by up to a quarter at random so parallel loops do not retry in step.
_INITIAL_BACKOFF: Final = 0.5
_MAX_BACKOFF: Final = 8.0


class Attempt:
    """Progress of one call across its attempts (mutable, private)."""

    __slots__ = ("number", "output_started")

    def __init__(self) -> None:
        self.number = 0
        self.output_started = False


def retry_delay(
    err: ModelError, attempt: Attempt, *, max_retries: int, max_retry_wait: float
) -> float | None:
    """Seconds to wait before the next attempt, or None to give up."""
    # An error after output already says retryable=False; checking
    # output_started here too keeps the rule in the one place that decides.
    if attempt.output_started or not err.retryable or attempt.number > max_retries:
        return None
    if err.retry_after is not None:
        if err.retry_after > max_retry_wait:
            return None
        return max(err.retry_after, 0.0)
    backoff = min(_INITIAL_BACKOFF * 2 ** (attempt.number - 1), _MAX_BACKOFF)
    return backoff * (1 - 0.25 * random.random())


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
    held = (getattr(client, "api_key", None), getattr(client, "auth_token", None))
    forms: list[str] = []
    for secret in (s for s in held if isinstance(s, str) and s):
        shown = (secret, repr(secret)[1:-1], repr(secret.encode(errors="replace"))[2:-1])
        forms.extend(f for f in shown if f not in forms)
    # Longest first, so no shorter form replaces part of a longer one.
    return tuple(sorted(forms, key=len, reverse=True))


def _redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return text


def chainable(exc: BaseException, secrets: Sequence[str]) -> BaseException | None:
    """``exc`` to chain a ``ModelError`` to, or None when its text (or that of
    an exception chained to it) shows a credential, so no traceback prints it."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:  # a chain may loop
        if any(secret in str(current) for secret in secrets):
            return None
        seen.append(current)
        current = current.__cause__ or current.__context__
    return exc


def translate(
    exc: Exception, attempt: Attempt, *, model: str, secrets: Sequence[str] = ()
) -> ModelError:
    """The ``ModelError`` for a foreign exception, knowing whether output began;
    ``secrets`` are cut from its message."""
    error = _translate_unredacted(exc, attempt, model=model)
    message = str(error)
    redacted = _redact(message, secrets)
    if redacted == message:
        return error
    return ModelError(
        redacted,
        kind=error.error_kind,
        code=error.code,
        retryable=error.retryable,
        retry_after=error.retry_after,
        status=error.status,
    )


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
        retry_after = _retry_after(headers)
        detail = exc.api_message or exc.message
        label = f"an error event in the stream ({exc.type})" if in_stream else f"HTTP {status}"
        if exc.request_id:
            where += f", request-id {exc.request_id}"
        hint = f"retry after {retry_after:g} s" if retry_after is not None else ADVICE[kind]
        if kind == "not_found":
            hint = f"model {model!r} or the endpoint was not found; {hint}"
        return _error(
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
        return _error(
            f"the connection to the Anthropic API {what} ({reason}; {where})"
            f"{after_output(attempt)}; {ADVICE['connection']}",
            kind="connection",
            retryable=True,
            attempt=attempt,
        )
    if isinstance(exc, anthropic.CredentialsError):
        return _error(
            f"Anthropic credentials could not be loaded ({exc}); {ADVICE['authentication']}",
            kind="authentication",
            retryable=False,
            attempt=attempt,
        )
    return _error(
        f"the Anthropic API response could not be read ({type(exc).__name__}: {exc}; {where})"
        f"{after_output(attempt)}; {ADVICE['protocol']}",
        kind="protocol",
        retryable=False,
        attempt=attempt,
    )


def _error(
    message: str,
    *,
    kind: ModelErrorKind,
    retryable: bool,
    attempt: Attempt,
    retry_after: float | None = None,
    status: int | None = None,
) -> ModelError:
    return ModelError(
        message,
        kind=kind,
        # Never retryable once output was yielded: resending would repeat it.
        retryable=retryable and not attempt.output_started,
        retry_after=retry_after,
        status=status,
    )


def after_output(attempt: Attempt) -> str:
    if not attempt.output_started:
        return ""
    return (
        " after part of the reply had arrived; the reply is incomplete and was not resent, "
        "because resending would repeat output already delivered"
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


def _retry_after(headers: httpx2.Headers) -> float | None:
    """Seconds the API asks us to wait: ``retry-after-ms``, else ``retry-after``
    as seconds or as an HTTP date; None when absent or unreadable."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            seconds = float(raw) * scale
        except ValueError:
            continue
        # "nan" and "inf" parse as floats but are no wait anyone can keep.
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    raw = headers.get("retry-after")
    if raw:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        return max(when.timestamp() - time.time(), 0.0)
    return None
