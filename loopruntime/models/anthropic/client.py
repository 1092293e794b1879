"""``AnthropicModel``: Claude through the ``anthropic`` SDK's streaming Messages API.

Rules (docs/anthropic.md tells the story): the SDK runs under trio natively;
the client this adapter creates has ``max_retries=0`` and is closed by
``aclose()``; retries are decided here, before any output, and wait with
``trio.sleep``; the API key is handed to the SDK and kept nowhere else.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, Self

import anthropic
import structlog

from loopruntime.errors import ModelError
from loopruntime.model import Delta, ModelRequest, UsageDelta

from ..credentials import chainable
from ..limiter import RateLimit, checked_rate_limit, estimate_tokens, limiter_for
from ..retries import Attempt, after_output, with_retries
from .errors import ADVICE, FOREIGN_ERRORS, client_secrets, translate
from .request import ThinkingOption, request_params, thinking_body
from .stream import StreamTranslator

__all__ = ["DEFAULT_CONTEXT_WINDOW", "DEFAULT_MODEL", "AnthropicModel"]

# The logger keeps the package's name: log consumers filter on it.
log = structlog.wrap_logger(logging.getLogger("loopruntime.models.anthropic"))

DEFAULT_MODEL: Final = "claude-sonnet-5-5"
"""Used by ``from_env`` when neither an argument nor ``ANTHROPIC_MODEL`` names one."""

DEFAULT_CONTEXT_WINDOW: Final = 200_000


class AnthropicModel:
    """A ``Model`` backed by Claude.

    ``stream(request)`` is an async context manager; entering it yields an
    async iterator of ``Delta`` values, exiting it closes the HTTP response.
    It raises ``ModelError`` only; ``retryable`` on a raised error is true only
    if nothing was yielded by that call.  Safe to share between concurrent
    loops of one trio run.

    Owns the SDK client it creates (close it with ``aclose()`` or ``async
    with``); a ``client`` passed in stays the caller's to close, and should be
    made with ``max_retries=0`` (see docs/anthropic.md).

    ``max_tokens`` set here overrides ``ModelRequest.max_tokens`` (a model
    configured for long replies keeps them); unset, the request's value is
    used.  ``max_retries`` counts retries after the first attempt;
    a ``retry-after`` longer than ``max_retry_wait`` seconds is not waited for
    — the error is raised with its ``retry_after`` instead.
    """

    name: str
    context_window: int

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        max_tokens: int | None = None,
        thinking: ThinkingOption = None,
        client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        max_retries: int = 2,
        max_retry_wait: float = 60.0,
        prompt_cache: bool = True,
        timeout: float | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        if not model:
            raise ValueError("AnthropicModel needs a model name, e.g. 'claude-sonnet-5-5'")
        thinking_param = thinking_body(thinking)
        budget = thinking_param.get("budget_tokens") if thinking_param else None
        if max_tokens is not None and isinstance(budget, int) and budget >= max_tokens:
            raise ValueError(
                f"thinking budget ({budget} tokens) must be below max_tokens ({max_tokens}); "
                "raise max_tokens or lower the budget"
            )
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries}")
        self.rate_limit = checked_rate_limit(rate_limit)
        """Shared with every model of this provider and name in the run
        (``limiter.limiter_for``); None: the run's default (a host's), if any."""
        self.model = model
        self.name = f"anthropic:{model}"
        self.context_window = context_window
        self.max_tokens = max_tokens
        self.thinking = thinking_param
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.prompt_cache = prompt_cache
        if client is not None and (api_key, base_url, timeout) != (None, None, None):
            raise ValueError(
                "pass either client= or api_key/base_url/timeout: a client passed in "
                "brings its own configuration"
            )
        self.settings: dict[str, Any] = {
            "max_tokens": max_tokens,
            "thinking": thinking_param,
            "prompt_cache": prompt_cache,
        }
        """What ``loop.configured`` records of this model beside its name (no
        secrets: the key and the client are not settings)."""
        self._owns_client = client is None
        if client is None:
            key = (api_key or os.environ.get("ANTHROPIC_API_KEY") or "").strip()
            if not key:
                raise ValueError(
                    "no Anthropic API key: set ANTHROPIC_API_KEY, pass api_key=..., "
                    "or pass a configured client=anthropic.AsyncAnthropic(..., max_retries=0)"
                )
            if any(c.isspace() or not c.isprintable() for c in key):
                # Never echo the key: this message may end up in a log.
                raise ValueError(
                    "the Anthropic API key (from api_key=... or ANTHROPIC_API_KEY) contains "
                    "a space or a control character, which an HTTP header cannot carry; "
                    "check that it holds exactly one key on one line"
                )
            extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
            # Building the client does no I/O; it connects on the first request.
            client = anthropic.AsyncAnthropic(
                api_key=key,
                base_url=base_url,
                max_retries=0,  # retries are decided in _deltas, before any output
                **extra,
            )
        self._client = client

    @classmethod
    def from_env(cls, model: str | None = None) -> AnthropicModel | None:
        """An ``AnthropicModel`` if ``ANTHROPIC_API_KEY`` is set, else ``None``.

        The model is ``model``, else ``$ANTHROPIC_MODEL``, else
        ``DEFAULT_MODEL``.  ``ANTHROPIC_BASE_URL`` is honoured by the SDK.
        """
        key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
        if not key:
            return None
        chosen = model or os.environ.get("ANTHROPIC_MODEL", "").strip() or DEFAULT_MODEL
        return cls(chosen, api_key=key)

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model!r}, context_window={self.context_window})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the SDK client this model created (idempotent).  A client
        passed in is left open: its owner closes it."""
        if self._owns_client:
            await self._client.close()

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Delta]]:
        """Open one streamed model call; see the class docstring for the contract.

        The request is checked and mapped on entry (a bad ``options`` key
        raises ``ModelError(kind="invalid_request")`` there); the HTTP request
        is sent on the first iteration.  Exiting closes the response, also
        when the caller stops early or is cancelled.
        """
        params = request_params(
            request,
            model=self.model,
            max_tokens=self.max_tokens,
            thinking=self.thinking,
            prompt_cache=self.prompt_cache,
        )
        deltas = self._deltas(self._client, params)
        try:
            yield deltas
        finally:
            await deltas.aclose()

    def _deltas(
        self, client: anthropic.AsyncAnthropic, params: dict[str, Any]
    ) -> AsyncGenerator[Delta, None]:
        """All attempts of one call (``retries.with_retries``)."""
        limiter = limiter_for("anthropic", self.model, self.rate_limit)
        counted = limiter is not None and limiter.counts_tokens
        return with_retries(
            lambda attempt: self._attempt(client, params, attempt),
            model=self.name,
            max_retries=self.max_retries,
            max_retry_wait=self.max_retry_wait,
            log=log,
            limiter=limiter,
            tokens=estimate_tokens(params, params["max_tokens"]) if counted else 0,
        )

    async def _attempt(
        self, client: anthropic.AsyncAnthropic, params: dict[str, Any], attempt: Attempt
    ) -> AsyncGenerator[Delta, None]:
        """One HTTP request.  Every SDK or transport failure leaves here as a
        ``ModelError`` — this is the one place foreign exceptions are caught."""
        secrets = client_secrets(client)
        try:
            sdk_stream = await client.messages.create(**params, stream=True)
        except FOREIGN_ERRORS as exc:
            raise translate(exc, attempt, model=self.model, secrets=secrets) from chainable(
                exc, secrets
            )
        try:
            translator = StreamTranslator()
            # message_start's usage is held back until content arrives, so that
            # an error event right after message_start can still be retried.
            held: list[Delta] = []
            while not translator.finished:
                try:
                    event = await sdk_stream.__anext__()
                except StopAsyncIteration:
                    break
                except FOREIGN_ERRORS as exc:
                    raise translate(exc, attempt, model=self.model, secrets=secrets) from chainable(
                        exc, secrets
                    )
                for delta in translator.feed(event):
                    if not attempt.output_started and isinstance(delta, UsageDelta):
                        held.append(delta)
                        continue
                    for early in held:
                        yield early
                    held.clear()
                    yield delta
            if not translator.finished:
                raise ModelError(
                    "the Anthropic API stream ended before message_stop "
                    f"(attempt {attempt.number}){after_output(attempt)}; {ADVICE['connection']}",
                    kind="connection",
                    code="model.connection.incomplete_stream",
                    retryable=not attempt.output_started,
                )
            for early in held:
                yield early
        finally:
            # Releases the connection, also when the caller stopped early or
            # was cancelled (httpcore shields the close from cancellation).
            await sdk_stream.close()
