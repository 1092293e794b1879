"""What every adapter over a provider's SDK shares: its key, its client and
the shape of a call; each adapter keeps what its API says differently.

Rules: the client an adapter creates has ``max_retries=0`` (retries are
decided by ``retries.with_retries``, before any output) and is closed by
``aclose()``; a client passed in stays its caller's; the API key is handed
to the SDK and kept nowhere else, and never echoed in an error.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from loopruntime.errors import ModelError
from loopruntime.model import Delta, ModelRequest

from .limiter import RateLimit, checked_rate_limit, estimate_tokens, limiter_for
from .retries import Attempt, with_retries

__all__ = ["SdkModel", "checked_key", "client_options", "refuse_owned_options"]


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


def checked_key(given: str | None, *, env: str, title: str) -> str:
    """The API key ``given``, else the environment variable ``env``, stripped
    ("" when neither holds one).  ``title`` names the key in the error for a
    key an HTTP header cannot carry, which never shows the key itself: the
    message may end up in a log."""
    key = (given or os.environ.get(env) or "").strip()
    if any(c.isspace() or not c.isprintable() for c in key):
        raise ValueError(
            f"the {title} (from api_key=... or {env}) contains a space or a control "
            "character, which an HTTP header cannot carry; check that it holds exactly "
            "one key on one line"
        )
    return key


def client_options(
    client: object | None,
    *,
    api_key: str | None,
    base_url: str | None,
    timeout: float | None,
    max_retries: int,
) -> dict[str, Any]:
    """The SDK client's own keyword arguments beside the key and the address,
    after checking the settings every adapter takes alike."""
    if max_retries < 0:
        raise ValueError(f"max_retries must be 0 or more, not {max_retries}")
    if client is not None and (api_key, base_url, timeout) != (None, None, None):
        raise ValueError(
            "pass either client= or api_key/base_url/timeout: a client passed in "
            "brings its own configuration"
        )
    options: dict[str, Any] = {"max_retries": 0}
    if timeout is not None:
        options["timeout"] = timeout
    return options


def refuse_owned_options(request: ModelRequest, owned: frozenset[str], *, adapter: str) -> None:
    """Raise ``ModelError(kind="invalid_request")`` if ``request.options`` sets a
    body key in ``owned``: one the ``adapter`` derives from the request itself."""
    clashes = sorted(owned & request.options.keys())
    if clashes:
        raise ModelError(
            f"ModelRequest.options may not set {', '.join(clashes)}: the {adapter} "
            "derives them from the request itself; set them through ModelRequest fields",
            kind="invalid_request",
            code="model.invalid_option",
        )


class SdkModel(ABC, Generic[C]):
    """A ``Model`` over a provider's SDK client ``C`` (``new_client()`` makes
    one when none is passed in).

    ``stream(request)`` is an async context manager; entering it yields an
    async iterator of ``Delta`` values, exiting it closes the HTTP response.
    It raises ``ModelError`` only; ``retryable`` on a raised error is true only
    if nothing was yielded by that call.  Safe to share between concurrent
    loops of one trio run.

    Owns the SDK client it creates (close it with ``aclose()`` or ``async
    with``); a ``client`` passed in stays the caller's to close, and should be
    made with ``max_retries=0``.  ``max_retries`` counts retries after the
    first attempt; a ``retry-after`` longer than ``max_retry_wait`` seconds is
    not waited for: the error is raised with its ``retry_after`` instead.

    A subclass sets ``provider`` and ``log``, and writes ``_params`` (the
    request body), ``_allowance`` (the reply's token allowance in it) and
    ``_attempt`` (one HTTP request).
    """

    provider: ClassVar[str]
    """The provider's short name: the prefix of ``name`` and the rate limit's key."""
    log: ClassVar[Any]
    name: str
    context_window: int

    def __init__(
        self,
        model: str,
        *,
        client: C | None,
        new_client: Callable[[], C],
        context_window: int,
        max_retries: int,
        max_retry_wait: float,
        rate_limit: RateLimit | None,
    ) -> None:
        self.rate_limit = checked_rate_limit(rate_limit)
        """Shared with every model of this provider and name in the run
        (``limiter.limiter_for``); None: the run's default (a host's), if any."""
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.context_window = context_window
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self._owns_client = client is None
        # Made last, once every setting is checked: a refused model leaves no
        # client behind to close.
        self._client = new_client() if client is None else client

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r}, context_window={self.context_window})"

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
        params = self._params(request)
        limiter = limiter_for(self.provider, self.model, self.rate_limit)
        counted = limiter is not None and limiter.counts_tokens
        deltas = with_retries(
            lambda attempt: self._attempt(params, attempt),
            model=self.name,
            max_retries=self.max_retries,
            max_retry_wait=self.max_retry_wait,
            log=self.log,
            limiter=limiter,
            tokens=estimate_tokens(params, self._allowance(params)) if counted else 0,
        )
        try:
            yield deltas
        finally:
            await deltas.aclose()

    @abstractmethod
    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The SDK call's keyword arguments for ``request`` (pure)."""

    @abstractmethod
    def _allowance(self, params: dict[str, Any]) -> int:
        """The reply's token allowance in ``params``, for the rate limit's count."""

    @abstractmethod
    def _attempt(self, params: dict[str, Any], attempt: Attempt) -> AsyncGenerator[Delta, None]:
        """One HTTP request, raising ``ModelError`` only: the one place the
        SDK's exceptions are caught."""
