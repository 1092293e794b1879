"""What a loop is: its model, instructions, tools, limits and modes.

A definition is configuration, not state: it is never journaled whole.  The
journal records the definition's *name*, the mode's name, what the loop runs
under (``loop.configured``: names, digests, flags, limits) and the models
and tools chosen by command, by name; restore resolves each name against the
definition the host passes in (its registries: ``models``, ``tool_registry``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .capabilities import attenuated
from .classifiers import Classifier, PermissionRequest, as_classifier
from .deferred import LOAD_TOOLS, load_tools_tool
from .errors import (
    DefinitionError,
    LoopClosedError,
    ModeNotFoundError,
    NameClashError,
    NotRegisteredError,
)
from .hooks import Hook
from .limits import Limits as Limits
from .model import Model
from .output import FINAL_ANSWER, OutputSpec, output_spec
from .summary import Compactor
from .tools import (
    Middleware,
    PermissionPolicy,
    Tool,
    ToolContext,
    check_async_callable,
    sequence_of,
    tool,
)
from .toolsets import McpServer, check_toolsets

__all__ = [
    "INHERIT",
    "Delegate",
    "Delegator",
    "Limits",
    "LoopDefinition",
    "Mode",
    "ResolvedDefinition",
    "find_definition",
]


class _Inherit(enum.Enum):
    INHERIT = "inherit"


INHERIT = _Inherit.INHERIT
"""A mode's ``output`` when it keeps the definition's."""


@dataclass(frozen=True, kw_only=True)
class Mode:
    """A named variant of a definition: another model, instructions, tool
    subset, limits or output type.  Unset fields fall back to the
    definition's; ``output=None`` makes the mode answer in text."""

    name: str
    model: Model | None = None
    system: str | None = None
    tools: Sequence[str] | None = None
    limits: Limits | None = None
    output: Any = INHERIT

    def __post_init__(self) -> None:
        if self.output is not INHERIT and self.output is not None:
            output_spec(self.output, f"mode {self.name!r}")


@dataclass(frozen=True, kw_only=True)
class Delegate:
    """A child loop the model can start, shown to it as a tool.  It fixes what
    the child runs under (the model only gives the task); checked when made
    (``DefinitionError`` naming delegate, definition and rule)."""

    name: str
    description: str
    definition: LoopDefinition
    background: bool = False
    mode: str | None = None
    """The mode of ``definition`` the child starts in, named on its
    ``loop.started`` (no mode change is recorded); None: the definition's own."""
    tools: Sequence[str] | None = None
    """The only tools the child has (names of ``definition``'s tools, registry
    tools, delegates or MCP servers); None: all of them."""
    permissions: Mapping[str, PermissionPolicy] | None = None
    """Policies for the child's tools, applied together with the definition's,
    never wider (``loopruntime.capabilities``)."""
    child: LoopDefinition = field(init=False, repr=False, compare=False)
    """What the child runs: ``definition``, or its narrowed copy ``name[delegate]``."""

    _tool: Tool | None = field(default=None, init=False, repr=False, compare=False)
    """Its tool, built on first use (``_delegate_tool``) and freed with it."""

    def __post_init__(self) -> None:
        where = f"delegate {self.name!r} of definition {self.definition.name!r}"
        if self.mode is not None and self.mode not in {m.name for m in self.definition.modes}:
            known = ", ".join(m.name for m in self.definition.modes) or "none"
            raise DefinitionError(
                f"{where} starts its child in mode {self.mode!r}, which the definition does "
                f"not have (modes: {known}); name one of its modes or leave mode=None",
                definition=self.definition.name,
                name=self.mode,
                rule="delegate_mode_unknown",
            )
        object.__setattr__(self, "child", attenuated(self, where))


@dataclass(frozen=True, kw_only=True)
class LoopDefinition:
    name: str
    model: Model
    system: str = ""
    tools: Sequence[Tool] = ()
    permissions: Mapping[str, PermissionPolicy] = field(default_factory=dict)
    """Per-tool policy, overriding the tool's own.  A tool with neither is
    denied: the runtime fails closed."""
    limits: Limits = field(default_factory=Limits)
    modes: Sequence[Mode] = ()
    delegates: Sequence[Delegate] = ()
    compactor: Compactor | None = None
    toolsets: Sequence[McpServer] = ()
    """Servers whose tools the loop offers besides ``tools``, listed when a
    loop starts (``loopruntime.toolsets``)."""
    output: Any = None
    """The type of each turn's answer (a msgspec Struct, or any type msgspec
    can validate); None: the answer is text.  ``loopruntime.output``."""

    models: Sequence[Model] = ()
    """Alternative models ``Session.change_inference(model=NAME)`` may choose,
    found by their ``name`` (the definition's own model and its modes' models
    are registered too).  Restore re-applies a choice by name, so a model the
    journal names must stay registered in the next deploy."""
    tool_registry: Sequence[Tool] = ()
    """Tools ``Session.replace_tools`` may offer besides ``tools`` (found by
    name), and that restore finds again for calls made under them."""
    deferred_tools: Collection[str] = ()
    """Names of tools (in ``tools`` or ``tool_registry``) the model sees by
    name only until it loads them, as if made with ``@tool(deferred=True)``
    (``loopruntime.deferred``)."""

    hooks: Sequence[Hook] = ()
    """Async functions at named points of every turn, made with ``@hook(point)``
    (``loopruntime.hooks``): in every mode, in this order."""
    tool_middleware: Sequence[Middleware] = ()
    """Wrappers around every tool call's function (the final-answer tool's
    excepted), outside each tool's own; the first is outermost."""
    classifiers: Sequence[Classifier | Callable[[PermissionRequest], Any]] = ()
    """Reviewers of a call the permission policy would ask a person about
    (``loopruntime.classifiers``), in this order."""

    _resolutions: dict[tuple[str | None, str | None, int | None], ResolvedDefinition] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """What ``resolved`` gave for a choice without server tools or a tool
    choice: a definition is frozen, so it is the same every time, and the
    sessions of a host resolve it once instead of at every start and turn."""

    def __post_init__(self) -> None:
        self._check_hooks()
        self._check_names_unique()
        names = [t.name for t in self.tools] + [d.name for d in self.delegates]
        registered = [t.name for t in self.tool_registry]
        check_toolsets(self.name, self.toolsets, [*names, *registered])
        self._check_deferred(names)
        outputs = [self.output, *(m.output for m in self.modes)]
        if self.output is not None:
            output_spec(self.output, f"loop definition {self.name!r}")
        if any(o is not None and o is not INHERIT for o in outputs) and FINAL_ANSWER in names:
            raise ValueError(
                f"loop definition {self.name!r} has a tool named {FINAL_ANSWER!r}, the name of "
                "the runtime's final-answer tool for typed outputs; rename the tool"
            )
        names = [m.name for m in self.models]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"loop definition {self.name!r} registers more than one model named "
                f"{', '.join(map(repr, twice))} in models=; a choice is made by name, so "
                "each name must be one model"
            )

    def _check_names_unique(self) -> None:
        """Every name the model may be offered (a tool, deferred or not, a
        delegate, a registry tool ``replace_tools`` may offer) is one thing."""
        seen: dict[str, str] = {}
        offered = [
            *((t.name, "deferred tool" if self.is_deferred(t) else "tool") for t in self.tools),
            *((d.name, "delegate") for d in self.delegates),
            # A registry tool may also be one of ``tools`` (the same object).
            *(
                (t.name, "registry tool")
                for t in self.tool_registry
                if not any(t is u for u in self.tools)
            ),
        ]
        for name, what in offered:
            if name in seen:
                raise NameClashError(
                    f"loop definition {self.name!r} has a {seen[name]} and a {what} both named "
                    f"{name!r}; the model would be offered two tools called {name!r} and could "
                    "not tell them apart: rename one",
                    definition=self.name,
                    name=name,
                )
            seen[name] = what

    def _check_hooks(self) -> None:
        """Hooks, middleware and classifiers, refused when they cannot run."""
        where = f"loop definition {self.name!r}"
        hooks = sequence_of(f"{where}: hooks", self.hooks)
        for h in hooks:
            if not isinstance(h, Hook):
                raise TypeError(
                    f"{where}: hooks takes hooks made with @hook(point), e.g. "
                    f'@hook("before_tool") on an async function; got {type(h).__name__} {h!r}'
                )
        names = [h.name for h in hooks]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"{where} has more than one hook named {', '.join(map(repr, twice))}; records "
                "name the hook that decided, so give each its own name (@hook(point, name=...))"
            )
        for m in sequence_of(f"{where}: tool_middleware", self.tool_middleware):
            check_async_callable(f"{where}: tool_middleware", m)
        reviewers = [
            as_classifier(c) for c in sequence_of(f"{where}: classifiers", self.classifiers)
        ]
        names = [c.name for c in reviewers]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"{where} has more than one classifier named {', '.join(map(repr, twice))}; "
                "records name the classifier, so give each its own name (classifier(name=...))"
            )

    def _check_deferred(self, names: list[str]) -> None:
        if isinstance(self.deferred_tools, str) or not isinstance(self.deferred_tools, Collection):
            raise TypeError(
                f"loop definition {self.name!r}: deferred_tools takes a collection of tool "
                f"names, not {self.deferred_tools!r}"
            )
        known = {*names, *(t.name for t in self.tool_registry)}
        for name in self.deferred_tools:
            if name not in known:
                raise ValueError(
                    f"loop definition {self.name!r} names {name!r} in deferred_tools, but has "
                    f"no such tool (tools: {', '.join(sorted(known)) or 'none'}); defer a tool "
                    "of tools= or tool_registry=, or an MCP server's with McpServer(deferred=True)"
                )
        deferring = (
            bool(self.deferred_tools)
            or any(t.deferred for t in (*self.tools, *self.tool_registry))
            or any(s.deferred for s in self.toolsets)
        )
        if deferring and LOAD_TOOLS in known:
            raise ValueError(
                f"loop definition {self.name!r} has a tool named {LOAD_TOOLS!r}, the name of "
                "the runtime's tool that loads deferred tools; rename the tool"
            )

    def is_deferred(self, tool: Tool) -> bool:
        """Whether the model sees ``tool`` by name only until it loads it."""
        return tool.deferred or tool.name in self.deferred_tools

    def mode(self, name: str | None) -> Mode | None:
        """The mode called ``name`` (None: the definition itself)."""
        if name is None:
            return None
        for m in self.modes:
            if m.name == name:
                return m
        known = ", ".join(m.name for m in self.modes) or "none"
        raise ModeNotFoundError(
            f"loop definition {self.name!r} has no mode {name!r} (modes: {known})"
        )

    def all_tools(self, listed: Sequence[Tool] = ()) -> tuple[Tool, ...]:
        """Every tool reachable by name: the definition's, the ones its
        toolsets listed (``listed``), its delegates' and its registry's, in
        that order."""
        tools = [*self.tools, *listed, *(_delegate_tool(d) for d in self.delegates)]
        names = {t.name for t in tools}
        return (*tools, *(t for t in self.tool_registry if t.name not in names))

    def find_tool(self, name: str, listed: Sequence[Tool] = ()) -> Tool | None:
        """The tool called ``name`` whatever the mode or tool choice: a call
        admitted under any of them is found here.  ``listed``: the tools the
        loop's toolsets listed; before they are known (restore), a server's
        tool is what its configuration says."""
        found = next((t for t in self.all_tools(listed) if t.name == name), None)
        if found is None and name == FINAL_ANSWER:
            found = next(
                (
                    spec.tool
                    for o in (self.output, *(m.output for m in self.modes))
                    if o is not None and o is not INHERIT
                    for spec in (output_spec(o, self.name),)
                ),
                None,
            )
        if found is None:
            found = next((p for s in self.toolsets if (p := s.placeholder(name)) is not None), None)
        if found is None and name == LOAD_TOOLS:
            # A load re-run after a restore, whatever tools are offered now.
            deferred = [t for t in self.all_tools(listed) if self.is_deferred(t)]
            found = load_tools_tool(deferred) if deferred else None
        return found

    def find_model(self, name: str) -> Model | None:
        """The registered model called ``name``: in ``models``, the
        definition's own, or a mode's."""
        for m in (*self.models, self.model, *(m.model for m in self.modes if m.model)):
            if m is not None and m.name == name:
                return m
        return None

    def registered_model(self, name: str) -> Model:
        """``find_model``, or ``NotRegisteredError`` saying what to do."""
        found = self.find_model(name)
        if found is None:
            raise NotRegisteredError(
                f"loop definition {self.name!r} has no model named {name!r} (registered: "
                f"{', '.join(sorted(self.model_names()))}); add it to LoopDefinition(models=[...])"
            )
        return found

    def registered_tool(self, name: str) -> Tool:
        """``find_tool``, or ``NotRegisteredError`` saying what to do."""
        found = self.find_tool(name)
        if found is None:
            known = ", ".join(t.name for t in self.all_tools()) or "none"
            raise NotRegisteredError(
                f"loop definition {self.name!r} has no tool named {name!r} (registered: "
                f"{known}); add it to LoopDefinition(tool_registry=[...])"
            )
        return found

    def model_names(self) -> set[str]:
        return {m.name for m in (*self.models, self.model, *(m.model for m in self.modes)) if m}

    def limits_under(self, mode_name: str | None) -> Limits:
        """The limits under mode ``mode_name`` (a loop's chosen ``max_tokens``
        aside): what ``resolved`` gives, without resolving the tools."""
        mode = self.mode(mode_name)
        return mode.limits if mode and mode.limits else self.limits

    def resolved(
        self,
        mode_name: str | None,
        listed: Sequence[Tool] = (),
        *,
        model: str | None = None,
        max_tokens: int | None = None,
        tools: Sequence[str] | None = None,
    ) -> ResolvedDefinition:
        """The definition under mode ``mode_name``, with the tools its toolsets
        listed (``listed``) and the choices a loop made by command: ``model``
        (a registered model's name; when no model of that name is registered
        the mode's or the definition's applies), ``max_tokens`` and ``tools``
        (names; delegates are always offered).  Shared: the answer for a
        choice without ``listed`` or ``tools`` is made once per definition."""
        if listed or tools is not None:
            return self._resolve(mode_name, listed, model, max_tokens, tools)
        key = (mode_name, model, max_tokens)
        kept: ResolvedDefinition | None = self._resolutions.get(key)
        if kept is None:
            kept = self._resolve(mode_name, listed, model, max_tokens, tools)
            if len(self._resolutions) < RESOLUTIONS_KEPT:
                self._resolutions[key] = kept
        return kept

    def _resolve(
        self,
        mode_name: str | None,
        listed: Sequence[Tool],
        model: str | None,
        max_tokens: int | None,
        tools: Sequence[str] | None,
    ) -> ResolvedDefinition:
        mode = self.mode(mode_name)
        delegated = [_delegate_tool(d) for d in self.delegates]
        if tools is None:
            offered = [*self.tools, *listed, *delegated]
        else:
            picked = [t for n in tools if (t := self.find_tool(n, listed)) is not None]
            names = {t.name for t in picked}
            offered = [*picked, *(t for t in delegated if t.name not in names)]
        if mode is not None and mode.tools is not None:
            wanted = set(mode.tools)
            offered = [t for t in offered if t.name in wanted]
        output = self.output if mode is None or mode.output is INHERIT else mode.output
        spec = output_spec(output, self.name) if output is not None else None
        if spec is not None:
            offered.append(spec.tool)
        deferred = [t for t in offered if self.is_deferred(t)]
        if deferred:
            offered.append(load_tools_tool(deferred))
        chosen = mode.model if mode and mode.model else self.model
        if model is not None and chosen.name != model:
            chosen = self.find_model(model) or chosen
        limits = self.limits_under(mode_name)
        if max_tokens is not None and max_tokens != limits.max_tokens:
            limits = replace(limits, max_tokens=max_tokens)
        return ResolvedDefinition(
            model=chosen,
            system=(mode.system if mode and mode.system is not None else self.system),
            tools=tuple(offered),
            limits=limits,
            output=spec,
            deferred=frozenset(t.name for t in deferred),
        )


RESOLUTIONS_KEPT = 64
"""Resolutions a definition keeps (mode, model and output budget chosen by
command): a process choosing many budgets resolves the others each time."""


@dataclass(frozen=True, kw_only=True)
class ResolvedDefinition:
    """A definition with its current mode applied."""

    model: Model
    system: str
    tools: tuple[Tool, ...]
    limits: Limits
    output: OutputSpec | None = None
    """The typed answer each turn must give (None: text)."""
    deferred: frozenset[str] = frozenset()
    """Offered tools the model sees by name only until it loads them."""


class Delegator(Protocol):
    """What a delegate's tool reaches through ``ToolContext.runtime``: the
    loop, which runs the child (``delegation.run_delegate``)."""

    async def delegate(self, delegate: Delegate, task: str, *, execution_id: str) -> str: ...


def _delegate_tool(delegate: Delegate) -> Tool:
    """The delegate's tool, built once per Delegate (its schema is cached) and
    kept on it, so it lives as long as the delegate and no longer."""
    tool = delegate._tool
    if tool is None:
        tool = _build_delegate_tool(delegate)
        object.__setattr__(delegate, "_tool", tool)  # a cache, not a field of its value
    return tool


def _build_delegate_tool(delegate: Delegate) -> Tool:
    """The tool through which the model starts ``delegate``'s child loop."""

    async def run(ctx: ToolContext, *, task: str) -> str:
        runtime: Delegator | None = ctx.runtime
        if runtime is None:
            raise LoopClosedError("delegation needs a running loop")
        return await runtime.delegate(delegate, task, execution_id=ctx.execution_id)

    run.__name__ = delegate.name
    return tool(
        name=delegate.name,
        description=delegate.description,
        permission="allow",
        concurrency="parallel",
        # Re-entered after restore: it re-attaches to its child (delegation).
        replay_safe=True,
        # The child loop runs under deadlines of its own (its turns, model
        # and tool calls); cutting the parent's wait would leave it running.
        timeout=None,
    )(run)


def find_definition(root: LoopDefinition, name: str) -> LoopDefinition | None:
    """The definition called ``name``: ``root`` or one of its delegates', at any
    depth: the narrowed child's, then (recorded before it narrowed) its own."""
    if root.name == name:
        return root
    for d in root.delegates:
        found = find_definition(d.child, name)
        if found is None and d.child is not d.definition:
            found = find_definition(d.definition, name)
        if found is not None:
            return found
    return None
