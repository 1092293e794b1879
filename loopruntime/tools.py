"""Tools: ``@tool``, the tool context, input validation and result shaping.

A tool is an async function whose first parameter is a ``ToolContext`` and
whose other parameters are typed keyword parameters (or one msgspec Struct).
``@tool`` builds a msgspec Struct type for its input, so the JSON schema the
model sees and the validation of what the model sends come from one place.

Everything a tool can get wrong (bad input from the model, an exception, a
result that cannot be shown) becomes a model-visible error result, never an
exception that ends the turn.
"""

from __future__ import annotations

import contextvars
import enum
import functools
import inspect
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypeVar, get_type_hints, overload

import msgspec
import structlog

from .deadlines import check_timeout
from .errors import OutsideToolCallError
from .model import ToolSchema
from .ownership import check_owner
from .redaction import (
    InputRedaction,
    ResultRedaction,
    compile_input_redaction,
    compile_result_redaction,
    redaction_text,
)
from .results import ToolOutput, shape_result

__all__ = [
    "Middleware",
    "Form",
    "Permission",
    "PermissionPolicy",
    "Tool",
    "ToolContext",
    "ToolInputError",
    "ToolOutput",
    "ask_user",
    "call_tool",
    "check_async_callable",
    "sequence_of",
    "current_tool_context",
    "shape_result",
    "tool",
]

Concurrency = Literal["exclusive", "parallel"]
Permission = Literal["allow", "ask", "deny"]
PermissionPolicy = Permission | Callable[[str, Mapping[str, Any]], Permission]
"""A fixed answer, or a function of (tool name, input) giving one."""
Middleware = Callable[["ToolContext", Callable[[], Awaitable[Any]]], Awaitable[Any]]
"""``async def mw(ctx, call_next)``: runs around a tool's function inside its
call (after ``tool.started`` is durable) and returns the call's value; it
may call ``call_next()`` once, several times (a retry) or not at all (a
cache)."""

log = structlog.wrap_logger(logging.getLogger(__name__))


class _FromLimits(enum.Enum):
    """The type of ``FROM_LIMITS`` (an enum, so the type checker knows it)."""

    FROM_LIMITS = "from_limits"


FROM_LIMITS = _FromLimits.FROM_LIMITS
"""A tool's timeout when it sets none: ``Limits.tool_timeout`` applies."""


class ToolInputError(Exception):
    """The model's input does not fit the tool's schema (shown to the model)."""


T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Form:
    """What a form question asks for: the msgspec type its answer must fit,
    and that type's JSON Schema (the gate records the schema; the type stays
    in the process, to check answers against)."""

    type: Any
    schema: dict[str, Any]

    @classmethod
    def of(cls, schema_type: Any) -> Form:
        """The form for ``schema_type``; ``TypeError`` when msgspec cannot
        describe it as a JSON Schema or decode JSON into it."""
        try:
            schema = _json_schema(schema_type)
            msgspec.json.Decoder(schema_type)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"ask_form: msgspec cannot describe {schema_type!r} as a form ({exc}); use a "
                "msgspec Struct, a dataclass, a TypedDict or builtin types"
            ) from exc
        return cls(schema_type, schema)

    def parse(self, answer: str) -> Any:
        """The typed value of ``answer`` (JSON); ``msgspec.ValidationError``
        naming the field, or ``msgspec.DecodeError`` for text that is not JSON."""
        return msgspec.json.decode(answer, type=self.type)


def check_url(url: object) -> str:
    """An address a person can open: an absolute http(s) URL.  Anything else
    (another scheme a console would run, such as ``javascript:``, or a
    relative path) is a ``ValueError``; a non-text a ``TypeError``."""
    if not isinstance(url, str):
        raise TypeError(f"ask_open_url: the url must be text, not {type(url).__name__}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc or any(c.isspace() for c in url):
        raise ValueError(
            f"ask_open_url: {url!r} is not an absolute http(s) URL; a person is asked to open "
            "it, so only https:// (or http://) addresses are accepted"
        )
    return url


class ToolContext:
    """What a running tool call can see and do.

    ``continuation`` holds the answer to a question the tool asked before a
    restart (resumable tools only); ``ask_user`` returns it instead of asking
    again (``ask_form`` and ``ask_open_url`` likewise).  The context is only
    valid while its call runs: asking afterwards raises ``OutsideToolCallError``.
    """

    def __init__(
        self,
        *,
        loop: str,
        execution_id: str,
        tool_use_id: str,
        tool_name: str,
        ask: Callable[..., Awaitable[str]],
        continuation: str | None = None,
        runtime: Any = None,
        input: Mapping[str, Any] | None = None,
        report: Callable[[str, float | None], None] | None = None,
    ) -> None:
        self.loop = loop
        self.input: Mapping[str, Any] = MappingProxyType(input if input is not None else {})
        """The call's input as the tool runs with it (read only): what a
        middleware keys a cache on."""
        self.runtime = runtime
        """The loop running this call, for the runtime's own tools (a delegate
        reaches it as a ``definition.Delegator``); ordinary tools have no need
        of it."""
        self.execution_id = execution_id
        """Stable across a re-run after restore: use it as an idempotency key."""
        self.tool_use_id = tool_use_id
        self.tool_name = tool_name
        self.continuation = continuation
        self._ask = ask
        self._report = report
        self._active = True

    async def ask_user(self, question: str, choices: Sequence[str] | None = None) -> str:
        """Ask the person a question and wait for the answer.

        The gate is durable before anyone can answer it; the answer must be one
        of ``choices`` when they are given.
        """
        self._check_active("ask_user")
        if choices is not None and not choices:
            # A gate nobody could ever answer would hold the turn for good.
            raise ValueError(
                f"ask_user in tool call {self.execution_id} ({self.tool_name}) was given no "
                "choices, so no answer could be accepted; pass choices=None for a free answer"
            )
        if self.continuation is not None:
            answer, self.continuation = self.continuation, None
            return answer
        return await self._ask(question, tuple(choices) if choices is not None else None)

    async def ask_form(self, prompt: str, schema_type: type[T]) -> T:
        """Ask the person to fill in a form and wait for it: the answer must
        validate as ``schema_type`` (a msgspec Struct, a dataclass, a TypedDict,
        builtins...), whose JSON Schema the gate records for a console to
        render.  An answer that does not fit is refused with the field named,
        and the gate stays open.  Returns the typed value.

        ``TypeError`` (before any gate opens) when msgspec cannot describe the
        type."""
        self._check_active("ask_form")
        form = Form.of(schema_type)
        if self.continuation is not None:
            answer, self.continuation = self.continuation, None
        else:
            answer = await self._ask(prompt, None, form=form)
        value: T = form.parse(answer)
        return value

    async def ask_open_url(self, prompt: str, url: str, *, value: bool = False) -> str:
        """Ask the person to open ``url`` (a consent page, a payment page) and
        confirm once done; returns what they answered with the confirmation
        (with ``value=True`` an answer is required: a code, an id).  The URL is
        recorded in the gate and never fetched by the runtime.

        ``ValueError`` (before any gate opens) for anything but an absolute
        http(s) URL."""
        self._check_active("ask_open_url")
        check_url(url)
        if self.continuation is not None:
            answer, self.continuation = self.continuation, None
            return answer
        return await self._ask(prompt, None, url=url, needs_value=value)

    def progress(self, message: str, fraction: float | None = None) -> None:
        """Say how far the call got, for people watching (never the model):
        ``fraction`` of the work done, 0 to 1, when the tool can tell.  Returns
        at once; the ``tool.progress`` record follows, coalesced past
        ``Limits.max_progress_per_second`` (``loopruntime.progress``).
        ``ProgressTooLargeError`` past ``Limits.max_progress_bytes``,
        ``ValueError`` for a fraction out of range, ``OutsideToolCallError``
        once the call ended.  From a thread: ``trio.from_thread.run_sync``."""
        if not self._active:
            raise OutsideToolCallError(
                f"progress reported after tool call {self.execution_id} ({self.tool_name}) "
                "finished; a call can only report progress while it runs"
            )
        if self._report is not None:
            self._report(message, fraction)

    def check_owner(self) -> None:
        """Raise ``LeaseLostError`` when the host running this call no longer
        owns its session (its lease ran out before a renewal, or another host
        took it); return at once otherwise.  Cheap (no I/O): call it between
        the steps of long work and right before an effect.  Outside a host it
        does nothing.  From a worker thread, call it through
        ``trio.from_thread.run_sync(ctx.check_owner)``."""
        check_owner()

    def _check_active(self, what: str) -> None:
        if not self._active:
            raise OutsideToolCallError(
                f"{what} called after tool call {self.execution_id} ({self.tool_name}) "
                "finished; questions can only be asked while the call runs"
            )

    def _close(self) -> None:
        self._active = False


_current: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "loopruntime_tool_context", default=None
)


def current_tool_context() -> ToolContext:
    """The context of the tool call running in this task, or a typed error."""
    ctx = _current.get()
    if ctx is None or not ctx._active:
        raise OutsideToolCallError(
            "no tool call is running here; ask_user only works inside a running tool call"
        )
    return ctx


async def ask_user(question: str, choices: Sequence[str] | None = None) -> str:
    """Ask the person a question from inside a running tool call."""
    return await current_tool_context().ask_user(question, choices)


@dataclass(frozen=True, eq=False, kw_only=True)
class Tool:
    """A callable the model can ask for, with its schema and execution options."""

    name: str
    description: str
    input_type: type[msgspec.Struct]
    fn: Callable[..., Awaitable[Any]]
    unpack: bool
    """Call ``fn(ctx, **fields)`` (True) or ``fn(ctx, struct)`` (False)."""
    concurrency: Concurrency = "exclusive"
    write_target: Callable[[Mapping[str, Any]], str | None] | None = None
    permission: PermissionPolicy | None = None
    replay_safe: bool = False
    """Idempotent: restore may re-run a call whose outcome is unknown."""
    resumable: bool = False
    """May be re-entered after restore with the answer to its open question."""
    timeout: float | _FromLimits | None = FROM_LIMITS
    """Seconds a call may run (None: no deadline); unset, the loop's
    ``Limits.tool_timeout`` applies."""
    atomic: bool = False
    """Its effect happens entirely or not at all: a call cancelled at its
    deadline did nothing, so it fails visibly to the model instead of
    leaving an unknown outcome."""
    middleware: tuple[Middleware, ...] = ()
    """Wrappers around this tool's function, the first outermost (inside the
    definition's ``tool_middleware``)."""
    redact_input: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    """The input as the journal, logs and traces see it (``redaction``)."""
    redact_output: Callable[[Any], Any] | None = None
    """The returned value as the journal sees it (``redaction``)."""
    recover_input: Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None] | None = None
    """The host's way back to a redacted call's real input after a restore:
    (execution id, redacted input) -> the input, or None."""
    deferred: bool = False
    """The model sees only its name and first description line until it
    loads it with the built-in ``load_tools`` tool (``loopruntime.deferred``)."""
    redaction: str = ""
    """``redact`` as declared, for the recorded configuration
    (``redaction.redaction_text``); empty: described from ``redact_input``."""
    result_redaction: str = ""
    """``redact_result`` as declared, likewise."""
    direct: bool = False
    """Its result is the turn's answer when a reply calls only direct tools
    (``loopruntime.direct``)."""

    def __post_init__(self) -> None:
        if self.timeout is not FROM_LIMITS:
            check_timeout(f"tool {self.name}: timeout", self.timeout)
        for m in self.middleware:
            check_async_callable(f"tool {self.name}: middleware", m)

    def timeout_under(self, tool_timeout: float | None) -> float | None:
        """This tool's deadline in seconds when the limits say ``tool_timeout``."""
        return tool_timeout if self.timeout is FROM_LIMITS else self.timeout

    @functools.cached_property
    def schema(self) -> ToolSchema:
        """What the model is told about this tool (computed once)."""
        return ToolSchema(
            name=self.name, description=self.description, input_schema=_json_schema(self.input_type)
        )

    def parse(self, raw: Mapping[str, Any]) -> msgspec.Struct:
        try:
            return msgspec.convert(dict(raw), type=self.input_type)
        except msgspec.ValidationError as exc:
            raise ToolInputError(f"invalid input for tool {self.name}: {exc}") from exc

    def target(self, raw: Mapping[str, Any]) -> str | None:
        return self.write_target(raw) if self.write_target is not None else None

    async def invoke(self, ctx: ToolContext, parsed: msgspec.Struct) -> Any:
        token = _current.set(ctx)
        try:
            if self.unpack:
                kwargs = {f: getattr(parsed, f) for f in parsed.__struct_fields__}
                return await self.fn(ctx, **kwargs)
            return await self.fn(ctx, parsed)
        finally:
            ctx._close()
            _current.reset(token)


async def call_tool(
    tool: Tool, ctx: ToolContext, parsed: msgspec.Struct, outer: Sequence[Middleware] = ()
) -> Any:
    """Run one call of ``tool`` through ``outer`` (the definition's
    middleware), then the tool's own, then the tool: the first of each list
    is outermost.  Each ``call_next`` runs the tool afresh with the same
    context (a retry may ask the person again)."""
    chain = (*outer, *tool.middleware)
    if not chain:
        return await tool.invoke(ctx, parsed)

    async def innermost() -> Any:
        ctx._active = True
        return await tool.invoke(ctx, parsed)

    def wrap(mw: Middleware, inner: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        async def step() -> Any:
            return await mw(ctx, inner)

        return step

    run: Callable[[], Awaitable[Any]] = innermost
    for mw in reversed(chain):
        run = wrap(mw, run)
    try:
        return await run()
    finally:
        ctx._close()


def sequence_of(what: str, value: object) -> tuple[Any, ...]:
    """``value`` (a list or tuple) as a tuple; a ``TypeError`` naming
    ``what`` for anything else (one function where a list belongs)."""
    if not isinstance(value, list | tuple):
        raise TypeError(
            f"{what} must be a list, not {type(value).__name__} {value!r}; "
            "wrap a single one in [...]"
        )
    return tuple(value)


def check_async_callable(what: str, value: object) -> None:
    """Raise ``TypeError`` naming ``what`` unless ``value`` is an async
    function (or an object whose ``__call__`` is one)."""
    call: object = value if inspect.isfunction(value) or inspect.ismethod(value) else None
    if call is None and callable(value) and not isinstance(value, type):
        call = type(value).__call__
    if call is None or not inspect.iscoroutinefunction(call):
        raise TypeError(
            f"{what} must be an async function (async def), not {type(value).__name__} {value!r}"
        )


def decide(policy: PermissionPolicy | None, name: str, raw: Mapping[str, Any]) -> Permission:
    """Apply a permission policy; no policy denies (fail closed)."""
    if policy is None:
        return "deny"
    if callable(policy):
        try:
            answer = policy(name, raw)
        except Exception as exc:
            # The policy is the host's code: its bug must deny the call, not
            # end the session with the call left unanswered.
            log.warning("permission_policy_failed", tool=name, error=repr(exc))
            return "deny"
        return answer if answer in ("allow", "ask", "deny") else "deny"
    return policy


def _json_schema(t: Any) -> dict[str, Any]:
    """The input schema, inlined at the top (models want an object schema,
    not a ``$ref``); nested types stay in ``$defs``."""
    schema = msgspec.json.schema(t)
    defs: dict[str, Any] = dict(schema.get("$defs", {}))
    ref = schema.get("$ref", "")
    top = defs.pop(ref.rsplit("/", 1)[-1], schema) if ref else schema
    top = {k: v for k, v in top.items() if k != "title"}
    if defs:
        top["$defs"] = defs
    return top


def _input_type(fn: Callable[..., Any], name: str) -> tuple[type[msgspec.Struct], bool]:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise TypeError(f"tool {name}: the first parameter must be the ToolContext")
    hints = get_type_hints(fn)
    rest = params[1:]
    if len(rest) == 1 and rest[0].kind is not inspect.Parameter.KEYWORD_ONLY:
        hinted = hints.get(rest[0].name)
        if isinstance(hinted, type) and issubclass(hinted, msgspec.Struct):
            return hinted, False
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for p in rest:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"tool {name}: *args/**kwargs cannot be described to a model")
        annotation = hints.get(p.name, Any)
        if p.default is inspect.Parameter.empty:
            fields.append((p.name, annotation))
        else:
            fields.append((p.name, annotation, p.default))
    struct = msgspec.defstruct(
        _camel(name) + "Input", fields, kw_only=True, forbid_unknown_fields=True
    )
    return struct, True


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_")) or "Tool"


@overload
def tool(fn: Callable[..., Awaitable[Any]], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency: Concurrency = "exclusive",
    write_target: Callable[[Mapping[str, Any]], str | None] | None = None,
    permission: PermissionPolicy | None = None,
    replay_safe: bool = False,
    resumable: bool = False,
    timeout: float | _FromLimits | None = FROM_LIMITS,
    atomic: bool = False,
    middleware: Sequence[Middleware] = (),
    redact: InputRedaction | None = None,
    redact_result: ResultRedaction | None = None,
    recover_input: Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None] | None = None,
    deferred: bool = False,
    direct: bool = False,
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]: ...


def tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    concurrency: Concurrency = "exclusive",
    write_target: Callable[[Mapping[str, Any]], str | None] | None = None,
    permission: PermissionPolicy | None = None,
    replay_safe: bool = False,
    resumable: bool = False,
    timeout: float | _FromLimits | None = FROM_LIMITS,
    atomic: bool = False,
    middleware: Sequence[Middleware] = (),
    redact: InputRedaction | None = None,
    redact_result: ResultRedaction | None = None,
    recover_input: Callable[[str, Mapping[str, Any]], Mapping[str, Any] | None] | None = None,
    deferred: bool = False,
    direct: bool = False,
) -> Tool | Callable[[Callable[..., Awaitable[Any]]], Tool]:
    """Make an async function a tool; bare (``@tool``) or with options.

    The docstring is the description the model reads.  Without a
    ``permission`` here or in the definition's ``permissions``, the tool is
    denied when called (fail closed).  ``timeout`` (seconds, None for no
    deadline) overrides ``Limits.tool_timeout`` for this tool; ``atomic``
    declares that a call cancelled at its deadline did nothing;
    ``middleware`` wraps the function inside each call (``call_tool``).

    ``redact`` (input field names, or a function of the input) and
    ``redact_result`` (field names of the returned value, or a function of
    it) keep secrets out of the journal, logs and traces; ``recover_input``
    gives a replay-safe call its real input back after a restore (see
    ``docs/tools.md``, "Redaction").  A field the input does not have is a
    ``ValueError`` here.  ``deferred`` keeps its schema out of the model's
    requests until the model loads it (``load_tools``).  ``direct`` makes
    its result the turn's answer when a reply calls only direct tools
    (``loopruntime.direct``).
    """

    def build(f: Callable[..., Awaitable[Any]]) -> Tool:
        if not inspect.iscoroutinefunction(f):
            raise TypeError(f"tool {f.__name__}: must be an async function")
        tool_name = name or f.__name__
        input_type, unpack = _input_type(f, tool_name)
        if recover_input is not None and not callable(recover_input):
            raise TypeError(f"tool {tool_name}: recover_input must be a function")
        return Tool(
            name=tool_name,
            description=description or inspect.cleandoc(f.__doc__ or tool_name),
            input_type=input_type,
            fn=f,
            unpack=unpack,
            concurrency=concurrency,
            write_target=write_target,
            permission=permission,
            replay_safe=replay_safe,
            resumable=resumable,
            timeout=timeout,
            atomic=atomic,
            middleware=sequence_of(f"tool {tool_name}: middleware", middleware),
            redact_input=compile_input_redaction(tool_name, input_type.__struct_fields__, redact),
            redact_output=_result_redaction(tool_name, redact_result),
            recover_input=recover_input,
            deferred=deferred,
            redaction=redaction_text(redact),
            result_redaction=redaction_text(redact_result),
            direct=direct,
        )

    return build(fn) if fn is not None else build


def _result_redaction(name: str, redact_result: ResultRedaction | None) -> Any:
    """``redaction.compile_result_redaction``, with field names applied inside a
    ``ToolOutput`` too (a function is given the value as the tool returned it)."""
    fn = compile_result_redaction(name, redact_result)
    if fn is None or callable(redact_result):
        return fn

    def by_names(value: Any) -> Any:
        if isinstance(value, ToolOutput):
            return ToolOutput(content=fn(value.content), structured=fn(value.structured))
        return fn(value)

    return by_names


def ask_user_tool() -> Tool:
    """The built-in tool a model uses to ask the person a question."""

    async def ask_user(ctx: ToolContext, *, question: str, choices: list[str] | None = None) -> str:
        """Ask the user a question and wait for their answer. Give `choices` when
        the answer must be one of a few options."""
        # A model that sends an empty list means "no options", not "no answer".
        return await ctx.ask_user(question, choices or None)

    return tool(permission="allow", resumable=True)(ask_user)
