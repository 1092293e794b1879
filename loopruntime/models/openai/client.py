"""``OpenAIModel``: any model served through the Chat Completions API.

Rules (docs/models.md tells the story): the ``openai`` SDK runs under trio
natively; the client, its key and the retries follow ``sdk.SdkModel``; a
reply whose finish reason arrived stands even if its usage chunk is lost.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator
from typing import Any, ClassVar, Final

import openai
import structlog

from loopruntime.model import Delta, ModelRequest

from ..credentials import chainable
from ..limiter import RateLimit
from ..retries import Attempt
from ..sdk import SdkModel, checked_key, client_options
from ..statuses import incomplete_stream_error
from .errors import FOREIGN_ERRORS, NO_KEY, PROVIDER, client_secrets, translate
from .request import MaxTokensField, request_params
from .stream import ChunkTranslator

__all__ = ["DEFAULT_CONTEXT_WINDOW", "OpenAIModel"]

# The logger keeps the package's name: log consumers filter on it.
log = structlog.wrap_logger(logging.getLogger("loopruntime.models.openai"))

DEFAULT_CONTEXT_WINDOW: Final = 128_000


class OpenAIModel(SdkModel[openai.AsyncOpenAI]):
    """A ``Model`` served by OpenAI or any server that speaks its Chat
    Completions API (vLLM, Ollama, llama.cpp's server, LiteLLM's proxy);
    ``SdkModel`` states the contract of ``stream``, the client's ownership
    and the retries.

    ``base_url`` is the server's API root (``http://localhost:11434/v1``);
    unset, the SDK's (``OPENAI_BASE_URL``, else OpenAI's).  ``api_key`` falls
    back to ``OPENAI_API_KEY``; a server given by ``base_url`` may need none.

    ``max_tokens`` set here overrides ``ModelRequest.max_tokens``;
    ``max_tokens_field`` is the body key it is sent as; ``stream_usage=False``
    leaves out ``stream_options`` for a server that refuses it (the reply then
    reports no usage).
    """

    provider: ClassVar[str] = "openai"
    log: ClassVar[Any] = log

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
        if max_tokens_field not in ("max_completion_tokens", "max_tokens"):
            raise ValueError(
                "max_tokens_field must be 'max_completion_tokens' or 'max_tokens', "
                f"not {max_tokens_field!r}"
            )
        options = client_options(
            client, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
        super().__init__(
            model,
            client=client,
            new_client=lambda: _new_client(api_key, base_url, options),
            context_window=context_window,
            max_retries=max_retries,
            max_retry_wait=max_retry_wait,
            rate_limit=rate_limit,
        )
        self.max_tokens = max_tokens
        self.max_tokens_field: MaxTokensField = max_tokens_field
        self.stream_usage = stream_usage
        self.settings: dict[str, Any] = {
            "max_tokens": max_tokens,
            "max_tokens_field": max_tokens_field,
            "stream_usage": stream_usage,
        }
        """What ``loop.configured`` records of this model beside its name (no
        secrets, and not the server's address: the same model may move)."""

    @classmethod
    def from_env(cls, model: str, *, base_url: str | None = None) -> OpenAIModel | None:
        """An ``OpenAIModel`` when ``OPENAI_API_KEY`` is set or a server is
        named (``base_url``, else ``OPENAI_BASE_URL``), else ``None``."""
        key = os.environ.get("OPENAI_API_KEY", "").strip()
        server = base_url or os.environ.get("OPENAI_BASE_URL", "").strip() or None
        if not key and server is None:
            return None
        return cls(model, base_url=server, api_key=key or None)

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        return request_params(
            request,
            model=self.model,
            max_tokens=self.max_tokens,
            max_tokens_field=self.max_tokens_field,
            stream_usage=self.stream_usage,
        )

    def _allowance(self, params: dict[str, Any]) -> int:
        return int(params.get(self.max_tokens_field) or 0)

    async def _attempt(
        self, params: dict[str, Any], attempt: Attempt
    ) -> AsyncGenerator[Delta, None]:
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
                raise incomplete_stream_error(PROVIDER, attempt, until="a finish reason")
        finally:
            # Releases the connection, also when the caller stopped early or
            # was cancelled (httpcore shields the close from cancellation).
            await sdk_stream.close()


def _new_client(
    api_key: str | None, base_url: str | None, options: dict[str, Any]
) -> openai.AsyncOpenAI:
    """The SDK client this model owns (building it does no I/O: it connects
    on the first request).  A key is required unless a server is named: a
    local server (Ollama, llama.cpp) usually asks for none."""
    key = checked_key(api_key, env="OPENAI_API_KEY", title="OpenAI API key")
    server = base_url or os.environ.get("OPENAI_BASE_URL", "").strip() or None
    if not key and server is None:
        raise ValueError(
            "no OpenAI API key: set OPENAI_API_KEY, pass api_key=..., or name an "
            "OpenAI-compatible server with base_url=... (a local one needs no key)"
        )
    # The SDK insists on a key; a server that wants none ignores this one.
    return openai.AsyncOpenAI(api_key=key or NO_KEY, base_url=server, **options)
