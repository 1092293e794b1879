"""The console's ASGI application (Starlette): pages, JSON, live streams, actions.

Rules: every request needs the console's token (the cookie set by the link
the console printed, the ``X-Console-Token`` header, or ``?token=``); a
request that changes anything (POST) needs it in the header, never the
cookie alone, and is refused when it comes from another site (``Origin``,
``Sec-Fetch-Site``) or when the console is read-only.  Commands go through
the session's inbox (``Client``) under an idempotency key; the console never
takes a lease.  An error is a 4xx/5xx with a JSON reason, never a traceback.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode

import msgspec
import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from journal import InboxKeyError, Journal, JournalError
from journal import inbox as ib
from journal.events import CommandKeyed, GateCancelled, GateResolved, ToolResolved
from loopruntime import LoopError
from loopruntime.host import FoldError

from ..clients.client import CommandRefusedError
from ..embedded.restore import read_states
from ..replay import build_tree, render_states, states_at, tree_json
from .guards import Console, ConsoleError
from .pages import list_page, message_page, session_page
from .streams import EventStream, list_stream, session_stream
from .views import STATUS_ORDER

__all__ = ["URL_CONFIRMED", "ConsoleError", "create_app"]

log = structlog.get_logger(__name__)

URL_CONFIRMED = "confirmed"
"""The answer a URL gate gets when it is confirmed without a value."""


# -- pages ------------------------------------------------------------------------


def _page(console: Console, request: Request, render: Callable[[], str]) -> Response:
    """A page: a ``?token=`` link sets the cookie and sends the browser on
    without the token in the address bar (nor in its history)."""
    token = request.query_params.get("token")
    if token is not None and console._matches(token):
        query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
        target = request.url.path + (f"?{query}" if query else "")
        response: Response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            console.cookie_name(request),
            console.token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response
    console.check_read(request)
    return HTMLResponse(render(), headers=_PAGE_HEADERS)


_PAGE_HEADERS = {
    # Nothing from elsewhere: no remote script, style, frame or connection.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


async def _index(request: Request) -> Response:
    console = _console(request)
    return _page(
        console, request, lambda: list_page(console.token, console.read_only, console.principal)
    )


async def _session(request: Request) -> Response:
    console = _console(request)
    sid = request.path_params["session"]
    if request.query_params.get("token") is None:
        console.check_read(request)
        await console.head(sid)
    return _page(
        console,
        request,
        lambda: session_page(sid, console.token, console.read_only, console.principal),
    )


async def _sessions(request: Request) -> Response:
    console = _console(request)
    console.check_read(request)
    wanted = request.query_params.get("status")
    if wanted is not None and wanted not in STATUS_ORDER:
        raise ConsoleError(400, f"status {wanted!r} is not one of {', '.join(STATUS_ORDER)}")
    rows = await console.overview.rows()
    return _json([r for r in rows if wanted is None or r.status == wanted])


async def _sessions_events(request: Request) -> Response:
    console = _console(request)
    console.check_read(request)
    return EventStream(functools.partial(list_stream, console.overview, console.list_poll))


async def _session_events(request: Request) -> Response:
    console = _console(request)
    console.check_read(request)
    sid = request.path_params["session"]
    await console.head(sid)
    after = _int(
        request.headers.get("last-event-id") or request.query_params.get("after", "0"), "after"
    )
    return EventStream(
        functools.partial(session_stream, console.journal, console.client, sid, after)
    )


async def _tree(request: Request) -> Response:
    console = _console(request)
    console.check_read(request)
    sid = request.path_params["session"]
    records = await console.records(sid)
    return Response(tree_json(build_tree(sid, records)), media_type="application/json")


async def _states(request: Request) -> Response:
    console = _console(request)
    console.check_read(request)
    sid = request.path_params["session"]
    seq = _int(request.query_params.get("seq"), "seq")
    records = await console.records(sid)
    head = records[-1].seq if records else 0
    if not 1 <= seq <= head:
        raise ConsoleError(400, f"seq {seq} is out of range: session {sid} has seqs 1 to {head}")
    try:
        found = states_at(records, seq)
    except FoldError as exc:
        raise ConsoleError(
            422, f"{exc}; `loopruntime replay {sid} --check` reports every problem"
        ) from exc
    loops = [
        {
            "loop": loop,
            "status": st.status.value,
            "turn": st.turn_index,
            "messages": len(st.messages),
            "last_seq": st.last_seq,
        }
        for loop, st in found.items()
    ]
    return _json({"seq": seq, "head": head, "loops": loops, "text": render_states(found, seq)})


async def _record(request: Request) -> Response:
    console = _console(request)
    console.check_read(request)
    sid = request.path_params["session"]
    seq = _int(request.path_params["seq"], "seq")
    head = await console.head(sid)
    if not 1 <= seq <= head:
        raise ConsoleError(404, f"session {sid} has no record {seq} (its seqs are 1 to {head})")
    async for r in console.journal.read(sid, after=seq - 1):
        return Response(msgspec.json.encode(msgspec.to_builtins(r)), media_type="application/json")
    raise ConsoleError(404, f"session {sid} has no record {seq}")


async def _answer_gate(request: Request) -> Response:
    console = _console(request)
    console.check_write(request)
    sid = request.path_params["session"]
    gate_id = request.path_params["gate"]
    body = await _body(request)
    key = _key(body)
    states = await read_states(console.journal, sid) if await console.head(sid) else {}
    open_gate = next(
        (g for st in states.values() for g in st.open_gates if g.gate_id == gate_id), None
    )
    if open_gate is None:
        if await _sent_before(console, sid, key, gate_id):
            return await _outcome(console, sid, key)
        raise ConsoleError(*await _closed_gate(console, sid, gate_id))
    action = body.get("action")
    who = console.principal
    if open_gate.kind == "permission":
        choices = {
            "allow_once": (True, "once"),
            "allow_session": (True, "session"),
            "deny": (False, "once"),
        }
        if action not in choices:
            raise ConsoleError(
                400,
                f"gate {gate_id} asks for permission: action must be allow_once, "
                f"allow_session or deny, not {action!r}",
            )
        allow, scope = choices[action]
        send = console.client.decide(sid, gate_id, allow, scope, key=key, principal=who)
    elif open_gate.url is not None:
        value = body.get("value")
        if action != "confirm" or not (value is None or isinstance(value, str)):
            raise ConsoleError(
                400,
                f"gate {gate_id} asks to open {open_gate.url} and confirm: send action "
                "'confirm' (with 'value', text, when it asks for one)",
            )
        if open_gate.needs_value and not (value or "").strip():
            raise ConsoleError(
                400,
                f"gate {gate_id} asks for the value the page at {open_gate.url} gave "
                "(a code, an id): put it in 'value'; nothing was sent",
            )
        text = value if value and value.strip() else URL_CONFIRMED
        send = console.client.answer(sid, gate_id, text, key=key, principal=who)
    elif open_gate.form is not None:
        if action != "answer" or ("data" not in body) == ("text" not in body):
            raise ConsoleError(
                400,
                f"gate {gate_id} asks for a form: send action 'answer' with 'data' (the "
                "form's value) or 'text' (its JSON)",
            )
        if "data" in body:
            text = msgspec.json.encode(body["data"]).decode()
        elif isinstance(body["text"], str) and body["text"].strip():
            text = body["text"]
        else:
            raise ConsoleError(400, f"the answer to form gate {gate_id} is empty JSON text")
        send = console.client.answer(sid, gate_id, text, key=key, principal=who)
    else:
        said = body.get("text")
        if action != "answer" or not isinstance(said, str) or not said.strip():
            raise ConsoleError(
                400, f"gate {gate_id} asks a question: send action 'answer' with its text"
            )
        send = console.client.answer(sid, gate_id, said, key=key, principal=who)
    return await _sent(console, sid, key, send)


async def _resolve_effect(request: Request) -> Response:
    console = _console(request)
    console.check_write(request)
    sid = request.path_params["session"]
    execution = request.path_params["execution"]
    body = await _body(request)
    key = _key(body)
    result, is_error = body.get("result"), body.get("is_error", False)
    if not isinstance(result, str) or not result.strip():
        raise ConsoleError(400, "a resolution needs the result the model will see (text)")
    if not isinstance(is_error, bool):
        raise ConsoleError(400, f"is_error must be true or false, not {is_error!r}")
    states = await read_states(console.journal, sid) if await console.head(sid) else {}
    if not any(execution in st.unknown for st in states.values()):
        if await _sent_before(console, sid, key, execution):
            return await _outcome(console, sid, key)
        raise ConsoleError(*await _settled_effect(console, sid, execution))
    send = console.client.resolve(
        sid, execution, result, is_error, key=key, principal=console.principal
    )
    return await _sent(console, sid, key, send)


async def _pausing(request: Request) -> Response:
    """Pause or resume a loop (``action``: ``pause`` or ``resume``), through
    the inbox like every action; both are idempotent, so a retry is harmless."""
    console = _console(request)
    console.check_write(request)
    sid, loop = request.path_params["session"], request.path_params["loop"]
    body = await _body(request)
    key = _key(body)
    action = body.get("action")
    if action not in ("pause", "resume"):
        raise ConsoleError(400, f"action must be 'pause' or 'resume', not {action!r}")
    states = await read_states(console.journal, sid) if await console.head(sid) else {}
    if loop not in states:
        raise ConsoleError(404, f"session {sid} has no loop {loop}")
    send = console.client.pause if action == "pause" else console.client.resume
    return await _sent(
        console, sid, key, send(sid, key=key, loop=loop, principal=console.principal)
    )


def _routes() -> list[Route | Mount]:
    static = StaticFiles(directory=str(files("session.console") / "static"))
    return [
        Route("/", _index),
        Route("/sessions/{session}", _session),
        Route("/api/sessions", _sessions),
        Route("/api/sessions/events", _sessions_events),
        Route("/api/sessions/{session}/events", _session_events),
        Route("/api/sessions/{session}/tree", _tree),
        Route("/api/sessions/{session}/states", _states),
        Route("/api/sessions/{session}/records/{seq}", _record),
        Route("/api/sessions/{session}/gates/{gate}", _answer_gate, methods=["POST"]),
        Route("/api/sessions/{session}/effects/{execution}", _resolve_effect, methods=["POST"]),
        Route("/api/sessions/{session}/loops/{loop}", _pausing, methods=["POST"]),
        Mount("/static", static),
    ]


# -- acting ---------------------------------------------------------------------


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = msgspec.json.decode(await request.body())
    except msgspec.DecodeError as exc:
        raise ConsoleError(400, f"the request body must be a JSON object ({exc})") from None
    if not isinstance(body, dict):
        raise ConsoleError(400, "the request body must be a JSON object")
    return body


def _key(body: dict[str, Any]) -> str:
    """The page's idempotency key for this action (one per form shown, so a
    double click or a retry is the same command), else a fresh one."""
    key = body.get("key")
    if key is None:
        return f"console/{secrets.token_hex(12)}"
    if not isinstance(key, str) or not 0 < len(key) <= 200:
        raise ConsoleError(400, "key must be a string of 1 to 200 characters")
    return key


async def _sent(console: Console, sid: str, key: str, send: Awaitable[object]) -> Response:
    """Put the command, then wait a while for its owner to apply it: 200 with
    the record it made, 409 when refused, 202 when it still waits (the same
    for a retry with the same key)."""
    try:
        await send
    except InboxKeyError as exc:
        raise ConsoleError(409, str(exc)) from exc
    except (LoopError, ValueError) as exc:
        raise ConsoleError(400, str(exc)) from exc
    return await _outcome(console, sid, key)


async def _sent_before(console: Console, sid: str, key: str, target: str) -> bool:
    """Whether ``key`` already names a command for this gate or tool call: a
    retry of an action that was applied meanwhile (the gate is closed now)
    answers that command's outcome, not "already answered"."""
    entry = await console.journal.entry(sid, key)
    if entry is None:
        return False
    command = entry.command
    if isinstance(command, (ib.Answer, ib.Decide)) and command.gate_id == target:
        return True
    if isinstance(command, ib.Resolve) and command.execution_id == target:
        return True
    raise ConsoleError(
        409,
        f"this key was already used for another command (inbox entry {entry.number}); "
        "send a new key",
    )


async def _outcome(console: Console, sid: str, key: str) -> Response:
    """Wait a while for the command sent with ``key`` to be applied."""
    try:
        outcome = await console.client.wait(sid, key, timeout=console.wait)
    except CommandRefusedError as exc:
        raise ConsoleError(409, f"the session refused it: {exc.outcome.message}") from exc
    except TimeoutError:
        return _json(
            {
                "status": "queued",
                "key": key,
                "message": "sent to the session's inbox; no host has applied it yet (a host "
                "running its definition applies it when it takes the session)",
            },
            status=202,
        )
    record = await _effect(console, sid, outcome.record)
    return _json({"status": "applied", "key": key, "record": record})


async def _effect(console: Console, sid: str, record_id: str | None) -> str | None:
    """The record a person wants shown for an applied command: an outcome
    names the command's ``command.keyed`` record, and what the command made
    (a gate's resolution, a tool's) follows it in the same commit.  The
    command was just applied, so the journal's last records are read first,
    not the whole session."""
    if record_id is None:
        return None
    head = await console.head(sid)
    for after in (max(0, head - _RECENT), 0):
        keyed = False
        async for r in console.journal.read(sid, after=after):
            if keyed:
                return r.id
            if r.id == record_id:
                if not isinstance(r.event, CommandKeyed):
                    return r.id
                keyed = True
        if keyed or after == 0:
            break
    return record_id


_RECENT = 64
"""How many of a session's last records ``_effect`` looks through first."""


async def _closed_gate(console: Console, sid: str, gate_id: str) -> tuple[int, str]:
    for r in await console.records(sid):
        e = r.event
        if isinstance(e, GateResolved) and e.gate_id == gate_id:
            how = e.answer if e.kind == "user_input" else ("allowed" if e.allow else "denied")
            return (
                409,
                f"gate {gate_id} was already answered at seq {r.seq} ({how}); nothing was sent",
            )
        if isinstance(e, GateCancelled) and e.gate_id == gate_id:
            return (
                409,
                f"gate {gate_id} was cancelled at seq {r.seq} ({e.reason}); nothing was sent",
            )
    return 404, f"session {sid} has no gate {gate_id}"


async def _settled_effect(console: Console, sid: str, execution: str) -> tuple[int, str]:
    for r in await console.records(sid):
        e = r.event
        if isinstance(e, ToolResolved) and e.execution_id == execution:
            return (
                409,
                f"tool call {execution} was already resolved at seq {r.seq}; nothing was sent",
            )
    return 404, f"session {sid} has no tool call {execution} whose outcome is unknown"


# -- helpers ------------------------------------------------------------------------


def _json(value: object, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status_code=status, media_type="application/json")


def _int(value: str | None, what: str) -> int:
    try:
        return int(value) if value is not None else _missing(what)
    except ValueError:
        raise ConsoleError(400, f"{what} must be a whole number, not {value!r}") from None


def _missing(what: str) -> int:
    raise ConsoleError(400, f"{what} is missing (a whole number)")


def _wants_html(request: Request) -> bool:
    return not request.url.path.startswith("/api/") and "text/html" in request.headers.get(
        "accept", ""
    )


def create_app(
    journal: Journal,
    *,
    token: str,
    read_only: bool = False,
    wait: float = 10.0,
    list_poll: float = 0.5,
    clock: Callable[[], int] = time.time_ns,
    principal: str | None = None,
) -> Starlette:
    """The console over an open ``journal``.  ``token`` guards every request;
    ``wait`` bounds how long an action waits for its outcome before answering
    202 (queued); ``list_poll`` is how often the live session list asks the
    journal for changes; ``clock`` is the journal's (unix ns: leases expire by
    it); ``principal`` is stamped on every command the console sends (who
    answered a gate, resolved a call; recorded, never checked).  The caller
    owns the journal."""
    console = Console(
        journal,
        token=token,
        read_only=read_only,
        wait=wait,
        list_poll=list_poll,
        clock=clock,
        principal=principal,
    )

    def refused(request: Request, status: int, message: str) -> Response:
        if _wants_html(request):
            return HTMLResponse(
                message_page(status, message, console.read_only),
                status_code=status,
                headers=_PAGE_HEADERS,
            )
        return _json({"error": message}, status=status)

    async def console_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ConsoleError)
        return refused(request, exc.status, str(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return refused(request, exc.status_code, str(exc.detail))

    async def journal_error(request: Request, exc: Exception) -> Response:
        log.warning("console_journal_error", path=request.url.path, error=str(exc))
        return refused(request, 503, f"the journal failed: {exc}")

    async def bug(request: Request, exc: Exception) -> Response:
        # The traceback goes to the console's log, never to the page.
        log.exception("console_request_failed", path=request.url.path)
        return refused(
            request, 500, f"the console failed ({type(exc).__name__}); its log has the details"
        )

    app = Starlette(
        routes=_routes(),
        exception_handlers={
            ConsoleError: console_error,
            HTTPException: http_error,
            JournalError: journal_error,
            Exception: bug,
        },
    )
    app.state.console = console
    return app
