"""A web service on asyncio that talks to loopruntime sessions through the journal.

Run a host and the service beside it, on one journal::

    export LOOPRUNTIME_JOURNAL=sqlite:///$PWD/service.db
    PYTHONPATH=. loopruntime host --definitions examples.web_service.agents:DEFINITIONS &
    uvicorn examples.web_service.app:app

The routes (JSON in, JSON or Server-Sent Events out):

* ``POST /sessions`` ``{"definition": "echo"}``: a new session; with an
  ``Idempotency-Key`` header a retry returns the same session.  422 when no
  live host serves the definition (nothing is created: it would only wait).
* ``POST /sessions/{id}/messages`` ``{"text": "..."}``: the message, sent with
  the request's ``Idempotency-Key`` as its command key (required): a retried
  request is one input.
* ``GET /sessions/{id}/commands/{key}?wait=SECONDS``: what became of the
  command sent under ``key``, waiting up to ``wait`` seconds (default 10, at
  most 60): ``applied`` (with its value), ``refused`` (with the reason: a
  host consumes a command it will never apply once, with its error) or
  ``waiting`` (with why: no host holds the session, or its host is busy).
* ``GET /sessions/{id}/events``: the session's records as Server-Sent Events,
  from the start or after the ``Last-Event-ID`` header (or ``?after=SEQ``);
  each event's id is its seq, so a browser that reconnects resumes exactly;
  404 for a session that is not there.
* ``POST /gates/{gate_id}`` ``{"session": id, "answer": "..."}`` or
  ``{"session": id, "allow": true, "scope": "once"}``: answer a question or
  decide a permission.  The key is the ``Idempotency-Key`` header, else the
  gate id (a gate is answered once).  An ``Idempotency-Key`` has 1 to 128
  characters.
* ``GET /sessions``: every session with its owner and waiting commands.

A body larger than ``MAX_BODY_BYTES``, or a command larger than the journal
takes in one inbox entry (``journal.inbox.MAX_ENTRY_BYTES``, 16 MiB, unless the
journal URL sets ``max_entry_bytes``), is answered 413 naming the size and the
limit; nothing is written.

The service runs no loops: it writes commands into the inbox and reads
records back, so it can restart, or run as many copies, at any time.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from journal import InboxEntryTooLargeError, InboxKeyError, SessionNotFoundError
from journal.inbox import MAX_ENTRY_BYTES
from loopruntime import CommandError, PayloadTooLargeError
from session import Client, CommandRefusedError, SessionExistsError, WaitTimeoutError, open_client

__all__ = ["app", "create_app"]

DEFAULT_JOURNAL = "sqlite:///.loopruntime/journal.db"

MAX_BODY_BYTES = MAX_ENTRY_BYTES + 64 * 1024
"""The most bytes of a request body the service reads: a message as large as
the inbox takes, with room for its JSON around it.  A larger body is refused
(413) before it is read into memory."""


def _client(request: Request) -> Client:
    client: Client = request.app.state.client
    return client


async def _body(request: Request) -> dict[str, Any]:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large(int(declared))
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large(size)
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks))
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise _Problem(400, "the body must be a JSON object")
    return body


class _Problem(Exception):
    def __init__(self, status: int, detail: str, **fields: int) -> None:
        super().__init__(detail)
        self.status, self.detail, self.fields = status, detail, fields


def _too_large(size: int) -> _Problem:
    return _Problem(
        413,
        f"the request body is {size:,} bytes or more, over the limit of {MAX_BODY_BYTES:,} bytes",
        size=size,
        limit=MAX_BODY_BYTES,
    )


KEY_LIMIT = 128
"""Characters an ``Idempotency-Key`` may have (the commands' keys add a short
prefix to it, and the inbox takes keys of up to 200)."""


def _idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key``, checked; never echoed back in an
    error (it may be long, or a secret the caller did not mean to log)."""
    key = request.headers.get("idempotency-key")
    if key is not None and not 0 < len(key) <= KEY_LIMIT:
        raise _Problem(
            400, f"the Idempotency-Key header must have 1 to {KEY_LIMIT} characters, not {len(key)}"
        )
    return key


def _shown(value: str) -> str:
    """A value quoted back in an error: whole when short, else only its length."""
    return repr(value) if len(value) <= 40 else f"a value of {len(value)} characters"


def _session_for(key: str) -> str:
    """The session a creation key names: the same key, the same session."""
    return "ses_" + hashlib.blake2b(key.encode(), digest_size=10).hexdigest()


async def create_session(request: Request) -> Response:
    body = await _body(request)
    definition = body.get("definition", "echo")
    if not isinstance(definition, str) or not definition:
        raise _Problem(400, "`definition` must name a definition the host runs")
    key = _idempotency_key(request)
    session_id = _session_for(key) if key else None
    client = _client(request)
    if not any(h.live and definition in h.definitions for h in await client.hosts()):
        raise _Problem(
            422,
            f"no live host serves definition {definition!r}: nothing was created; start a "
            "host that runs it (`loopruntime host --definitions module:NAME`) and send the "
            "request again",
        )
    session_id = await client.create(
        definition, session_id=session_id, key=f"create/{key or session_id or os.urandom(8).hex()}"
    )
    return JSONResponse({"session": session_id, "definition": definition}, status_code=201)


async def post_message(request: Request) -> Response:
    session_id = request.path_params["session_id"]
    key = _idempotency_key(request)
    if not key:
        raise _Problem(400, "send an Idempotency-Key header: it makes a retried message one input")
    body = await _body(request)
    text = body.get("text")
    if not isinstance(text, str) or not text:
        raise _Problem(400, "`text` must be a non-empty string")
    entry = await _client(request).submit(session_id, text, key=key)
    outcome = f"/sessions/{session_id}/commands/{quote(key, safe='')}"
    return JSONResponse(
        {"session": session_id, "key": key, "entry": entry.number, "outcome": outcome},
        status_code=202,
    )


async def command_outcome(request: Request) -> Response:
    session_id, key = request.path_params["session_id"], request.path_params["key"]
    given = request.query_params.get("wait", "10")
    try:
        wait = float(given)
    except ValueError:
        wait = -1.0
    if not 0 < wait <= 60:
        raise _Problem(
            400, f"`wait` must be a number of seconds above 0 and at most 60, not {given!r}"
        )
    try:
        outcome = await _client(request).wait(session_id, key, timeout=wait)
    except KeyError:
        raise _Problem(404, f"session {session_id} has no command with that key") from None
    except CommandRefusedError as exc:
        refused = {"error": exc.outcome.error, "reason": exc.outcome.message}
        return JSONResponse({"state": "refused", **refused})
    except WaitTimeoutError as exc:
        return JSONResponse({"state": "waiting", "reason": str(exc)})
    return JSONResponse({"state": "applied", "value": outcome.value, "record": outcome.record})


async def answer_gate(request: Request) -> Response:
    gate_id = request.path_params["gate_id"]
    body = await _body(request)
    session_id = body.get("session")
    if not isinstance(session_id, str):
        raise _Problem(400, "`session` must name the gate's session")
    key = _idempotency_key(request) or f"gate/{gate_id}"
    client = _client(request)
    if "answer" in body:
        entry = await client.answer(session_id, gate_id, body["answer"], key=key)
    elif isinstance(body.get("allow"), bool):
        scope = body.get("scope", "once")
        entry = await client.decide(session_id, gate_id, body["allow"], scope, key=key)
    else:
        raise _Problem(400, "send `answer` (a question) or `allow` (a permission)")
    return JSONResponse(
        {"session": session_id, "gate": gate_id, "key": key, "entry": entry.number},
        status_code=202,
    )


def _resume_from(request: Request) -> int:
    given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        after = int(given)
    except ValueError:
        raise _Problem(400, f"Last-Event-ID / after must be a seq, not {_shown(given)}") from None
    return max(after, 0)


async def session_events(request: Request) -> Response:
    session_id = request.path_params["session_id"]
    after = _resume_from(request)
    client = _client(request)
    # A session that is not there is a 404, not a stream: the client's list is
    # its one public way to tell (a service with many sessions would keep
    # its own index).
    if not any(info.session == session_id for info in await client.sessions()):
        raise _Problem(404, f"there is no session {session_id} in this journal")
    records = client.subscribe(session_id, after)

    async def stream() -> AsyncIterator[bytes]:
        # A comment first, so the response starts at once even when the
        # session has no records yet (its host has not started it).
        yield b": records after seq %d\n\n" % after
        try:
            async for record in records:
                yield _event(record)
        except SessionNotFoundError as exc:
            yield b"event: error\ndata: %s\n\n" % _json.encode({"error": str(exc)})

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


_json = msgspec.json.Encoder()


def _event(record: Any) -> bytes:
    data = {
        "seq": record.seq,
        "id": record.id,
        "loop": record.loop,
        "at": record.at,
        "event": msgspec.to_builtins(record.event),
    }
    tag = type(record.event).__struct_config__.tag
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (record.seq, tag.encode(), _json.encode(data))


async def list_sessions(request: Request) -> Response:
    return JSONResponse([msgspec.to_builtins(info) for info in await _client(request).sessions()])


async def _problem(request: Request, exc: Exception) -> Response:
    if isinstance(exc, _Problem):
        return JSONResponse({"error": exc.detail, **exc.fields}, status_code=exc.status)
    if isinstance(exc, PayloadTooLargeError | InboxEntryTooLargeError):
        found = {"error": str(exc), "size": exc.size, "limit": exc.limit}
        return JSONResponse(found, status_code=413)
    if isinstance(exc, HTTPException):  # no such route, or not that method
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
    if isinstance(exc, SessionNotFoundError):
        return JSONResponse({"error": str(exc)}, status_code=404)
    if isinstance(exc, InboxKeyError | SessionExistsError):
        return JSONResponse({"error": str(exc)}, status_code=409)
    return JSONResponse({"error": str(exc)}, status_code=422)


def create_app(journal_url: str | None = None) -> Starlette:
    """The service on the journal at ``journal_url`` (default ``$LOOPRUNTIME_JOURNAL``)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        url = journal_url or os.environ.get("LOOPRUNTIME_JOURNAL") or DEFAULT_JOURNAL
        async with open_client(url) as client:
            app.state.client = client
            yield

    return Starlette(
        routes=[
            Route("/sessions", create_session, methods=["POST"]),
            Route("/sessions", list_sessions, methods=["GET"]),
            Route("/sessions/{session_id}/messages", post_message, methods=["POST"]),
            Route("/sessions/{session_id}/events", session_events, methods=["GET"]),
            Route("/sessions/{session_id}/commands/{key:path}", command_outcome, methods=["GET"]),
            Route("/gates/{gate_id}", answer_gate, methods=["POST"]),
        ],
        exception_handlers={
            _Problem: _problem,
            HTTPException: _problem,
            SessionNotFoundError: _problem,
            InboxKeyError: _problem,
            InboxEntryTooLargeError: _problem,
            SessionExistsError: _problem,
            CommandError: _problem,
            ValueError: _problem,
        },
        lifespan=lifespan,
    )


app = create_app()
