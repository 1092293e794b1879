"""``AnthropicModel``: Claude through the ``anthropic`` SDK's streaming Messages API.

Rules (docs/anthropic.md tells the story): the SDK runs under trio natively;
the client, its key and the retries follow ``sdk.SdkModel``; a usage report
is held back until content arrives, so an error right after the message
starts can still be retried.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator
from typing import Any, ClassVar, Final

import anthropic
import structlog

from loopruntime.model import Delta, ModelRequest, UsageDelta

from ..credentials import chainable
from ..limiter import RateLimit
from ..retries import Attempt
from ..sdk import SdkModel, checked_key, client_options
from ..statuses import incomplete_stream_error
from .errors import FOREIGN_ERRORS, PROVIDER, client_secrets, translate
from .request import ThinkingOption, request_params, thinking_body
from .stream import StreamTranslator

__all__ = ["DEFAULT_CONTEXT_WINDOW", "DEFAULT_MODEL", "AnthropicModel"]

# The logger keeps the package's name: log consumers filter on it.
log = structlog.wrap_logger(logging.getLogger("loopruntime.models.anthropic"))

DEFAULT_MODEL: Final = "claude-sonnet-5-5"
"""Used by ``from_env`` when neither an argument nor ``ANTHROPIC_MODEL`` names one."""

DEFAULT_CONTEXT_WINDOW: Final = 200_000


class AnthropicModel(SdkModel[anthropic.AsyncAnthropic]):
    """A ``Model`` backed by Claude; ``SdkModel`` states the contract of
    ``stream``, the client's ownership and the retries (see also
    docs/anthropic.md).

    ``max_tokens`` set here overrides ``ModelRequest.max_tokens`` (a model
    configured for long replies keeps them); unset, the request's value is
    used.
    """

    provider: ClassVar[str] = "anthropic"
    log: ClassVar[Any] = log

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
        self.thinking = thinking_param
        self.prompt_cache = prompt_cache
        self.settings: dict[str, Any] = {
            "max_tokens": max_tokens,
            "thinking": thinking_param,
            "prompt_cache": prompt_cache,
        }
        """What ``loop.configured`` records of this model beside its name (no
        secrets: the key and the client are not settings)."""

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

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        return request_params(
            request,
            model=self.model,
            max_tokens=self.max_tokens,
            thinking=self.thinking,
            prompt_cache=self.prompt_cache,
        )

    def _allowance(self, params: dict[str, Any]) -> int:
        return int(params["max_tokens"])

    async def _attempt(
        self, params: dict[str, Any], attempt: Attempt
    ) -> AsyncGenerator[Delta, None]:
        client = self._client
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
                raise incomplete_stream_error(PROVIDER, attempt, until="message_stop")
            for early in held:
                yield early
        finally:
            # Releases the connection, also when the caller stopped early or
            # was cancelled (httpcore shields the close from cancellation).
            await sdk_stream.close()


def _new_client(
    api_key: str | None, base_url: str | None, options: dict[str, Any]
) -> anthropic.AsyncAnthropic:
    """The SDK client this model owns (building it does no I/O: it connects
    on the first request)."""
    key = checked_key(api_key, env="ANTHROPIC_API_KEY", title="Anthropic API key")
    if not key:
        raise ValueError(
            "no Anthropic API key: set ANTHROPIC_API_KEY, pass api_key=..., "
            "or pass a configured client=anthropic.AsyncAnthropic(..., max_retries=0)"
        )
    return anthropic.AsyncAnthropic(api_key=key, base_url=base_url, **options)
