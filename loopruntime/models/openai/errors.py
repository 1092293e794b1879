"""Errors of the OpenAI-compatible adapter: the one place ``openai`` SDK and
``httpx2`` exceptions become ``ModelError`` (see docs/models.md).

Rules: the kind and whether to retry follow ``statuses``, with two
exceptions of this API's own: a 503 is an overload, and a 429
``insufficient_quota`` is a billing refusal, not a rate limit; a credential
never appears in an error message or in a chained exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

import httpx2
import openai

from loopruntime.errors import ModelError, ModelErrorKind

from ..credentials import redacted, secret_forms
from ..retries import Attempt, after_output, attempt_error
from ..statuses import (
    SHARED_ADVICE,
    Provider,
    connection_error,
    status_error,
    status_kind,
    unreadable_error,
)

__all__ = ["ADVICE", "FOREIGN_ERRORS", "NO_KEY", "PROVIDER", "client_secrets", "translate"]

NO_KEY: Final = "no-key"
"""The key the SDK is given for a server that wants none: no secret to hide."""

FOREIGN_ERRORS: Final = (openai.OpenAIError, httpx2.HTTPError, json.JSONDecodeError)
"""What the SDK and its transport raise: API errors (an error body inside a
200 stream too), transport errors, and a ``data`` line that is not JSON."""

ADVICE: Final[Mapping[ModelErrorKind, str]] = {
    **SHARED_ADVICE,
    "overloaded": "the server is temporarily overloaded; try again shortly",
    "authentication": "the API key was rejected; check OPENAI_API_KEY",
    "permission": "this API key may not use this model, or its quota or billing is "
    "exhausted; check the account",
    "invalid_request": "the server rejected the request; check the model name, the token "
    "allowance (max_tokens_field) and options",
    "not_found": "check the model name and the base URL (the server's /v1 address)",
    "server": "the server failed internally; try again",
    "connection": "check network access to the server (the base URL, or OPENAI_BASE_URL)",
    "protocol": "the server's response could not be read; try again, and report it if it recurs",
}

PROVIDER: Final = Provider(title="OpenAI-compatible server", advice=ADVICE)

# Compatible servers (vLLM, LiteLLM's proxy) answer 503 when overloaded.
_OVERLOADED: Final = frozenset({503, 529})

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
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        kind = status_kind(status, overloaded=_OVERLOADED)
        if status == 429 and exc.code in _QUOTA_CODES:
            kind = "permission"
        return status_error(
            PROVIDER,
            attempt,
            kind=kind,
            status=status,
            label=f"HTTP {status}",
            detail=_detail(exc),
            headers=exc.response.headers,
            request_id=exc.request_id,
            model=model,
        )
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        return connection_error(
            PROVIDER,
            attempt,
            exc,
            cause=exc.__cause__ if isinstance(exc, openai.APIConnectionError) else exc,
            timed_out=isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException),
        )
    if isinstance(exc, openai.APIError):
        # An error object sent inside a 200 stream: no status to go by.
        kind = "rate_limited" if exc.code == "rate_limit_exceeded" else "server"
        return attempt_error(
            f"OpenAI-compatible server error in the stream ({exc.type or exc.code or 'error'}): "
            f"{exc.message} (attempt {attempt.number}){after_output(attempt)}; {ADVICE[kind]}",
            kind=kind,
            retryable=True,
            attempt=attempt,
        )
    return unreadable_error(PROVIDER, attempt, exc)


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
