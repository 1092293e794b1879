"""Recording a model's replies to a file, and replaying them with no network.

Rules (docs/models.md tells the story): a recording is JSON lines, a header
(the model's name, context window and settings) and then one exchange per
call, in the order the calls ended: the request's digest with a mark of each
of its messages, every delta the model yielded, and how the call ended
(complete, a ``ModelError``, or cut short by its caller).  A replay answers a
request by its digest, equal requests in recorded order; a request the
recording does not hold is a ``RecordingMismatchError`` naming the first
message that differs from the nearest recorded request.  An exchange is
written synchronously when its call exits, so a cancelled call is recorded too.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, Literal

import msgspec
import trio

from loopruntime.errors import ModelError, ModelErrorKind
from loopruntime.model import Delta, Model, ModelRequest

from .digest import (
    data_digest,
    message_data,
    message_preview,
    request_digest,
    settings_data,
)
from .errors import RecordingError, RecordingMismatchError

__all__ = ["FORMAT", "VERSION", "RecordingModel", "ReplayModel"]

FORMAT: Final = "loopruntime.recording"
VERSION: Final = 1


class MessageMark(msgspec.Struct, frozen=True, kw_only=True):
    """What a recording keeps of one message of a request: enough to match
    it and to name it in an error, not the message itself."""

    role: str
    digest: str
    preview: str


class RequestMark(msgspec.Struct, frozen=True, kw_only=True):
    """A request as a recording keeps it: its digest, and one per part."""

    digest: str
    system: str
    tools: str
    settings: str
    messages: tuple[MessageMark, ...]


class RecordedError(msgspec.Struct, frozen=True, kw_only=True):
    """The ``ModelError`` a call ended with."""

    message: str
    kind: ModelErrorKind
    code: str
    retryable: bool = False
    retry_after: float | None = None
    status: int | None = None


class Exchange(msgspec.Struct, frozen=True, kw_only=True):
    """One call: the request's mark, what the model yielded, how it ended."""

    request: RequestMark
    deltas: tuple[Delta, ...]
    outcome: Literal["complete", "error", "cut"]
    error: RecordedError | None = None


class Header(msgspec.Struct, frozen=True, kw_only=True):
    """The first line of a recording."""

    format: str
    version: int
    model: str
    context_window: int
    settings: dict[str, Any] = {}


class RecordingModel:
    """A ``Model`` that passes every call to ``model`` and records it in the
    file at ``path``, which it creates (or empties) at once: an unwritable
    path is a ``RecordingError`` here, before any call.

    It reports the wrapped model's ``name``, ``context_window`` and
    ``settings``, so a loop's recorded configuration is the same recording or
    replaying.  Safe to share between the loops of one trio run; calls are
    written in the order they end.  Closing it closes nothing: the wrapped
    model stays its owner's.
    """

    def __init__(self, model: Model, path: str | os.PathLike[str]) -> None:
        self.model = model
        self.path = os.fspath(path)
        self.name = model.name
        self.context_window = model.context_window
        self.settings = _plain_settings(model)
        header = Header(
            format=FORMAT,
            version=VERSION,
            model=model.name,
            context_window=model.context_window,
            settings=self.settings,
        )
        self._write(msgspec.json.encode(header) + b"\n", mode="wb")

    def __repr__(self) -> str:
        return f"RecordingModel({self.model!r}, {self.path!r})"

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Delta]]:
        """The wrapped model's stream, recorded when the call exits (however)."""
        mark = _checked_mark(request, self.path)
        seen: list[Delta] = []
        ending: dict[str, Any] = {"outcome": "cut"}
        try:
            async with self.model.stream(request) as deltas:
                tee = _tee(deltas, seen, ending)
                try:
                    yield tee
                finally:
                    await tee.aclose()
        except ModelError as exc:
            # Raised on entry (before any delta), or by the stream itself.
            ending.setdefault("error", exc)
            raise
        finally:
            error = ending.get("error")
            exchange = Exchange(
                request=mark,
                deltas=tuple(seen),
                outcome="error" if error is not None else ending["outcome"],
                error=_recorded(error) if error is not None else None,
            )
            self._write(msgspec.json.encode(exchange) + b"\n", mode="ab")

    def _write(self, line: bytes, *, mode: Literal["wb", "ab"]) -> None:
        # Synchronous on purpose: it runs in a `finally` that a cancelled call
        # also passes, where an await would be cancelled before writing.
        try:
            with open(self.path, mode) as file:
                file.write(line)
        except OSError as exc:
            raise RecordingError(
                f"the recording {self.path} could not be written ({exc.strerror or exc}); "
                "check that its directory exists and is writable",
                path=self.path,
            ) from exc


async def _tee(
    deltas: AsyncIterator[Delta], seen: list[Delta], ending: dict[str, Any]
) -> AsyncGenerator[Delta, None]:
    try:
        async for delta in deltas:
            seen.append(delta)
            yield delta
    except ModelError as exc:
        ending["error"] = exc
        raise
    ending["outcome"] = "complete"


class ReplayModel:
    """A ``Model`` that answers from a recording made by ``RecordingModel``,
    with no network: the file is read once, here (a missing or unreadable
    one is a ``RecordingError``).

    A request is answered by the recorded call with the same digest: its
    deltas, then its error if it ended with one; a call its caller cut short
    (an interrupt, a deadline) yields what it yielded and then waits, like a
    model still writing, until its caller stops it again.  A request the
    recording does not hold raises ``RecordingMismatchError`` on entry.
    ``calls`` counts the calls made.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        header, self._exchanges = _read(self.path)
        self.name = header.model
        self.context_window = header.context_window
        self.settings = dict(header.settings)
        self.calls = 0
        self._waiting: dict[str, deque[Exchange]] = {}
        for exchange in self._exchanges:
            self._waiting.setdefault(exchange.request.digest, deque()).append(exchange)

    def __repr__(self) -> str:
        return f"ReplayModel({self.path!r})"

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[Delta]]:
        self.calls += 1
        mark = _checked_mark(request, self.path)
        waiting = self._waiting.get(mark.digest)
        if not waiting:
            raise self._mismatch(mark)
        deltas = _play(waiting.popleft())
        try:
            yield deltas
        finally:
            await deltas.aclose()

    def _mismatch(self, mark: RequestMark) -> RecordingMismatchError:
        call = f"call {self.calls} of the replay of {self.path}"
        if mark.digest in self._waiting:
            times = sum(e.request.digest == mark.digest for e in self._exchanges)
            return RecordingMismatchError(
                f"{call} asks again for a request recorded {times} time(s), each already "
                "replayed; record again if the agent now asks for it more often",
                path=self.path,
                call=self.calls,
                message_index=None,
            )
        left = [e for queue in self._waiting.values() for e in queue]
        candidates = [e.request for e in (left or self._exchanges)]
        if not candidates:
            return RecordingMismatchError(
                f"{call}: the recording holds no calls; record it again",
                path=self.path,
                call=self.calls,
                message_index=None,
            )
        nearest = max(candidates, key=lambda r: _shared(r, mark))
        difference, index = _difference(nearest, mark)
        return RecordingMismatchError(
            f"{call} matches no recorded request: {difference}; record again if the "
            "change is meant",
            path=self.path,
            call=self.calls,
            message_index=index,
        )


async def _play(exchange: Exchange) -> AsyncGenerator[Delta, None]:
    for delta in exchange.deltas:
        await trio.lowlevel.checkpoint()
        yield delta
    if exchange.error is not None:
        e = exchange.error
        raise ModelError(
            e.message,
            kind=e.kind,
            code=e.code,
            retryable=e.retryable,
            retry_after=e.retry_after,
            status=e.status,
        )
    if exchange.outcome == "cut":
        await trio.sleep_forever()


def request_mark(request: ModelRequest) -> RequestMark:
    """What a recording keeps of ``request``."""
    return RequestMark(
        digest=request_digest(request),
        system=data_digest(request.system),
        tools=data_digest([[t.name, t.description, t.input_schema] for t in request.tools]),
        settings=data_digest(settings_data(request)),
        messages=tuple(
            MessageMark(
                role=m.role, digest=data_digest(message_data(m)), preview=message_preview(m)
            )
            for m in request.messages
        ),
    )


def _checked_mark(request: ModelRequest, path: str) -> RequestMark:
    try:
        return request_mark(request)
    except TypeError as exc:
        raise RecordingError(
            f"a request cannot be matched against the recording {path}: {exc}; "
            "keep ModelRequest.options to values JSON can hold",
            path=path,
        ) from exc


def _shared(recorded: RequestMark, now: RequestMark) -> int:
    """How many leading messages two requests have in common."""
    count = 0
    for a, b in zip(recorded.messages, now.messages, strict=False):
        if a.digest != b.digest:
            break
        count += 1
    return count


def _difference(recorded: RequestMark, now: RequestMark) -> tuple[str, int | None]:
    """The first difference between a recorded request and this one, said,
    and the index of the message it is in (None outside the messages)."""
    n = _shared(recorded, now)
    if n < len(recorded.messages) and n < len(now.messages):
        was, new = recorded.messages[n], now.messages[n]
        return (
            f"the message at index {n} ({new.role}) differs: recorded {was.preview!r}, "
            f"now {new.preview!r}",
            n,
        )
    if n < len(now.messages):
        new = now.messages[n]
        return (
            f"the message at index {n} ({new.role}) is new: {new.preview!r} (the nearest "
            "recorded request ends before it)",
            n,
        )
    if n < len(recorded.messages):
        was = recorded.messages[n]
        return (
            f"the request ends before the message at index {n}; the recorded one goes on "
            f"with ({was.role}) {was.preview!r}",
            n,
        )
    for part, said in (
        ("system", "the system prompt"),
        ("tools", "the tools"),
        ("settings", "the settings (max_tokens, tool_choice, options)"),
    ):
        if getattr(recorded, part) != getattr(now, part):
            return f"{said} differ from the recorded request's", None
    return "the request differs from every recorded one", None


def _recorded(error: ModelError) -> RecordedError:
    return RecordedError(
        message=str(error),
        kind=error.error_kind,
        code=error.code,
        retryable=error.retryable,
        retry_after=error.retry_after,
        status=error.status,
    )


def _plain_settings(model: Model) -> dict[str, Any]:
    """The wrapped model's ``settings`` as JSON can hold them."""
    found = getattr(model, "settings", None)
    if not isinstance(found, dict):
        return {}
    try:
        plain = msgspec.json.decode(msgspec.json.encode(found))
    except (TypeError, msgspec.EncodeError):
        return {str(k): repr(v) for k, v in found.items()}
    return plain if isinstance(plain, dict) else {}


_HEADER = msgspec.json.Decoder(Header)
_EXCHANGE = msgspec.json.Decoder(Exchange)


def _read(path: str) -> tuple[Header, list[Exchange]]:
    try:
        with open(path, "rb") as file:
            lines = file.read().splitlines()
    except FileNotFoundError as exc:
        raise RecordingError(
            f"there is no recording at {path}; make one by running the test once with "
            "RecordingModel(model, path)",
            path=path,
        ) from exc
    except OSError as exc:
        raise RecordingError(
            f"the recording {path} could not be read ({exc.strerror or exc})", path=path
        ) from exc
    try:
        header = _HEADER.decode(lines[0]) if lines else None
    except msgspec.DecodeError:
        header = None
    if header is None or header.format != FORMAT:
        raise RecordingError(
            f"{path} is not a model recording (its first line is no {FORMAT} header)",
            path=path,
        )
    if header.version > VERSION:
        raise RecordingError(
            f"the recording {path} has format version {header.version}, newer than this "
            f"loopruntime reads ({VERSION}); upgrade loopruntime or record it again",
            path=path,
        )
    exchanges: list[Exchange] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            exchanges.append(_EXCHANGE.decode(line))
        except msgspec.DecodeError as exc:
            raise RecordingError(
                f"line {number} of the recording {path} is not a recorded call ({exc}); "
                "record it again",
                path=path,
            ) from exc
    return header, exchanges
