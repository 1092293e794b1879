"""Claude through the official ``anthropic`` SDK's streaming Messages API.

``AnthropicModel`` implements ``loopruntime.model.Model``: ``stream(request)``
maps a ``ModelRequest`` to one ``POST /v1/messages`` with ``stream: true`` and
turns the server-sent events into the runtime's deltas (``journal.content``
pieces plus ``UsageDelta`` and ``StopDelta``).

Running under trio
------------------
The SDK's ``AsyncAnthropic`` sends requests with ``httpx2.AsyncClient``, whose
transport (``httpcore2``) picks its network backend per call with ``sniffio``:
under trio it uses its trio backend (trio sockets, and trio locks and events
for the connection pool), so no asyncio loop and no worker thread is
involved.  The tests prove it against a local server (and the SDK reports it
in the ``X-Stainless-Async: async:trio`` header it sends).  Two asyncio
habits of the SDK remain, and this module works around both:

* The SDK's client wrapper closes an abandoned client from ``__del__`` by
  scheduling a task on the running *asyncio* loop.  Under trio that silently
  does nothing, so this adapter closes the client it created in ``aclose()``
  (``async with AnthropicModel(...) as model:`` does it for you).
* The SDK retries on its own and sleeps with ``anyio.sleep``.  The client
  created here has ``max_retries=0``: retrying is decided once, in this
  module, before any output, and backoff waits with ``trio.sleep`` (so tests
  under ``autojump_clock`` run instantly).  **A client you pass in should be
  made with ``max_retries=0`` too**, or the SDK retries again inside each of
  this adapter's attempts, multiplying requests and waits.

Errors and retries
------------------
SDK and ``httpx2`` exceptions are translated once, here, into
``loopruntime.errors.ModelError`` with ``error_kind`` one of ``overloaded``
(529), ``rate_limited`` (429), ``authentication`` (401), ``permission``
(402/403), ``invalid_request`` (400/413/422...), ``not_found`` (404),
``server`` (other 5xx), ``connection`` (network failure, or the stream ended
before ``message_stop``) or ``protocol`` (unreadable response).  Overloaded,
rate-limited, server and connection failures are retried — up to
``max_retries`` times, honouring ``retry-after-ms`` / ``retry-after`` and the
API's ``x-should-retry`` — but only while nothing has been yielded to the
caller.  Once a delta has been yielded a failure is raised with
``retryable=False`` and is never resent: the caller stores what arrived with
its truncation notice.  (The input-token count from ``message_start`` is held
back until the first content arrives, so an ``overloaded_error`` event right
after ``message_start`` is still retried.)

Prompt caching
--------------
With ``prompt_cache=True`` (the default) the request carries up to three
``cache_control`` breakpoints: the system prompt (which also covers the tool
definitions before it; without a system prompt the last tool is marked
instead), the newest message, and the last user message before the newest
assistant reply — the place where the *previous* request ended, which that
request's "newest message" breakpoint wrote to the cache.  So each call reads
the whole earlier conversation from the cache and writes the new tail, however
many blocks a tool round added in between.  ``UsageDelta`` reports the cache
read and write token counts.

Mapping rules
-------------
* Consecutive messages of the same role are merged into one API message (the
  runtime may store a tool-result message followed by a steering message).
* All messages are sent as given, ``synthetic`` ones too: notices are plain
  text the model should see.
* Thinking blocks without a signature are dropped: the API rejects unsigned
  thinking, and such a block only exists when a reply was cut off before its
  signature arrived.  Text blocks that are empty or whitespace-only are
  dropped too (the API rejects them), and a message left empty is skipped.
* When the conversation ends with an assistant message (the runtime continues
  a ``pause_turn`` reply that way), trailing whitespace is cut from its last
  text block: the API refuses final assistant content that ends in
  whitespace.  The journal keeps the reply as it arrived.
* ``ModelRequest.options`` entries are added to the request body verbatim
  (``temperature``, ``stop_sequences``, ``metadata``, or ``thinking`` to
  override the configured thinking for one call); keys this adapter sets
  itself are refused.

Stream rules
------------
The SDK builds event objects leniently: an event or block type it does not
know is constructed as *some* known class with the unknown ``type`` string
inside.  So events are dispatched on their ``type`` strings, never on their
Python classes.  A content block of a type the runtime does not model
(server tools, types from a newer API version) is skipped — but text deltas
that arrive for it are kept, as a text block, so no text is lost.  Streamed
tool-input JSON is passed on unchanged, valid or not: the ``Accumulator``
judges it and the runtime tells the model.

Secrets: the API key is read from the argument or ``ANTHROPIC_API_KEY``,
handed to the SDK client and kept nowhere else, and never logged; the
journaled ``name`` is ``"anthropic:<model>"``.  A key with a space or a
control character in it (two keys pasted together, a line break) is refused
when the model is made, because the HTTP stack would name the whole header
value in its error.  For a client passed in, the key and auth token it holds
are cut from every ``ModelError`` message, and a foreign exception whose text
shows them is not chained.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from typing import Any, Final, Literal, Self, TypeAlias, assert_never

import anthropic
import httpx2
import structlog
import trio

from journal.content import (
    Block,
    BlockStarted,
    BlockStopped,
    Image,
    InputJsonDelta,
    Message,
    RedactedThinking,
    SignatureDelta,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolResult,
    ToolUse,
    Usage,
)
from loopruntime.errors import ModelError, ModelErrorKind
from loopruntime.model import Delta, ModelRequest, StopDelta, ToolSchema, UsageDelta

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MODEL",
    "AnthropicModel",
    "StreamTranslator",
    "api_messages",
    "request_params",
]

log = structlog.get_logger(__name__)

DEFAULT_MODEL: Final = "claude-sonnet-5-5"
"""Used by ``from_env`` when neither an argument nor ``ANTHROPIC_MODEL`` names one."""

DEFAULT_CONTEXT_WINDOW: Final = 200_000

ThinkingOption: TypeAlias = int | Literal["adaptive"] | Mapping[str, Any] | None
"""``None``: the API default; an int: extended thinking with that token budget;
``"adaptive"``: the model decides; a mapping: sent verbatim as ``thinking``."""

_EPHEMERAL: Final[Mapping[str, str]] = {"type": "ephemeral"}

# Body keys this adapter derives from the ModelRequest; `options` may not set them.
_OWNED_KEYS: Final = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "max_tokens", "stream"}
)

# Backoff when the API gives no retry-after: 0.5 s doubling to at most 8 s,
# shortened by up to a quarter at random so parallel loops do not retry in step.
_INITIAL_BACKOFF: Final = 0.5
_MAX_BACKOFF: Final = 8.0


class AnthropicModel:
    """A ``Model`` backed by Claude.

    ``stream(request)`` is an async context manager; entering it yields an
    async iterator of ``Delta`` values, exiting it closes the HTTP response.
    It raises ``ModelError`` only; ``retryable`` on a raised error is true only
    if nothing was yielded by that call.  Safe to share between concurrent
    loops of one trio run.

    Owns the SDK client it creates (close it with ``aclose()`` or ``async
    with``); a ``client`` passed in stays the caller's to close, and should be
    made with ``max_retries=0`` (see the module docstring).

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
    ) -> None:
        if not model:
            raise ValueError("AnthropicModel needs a model name, e.g. 'claude-sonnet-5-5'")
        thinking_param = _thinking_param(thinking)
        budget = thinking_param.get("budget_tokens") if thinking_param else None
        if max_tokens is not None and isinstance(budget, int) and budget >= max_tokens:
            raise ValueError(
                f"thinking budget ({budget} tokens) must be below max_tokens ({max_tokens}); "
                "raise max_tokens or lower the budget"
            )
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries}")
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

    async def _deltas(
        self, client: anthropic.AsyncAnthropic, params: dict[str, Any]
    ) -> AsyncGenerator[Delta, None]:
        """All attempts of one call.  A failed attempt is retried only if it
        yielded nothing; see the module docstring."""
        attempt = _Attempt()
        while True:
            attempt.number += 1
            try:
                async with aclosing(self._attempt(client, params, attempt)) as deltas:
                    async for delta in deltas:
                        attempt.output_started = True
                        yield delta
                return
            except ModelError as err:
                delay = self._retry_delay(err, attempt)
                if delay is None:
                    raise
                log.info(
                    "model_retry",
                    model=self.name,
                    kind=err.error_kind,
                    status=err.status,
                    attempt=attempt.number,
                    delay=round(delay, 3),
                )
                await trio.sleep(delay)

    def _retry_delay(self, err: ModelError, attempt: _Attempt) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        # An error after output already says retryable=False; checking
        # output_started here too keeps the rule in the one place that decides.
        if attempt.output_started or not err.retryable or attempt.number > self.max_retries:
            return None
        if err.retry_after is not None:
            if err.retry_after > self.max_retry_wait:
                return None
            return max(err.retry_after, 0.0)
        backoff = min(_INITIAL_BACKOFF * 2 ** (attempt.number - 1), _MAX_BACKOFF)
        return backoff * (1 - 0.25 * random.random())

    async def _attempt(
        self, client: anthropic.AsyncAnthropic, params: dict[str, Any], attempt: _Attempt
    ) -> AsyncGenerator[Delta, None]:
        """One HTTP request.  Every SDK or transport failure leaves here as a
        ``ModelError`` — this is the one place foreign exceptions are caught."""
        secrets = _client_secrets(client)
        try:
            sdk_stream = await client.messages.create(**params, stream=True)
        except _FOREIGN_ERRORS as exc:
            raise _translate(exc, attempt, model=self.model, secrets=secrets) from _cause(
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
                except _FOREIGN_ERRORS as exc:
                    raise _translate(exc, attempt, model=self.model, secrets=secrets) from _cause(
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
                    f"(attempt {attempt.number}){_after_output(attempt)}; {_ADVICE['connection']}",
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


class _Attempt:
    """Progress of one call across its attempts (mutable, private)."""

    __slots__ = ("number", "output_started")

    def __init__(self) -> None:
        self.number = 0
        self.output_started = False


# -- request mapping (pure) ---------------------------------------------------


def request_params(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int | None = None,
    thinking: Mapping[str, Any] | None = None,
    prompt_cache: bool = True,
) -> dict[str, Any]:
    """The keyword arguments for ``messages.create`` (everything but ``stream``).

    ``max_tokens``, when given, replaces ``request.max_tokens``.  When it is
    not given and thinking has a token budget, the budget is added to
    ``request.max_tokens``: the API counts thinking against ``max_tokens`` and
    wants the budget below it, so thinking must not eat the reply's allowance.

    Pure; the returned dict and everything in it is new and owned by the caller.
    Raises ``ModelError(kind="invalid_request")`` for an ``options`` key the
    adapter sets itself.
    """
    clashes = sorted(_OWNED_KEYS & request.options.keys())
    if clashes:
        raise ModelError(
            f"ModelRequest.options may not set {', '.join(clashes)}: the Anthropic adapter "
            "derives them from the request itself; set them through ModelRequest fields",
            kind="invalid_request",
            code="model.invalid_option",
        )
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_tokens if max_tokens is None else max_tokens,
        "messages": api_messages(request.messages, prompt_cache=prompt_cache),
    }
    if request.system.strip():
        system: dict[str, Any] = {"type": "text", "text": request.system}
        if prompt_cache:
            system["cache_control"] = dict(_EPHEMERAL)
        params["system"] = [system]
    if request.tools:
        tools = [_api_tool(t) for t in request.tools]
        if prompt_cache and "system" not in params:
            # The system breakpoint covers the tools before it; without one,
            # mark the tools themselves so their (often long) schemas are cached.
            tools[-1]["cache_control"] = dict(_EPHEMERAL)
        params["tools"] = tools
        params["tool_choice"] = {"type": request.tool_choice}
    if thinking is not None:
        params["thinking"] = dict(thinking)
    extra = dict(request.options)
    if "thinking" in extra:
        params["thinking"] = extra.pop("thinking")
    if extra:
        params["extra_body"] = extra
    chosen = params.get("thinking")
    budget = chosen.get("budget_tokens") if isinstance(chosen, Mapping) else None
    if max_tokens is None and isinstance(budget, int):
        params["max_tokens"] += budget
    return params


def api_messages(messages: Sequence[Message], *, prompt_cache: bool = True) -> list[dict[str, Any]]:
    """``Message`` values as API message dicts: same-role runs merged, blocks
    the API would reject dropped, cache breakpoints placed (see the module
    docstring).  Pure; returns new objects."""
    out: list[dict[str, Any]] = []
    for message in messages:
        blocks = [b for b in map(_api_block, message.blocks) if b is not None]
        if not blocks:
            continue
        if out and out[-1]["role"] == message.role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": message.role, "content": blocks})
    if out and out[-1]["role"] == "assistant":
        # The API refuses final assistant content that ends in whitespace.
        # Whitespace-only text was dropped above, so the block stays non-empty.
        last = out[-1]["content"][-1]
        if last["type"] == "text":
            last["text"] = last["text"].rstrip()
    if prompt_cache and out:
        _mark(out[-1])
        # Where the previous request ended: the user message just before the
        # newest assistant reply (found walking back from the end).
        for i in range(len(out) - 2, 0, -1):
            if out[i]["role"] == "assistant":
                _mark(out[i - 1])
                break
    return out


def _mark(message: dict[str, Any]) -> None:
    # Thinking blocks cannot carry cache_control; the last other block can.
    for block in reversed(message["content"]):
        if block["type"] not in ("thinking", "redacted_thinking"):
            block["cache_control"] = dict(_EPHEMERAL)
            return


def _api_block(block: Block) -> dict[str, Any] | None:
    match block:
        case Text():
            return _api_text(block)
        case Thinking():
            if not block.signature:
                return None  # unsigned thinking is rejected by the API
            return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
        case RedactedThinking():
            return {"type": "redacted_thinking", "data": block.data}
        case Image():
            return _api_image(block)
        case ToolUse():
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        case ToolResult():
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
            content = [
                c
                for c in (
                    _api_text(p) if isinstance(p, Text) else _api_image(p) for p in block.content
                )
                if c is not None
            ]
            if content:
                result["content"] = content
            if block.is_error:
                result["is_error"] = True
            return result
        case _:
            assert_never(block)


def _api_text(block: Text) -> dict[str, Any] | None:
    return {"type": "text", "text": block.text} if block.text.strip() else None


def _api_image(block: Image) -> dict[str, Any]:
    source = {"type": "base64", "media_type": block.media_type, "data": block.data}
    return {"type": "image", "source": source}


def _api_tool(tool: ToolSchema) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


def _thinking_param(thinking: ThinkingOption) -> dict[str, Any] | None:
    if thinking is None:
        return None
    if thinking == "adaptive":
        return {"type": "adaptive"}
    if isinstance(thinking, bool):  # bool is an int; True is no budget
        raise ValueError("thinking must be a token budget, 'adaptive', or a mapping, not a bool")
    if isinstance(thinking, int):
        return {"type": "enabled", "budget_tokens": thinking}
    if isinstance(thinking, Mapping):
        return dict(thinking)
    raise ValueError(f"thinking must be a token budget, 'adaptive', or a mapping, not {thinking!r}")


# -- stream translation (pure) ------------------------------------------------


class StreamTranslator:
    """Turns Messages API stream events into runtime deltas.  Pure: no I/O.

    ``feed(event)`` takes an SDK event object (or anything with the same
    attributes) and returns the deltas it stands for, possibly none.
    ``finished`` turns true at ``message_stop``.
    """

    def __init__(self) -> None:
        self.finished = False
        self._skipped: set[int] = set()
        """Indexes of blocks of a type the runtime does not model."""
        self._rescued: set[int] = set()
        """Skipped blocks whose text deltas are being kept as a text block."""

    def feed(self, event: Any) -> list[Delta]:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            usage = getattr(getattr(event, "message", None), "usage", None)
            return [UsageDelta(usage=_usage(usage))] if usage is not None else []
        if kind == "content_block_start":
            return self._block_start(_int(event, "index"), getattr(event, "content_block", None))
        if kind == "content_block_delta":
            return self._block_delta(_int(event, "index"), getattr(event, "delta", None))
        if kind == "content_block_stop":
            index = _int(event, "index")
            if index in self._skipped and index not in self._rescued:
                return []
            return [BlockStopped(index=index)]
        if kind == "message_delta":
            out: list[Delta] = []
            usage = getattr(event, "usage", None)
            if usage is not None:
                out.append(UsageDelta(usage=_usage(usage)))
            stop_reason = getattr(getattr(event, "delta", None), "stop_reason", None)
            if isinstance(stop_reason, str) and stop_reason:
                out.append(StopDelta(stop_reason=stop_reason))
            return out
        if kind == "message_stop":
            self.finished = True
            return []
        # ping is filtered by the SDK; any event type from a newer API is ignored.
        return []

    def _block_start(self, index: int, block: Any) -> list[Delta]:
        kind = getattr(block, "type", None)
        if kind == "text":
            out: list[Delta] = [BlockStarted(index=index, kind="text")]
            text = _str(block, "text")
            if text:
                out.append(TextDelta(index=index, text=text))
            return out
        if kind == "thinking":
            out = [BlockStarted(index=index, kind="thinking")]
            thinking, signature = _str(block, "thinking"), _str(block, "signature")
            if thinking:
                out.append(ThinkingDelta(index=index, thinking=thinking))
            if signature:
                out.append(SignatureDelta(index=index, signature=signature))
            return out
        if kind == "redacted_thinking":
            return [BlockStarted(index=index, kind="redacted_thinking", data=_str(block, "data"))]
        if kind == "tool_use":
            out = [
                BlockStarted(
                    index=index, kind="tool_use", id=_str(block, "id"), name=_str(block, "name")
                )
            ]
            # The streaming API starts tool_use with `input: {}` and streams the
            # JSON; an input given whole here would otherwise be lost.
            initial = getattr(block, "input", None)
            if isinstance(initial, dict) and initial:
                out.append(InputJsonDelta(index=index, partial_json=json.dumps(initial)))
            return out
        log.debug("model_block_skipped", block_type=kind, index=index)
        self._skipped.add(index)
        return []

    def _block_delta(self, index: int, delta: Any) -> list[Delta]:
        kind = getattr(delta, "type", None)
        if index in self._skipped:
            # Keep text streamed into a block we do not model, as a text block.
            if kind != "text_delta" or not _str(delta, "text"):
                return []
            out: list[Delta] = []
            if index not in self._rescued:
                self._rescued.add(index)
                out.append(BlockStarted(index=index, kind="text"))
            out.append(TextDelta(index=index, text=_str(delta, "text")))
            return out
        if kind == "text_delta":
            return [TextDelta(index=index, text=_str(delta, "text"))]
        if kind == "thinking_delta":
            return [ThinkingDelta(index=index, thinking=_str(delta, "thinking"))]
        if kind == "signature_delta":
            return [SignatureDelta(index=index, signature=_str(delta, "signature"))]
        if kind == "input_json_delta":
            return [InputJsonDelta(index=index, partial_json=_str(delta, "partial_json"))]
        # citations_delta (citations are not modelled) and delta types from a
        # newer API carry no text the runtime keeps.
        return []


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=_int(usage, "input_tokens"),
        output_tokens=_int(usage, "output_tokens"),
        cache_read_tokens=_int(usage, "cache_read_input_tokens"),
        cache_creation_tokens=_int(usage, "cache_creation_input_tokens"),
    )


def _int(obj: Any, name: str) -> int:
    value = getattr(obj, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(obj: Any, name: str) -> str:
    value = getattr(obj, name, None)
    return value if isinstance(value, str) else ""


# -- error translation --------------------------------------------------------

_FOREIGN_ERRORS: Final = (anthropic.AnthropicError, httpx2.HTTPError, json.JSONDecodeError)
"""What the SDK and its transport raise: API errors, transport errors that
escape mid-stream unwrapped, and an SSE ``data`` line that is not JSON."""

_ADVICE: Final[Mapping[ModelErrorKind, str]] = {
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


def _client_secrets(client: anthropic.AsyncAnthropic) -> tuple[str, ...]:
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


def _cause(exc: BaseException, secrets: Sequence[str]) -> BaseException | None:
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


def _translate(
    exc: Exception, attempt: _Attempt, *, model: str, secrets: Sequence[str] = ()
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


def _translate_unredacted(exc: Exception, attempt: _Attempt, *, model: str) -> ModelError:
    """What ``_translate`` returns before credentials are cut out."""
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
        hint = f"retry after {retry_after:g} s" if retry_after is not None else _ADVICE[kind]
        if kind == "not_found":
            hint = f"model {model!r} or the endpoint was not found; {hint}"
        return _error(
            f"Anthropic API {kind.replace('_', ' ')}: {label}: {detail} ({where})"
            f"{_after_output(attempt)}; {hint}",
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
            f"{_after_output(attempt)}; {_ADVICE['connection']}",
            kind="connection",
            retryable=True,
            attempt=attempt,
        )
    if isinstance(exc, anthropic.CredentialsError):
        return _error(
            f"Anthropic credentials could not be loaded ({exc}); {_ADVICE['authentication']}",
            kind="authentication",
            retryable=False,
            attempt=attempt,
        )
    return _error(
        f"the Anthropic API response could not be read ({type(exc).__name__}: {exc}; {where})"
        f"{_after_output(attempt)}; {_ADVICE['protocol']}",
        kind="protocol",
        retryable=False,
        attempt=attempt,
    )


def _error(
    message: str,
    *,
    kind: ModelErrorKind,
    retryable: bool,
    attempt: _Attempt,
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


def _after_output(attempt: _Attempt) -> str:
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
