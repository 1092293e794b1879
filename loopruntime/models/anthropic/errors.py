"""Errors and retries of the Anthropic adapter: the one place SDK and
``httpx2`` exceptions become ``ModelError`` (see docs/anthropic.md).

Rules: the kind and whether to retry follow ``statuses``; an error event
inside a 200 stream is read by its type; a credential never appears in an
error message or in a chained exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

import anthropic
import httpx2

from loopruntime.errors import ModelError, ModelErrorKind

from ..credentials import redacted, secret_forms
from ..retries import Attempt, attempt_error
from ..statuses import (
    SHARED_ADVICE,
    Provider,
    connection_error,
    status_error,
    status_kind,
    unreadable_error,
)

__all__ = ["ADVICE", "FOREIGN_ERRORS", "PROVIDER", "client_secrets", "translate"]

FOREIGN_ERRORS: Final = (anthropic.AnthropicError, httpx2.HTTPError, json.JSONDecodeError)
"""What the SDK and its transport raise: API errors, transport errors that
escape mid-stream unwrapped, and an SSE ``data`` line that is not JSON."""

ADVICE: Final[Mapping[ModelErrorKind, str]] = {
    **SHARED_ADVICE,
    "overloaded": "the API is temporarily overloaded; try again shortly",
    "authentication": "the API key was rejected; check ANTHROPIC_API_KEY",
    "permission": "this API key may not use this model or feature; check its workspace, "
    "permissions and billing",
    "invalid_request": "the API rejected the request; check the model name, max_tokens, "
    "thinking and options",
    "not_found": "check the model name and the base URL (ANTHROPIC_BASE_URL)",
    "server": "the API failed internally; try again",
    "connection": "check network access to the API (or ANTHROPIC_BASE_URL)",
    "protocol": "the API's response could not be read; try again, and report it if it recurs",
}

PROVIDER: Final = Provider(title="Anthropic API", advice=ADVICE)

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
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if 400 <= status <= 599:
            kind, label, code = status_kind(status), f"HTTP {status}", status
        else:
            # An `error` event inside a 200 stream: its type is all there is to go by.
            kind = _ERROR_TYPE_KIND.get(exc.type or "", "server")
            label, code = f"an error event in the stream ({exc.type})", None
        return status_error(
            PROVIDER,
            attempt,
            kind=kind,
            status=code,
            label=label,
            detail=exc.api_message or exc.message,
            headers=exc.response.headers,
            request_id=exc.request_id,
            model=model,
        )
    if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        return connection_error(
            PROVIDER,
            attempt,
            exc,
            cause=exc.__cause__ if isinstance(exc, anthropic.APIConnectionError) else exc,
            timed_out=isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException),
        )
    if isinstance(exc, anthropic.CredentialsError):
        return attempt_error(
            f"Anthropic credentials could not be loaded ({exc}); {ADVICE['authentication']}",
            kind="authentication",
            retryable=False,
            attempt=attempt,
        )
    return unreadable_error(PROVIDER, attempt, exc)
