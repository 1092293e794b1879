"""``OpenAIModel``: any model served through the Chat Completions API.

Rules (docs/models.md tells the story): the ``openai`` SDK runs under trio
natively; the client this adapter creates has ``max_retries=0`` and is closed
by ``aclose()``; retries are decided by ``retries.with_retries``, before any
output; the API key is handed to the SDK and kept nowhere else.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, Self

import openai
import structlog

from loopruntime.errors import ModelError
from loopruntime.model import Delta, ModelRequest

from ..credentials import chainable
from ..limiter import RateLimit, checked_rate_limit, estimate_tokens, limiter_for
from ..retries import Attempt, after_output, with_retries
from .errors import ADVICE, FOREIGN_ERRORS, NO_KEY, client_secrets, translate
from .request import MaxTokensField, request_params
from .stream import ChunkTranslator

__all__ = ["DEFAULT_CONTEXT_WINDOW", "OpenAIModel"]

# The logger keeps the package's name: log consumers filter on it.
log = structlog.wrap_logger(logging.getLogger("loopruntime.models.openai"))

DEFAULT_CONTEXT_WINDOW: Final = 128_000


class OpenAIModel:
    """A ``Model`` served by OpenAI or any server that speaks its Chat
    Completions API (vLLM, Ollama, llama.cpp's server, LiteLLM's proxy).

    ``stream(request)`` is an async context manager; entering it yields an
    async iterator of ``Delta`` values, exiting it closes the HTTP response.
    It raises ``ModelError`` only; ``retryable`` on a raised error is true only
    if nothing was yielded by that call.  Safe to share between concurrent
    loops of one trio run.

    ``base_url`` is the server's API root (``http://localhost:11434/v1``);
    unset, the SDK's (``OPENAI_BASE_URL``, else OpenAI's).  ``api_key`` falls
    back to ``OPENAI_API_KEY``; a server given by ``base_url`` may need none.
    Owns the SDK client it creates (close it with ``aclose()`` or ``async
    with``); a ``client`` passed in stays the caller's to close, and should be
    made with ``max_retries=0``.

    ``max_tokens`` set here overrides ``ModelRequest.max_tokens``;
    ``max_tokens_field`` is the body key it is sent as; ``stream_usage=False``
    leaves out ``stream_options`` for a server that refuses it (the reply then
    reports no usage).  ``max_retries`` counts retries after the first
    attempt; a ``retry-after`` longer than ``max_retry_wait`` seconds is not
    waited for: the error is raised with its ``retry_after`` instead.
    """

    name: str
    context_window: int

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: openai.AsyncOpenAI | None = None,
        max_tokens: int | None = None,
        max_tokens_field: MaxTokensField = "max_completion_tokens",
        stream_usage: bool = True,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        max_retries: int = 2,
        max_retry_wait: float = 60.0,
        timeout: float | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        if not model:
            raise ValueError("OpenAIModel needs a model name, e.g. 'gpt-5.1' or 'llama3.2'")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries}")
        if max_tokens_field not in ("max_completion_tokens", "max_tokens"):
            raise ValueError(
                "max_tokens_field must be 'max_completion_tokens' or 'max_tokens', "
                f"not {max_tokens_field!r}"
            )
        if client is not None and (api_key, base_url, timeout) != (None, None, None):
            raise ValueError(
                "pass either client= or api_key/base_url/timeout: a client passed in "
                "brings its own configuration"
            )
        self.rate_limit = checked_rate_limit(rate_limit)
        """Shared with every model of this provider and name in the run
        (``limiter.limiter_for``); None: the run's default (a host's), if any."""
        self.model = model
        self.name = f"openai:{model}"
        self.context_window = context_window
        self.max_tokens = max_tokens
        self.max_tokens_field: MaxTokensField = max_tokens_field
        self.stream_usage = stream_usage
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.settings: dict[str, Any] = {
            "max_tokens": max_tokens,
            "max_tokens_field": max_tokens_field,
            "stream_usage": stream_usage,
        }
        """What ``loop.configured`` records of this model beside its name (no
        secrets, and not the server's address: the same model may move)."""
        self._owns_client = client is None
        self._client = client if client is not None else _new_client(api_key, base_url, timeout)

    @classmethod
    def from_env(cls, model: str, *, base_url: str | None = None) -> OpenAIModel | None:
        """An ``OpenAIModel`` when ``OPENAI_API_KEY`` is set or a server is
        named (``base_url``, else ``OPENAI_BASE_URL``), else ``None``."""
        key = os.environ.get("OPENAI_API_KEY", "").strip()
        server = base_url or os.environ.get("OPENAI_BASE_URL", "").strip() or None
        if not key and server is None:
            return None
        return cls(model, base_url=server, api_key=key or None)

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model!r}, context_window={self.context_window})"

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
            max_tokens_field=self.max_tokens_field,
            stream_usage=self.stream_usage,
        )
        limiter = limiter_for("openai", self.model, self.rate_limit)
        counted = limiter is not None and limiter.counts_tokens
        deltas = with_retries(
            lambda attempt: self._attempt(params, attempt),
            model=self.name,
            max_retries=self.max_retries,
            max_retry_wait=self.max_retry_wait,
            log=log,
            limiter=limiter,
            tokens=estimate_tokens(params, params.get(self.max_tokens_field) or 0)
            if counted
            else 0,
        )
        try:
            yield deltas
        finally:
            await deltas.aclose()

    async def _attempt(
        self, params: dict[str, Any], attempt: Attempt
    ) -> AsyncGenerator[Delta, None]:
        """One HTTP request.  Every SDK or transport failure leaves here as a
        ``ModelError``: this is the one place foreign exceptions are caught."""
        client = self._client
        secrets = client_secrets(client)
        try:
            sdk_stream = await client.chat.completions.create(**params, stream=True)
        except FOREIGN_ERRORS as exc:
            raise translate(exc, attempt, model=self.model, secrets=secrets) from chainable(
                exc, secrets
            )
        try:
            translator = ChunkTranslator()
            while True:
                try:
                    chunk = await sdk_stream.__anext__()
                except StopAsyncIteration:
                    break
                except FOREIGN_ERRORS as exc:
                    if translator.finished:
                        # The reply is whole; only its usage chunk or [DONE]
                        # was lost, which is no reason to fail the reply.
                        log.info(
                            "model_stream_tail_lost", model=self.name, error=type(exc).__name__
                        )
                        break
                    raise translate(exc, attempt, model=self.model, secrets=secrets) from chainable(
                        exc, secrets
                    )
                for delta in translator.feed(chunk):
                    yield delta
            if not translator.finished:
                raise ModelError(
                    "the OpenAI-compatible stream ended before a finish reason "
                    f"(attempt {attempt.number}){after_output(attempt)}; {ADVICE['connection']}",
                    kind="connection",
                    code="model.connection.incomplete_stream",
                    retryable=not attempt.output_started,
                )
        finally:
            # Releases the connection, also when the caller stopped early or
            # was cancelled (httpcore shields the close from cancellation).
            await sdk_stream.close()


def _new_client(api_key: str | None, base_url: str | None, timeout: float | None) -> Any:
    """The SDK client this model owns.  A key is required unless a server is
    named: a local server (Ollama, llama.cpp) usually asks for none."""
    key = (api_key or os.environ.get("OPENAI_API_KEY") or "").strip()
    server = base_url or os.environ.get("OPENAI_BASE_URL", "").strip() or None
    if not key and server is None:
        raise ValueError(
            "no OpenAI API key: set OPENAI_API_KEY, pass api_key=..., or name an "
            "OpenAI-compatible server with base_url=... (a local one needs no key)"
        )
    if any(c.isspace() or not c.isprintable() for c in key):
        # Never echo the key: this message may end up in a log.
        raise ValueError(
            "the OpenAI API key (from api_key=... or OPENAI_API_KEY) contains a space or a "
            "control character, which an HTTP header cannot carry; check that it holds "
            "exactly one key on one line"
        )
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    # Building the client does no I/O; it connects on the first request.
    return openai.AsyncOpenAI(
        # The SDK insists on a key; a server that wants none ignores this one.
        api_key=key or NO_KEY,
        base_url=server,
        max_retries=0,  # retries are decided in retries.with_retries, before any output
        **extra,
    )
