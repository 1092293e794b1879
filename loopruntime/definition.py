"""What a loop is: its model, instructions, tools, limits and modes.

A definition is configuration, not state: it is never journaled whole.  The
journal records the definition's *name* (and the mode's name); restore
resolves both by name against the definition the host passes in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .errors import LoopClosedError, ModeNotFoundError
from .model import Model
from .summary import Compactor
from .tools import PermissionPolicy, Tool, ToolContext, tool

__all__ = [
    "Delegate",
    "Delegator",
    "Limits",
    "LoopDefinition",
    "Mode",
    "ResolvedDefinition",
    "find_definition",
]


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Per-turn budgets.  Hitting one ends the turn with outcome ``limit`` (or
    gives the model visible feedback, where that is the better behaviour)."""

    max_model_calls_per_turn: int = 50
    max_tool_iterations: int = 25
    """Tool batches (model replies asking for tools) per turn."""
    max_tool_calls_per_turn: int = 200
    max_parallel_tool_calls: int = 8
    max_tool_result_bytes: int = 100_000
    max_tokens: int = 4096
    """Output token budget of each model call."""
    compact_at: float | None = 0.85
    """Compact between turns once the measured context passes this fraction
    of the model's window (None: never automatically)."""
    retained_exchanges: int = 2
    """Newest complete user-led exchanges kept verbatim after a compaction."""
    max_queued_inputs: int = 64
    """Inputs a loop holds queued behind its running turn; one more is refused
    (``QueueFullError``, and a ``turn.rejected`` record)."""

    def __post_init__(self) -> None:
        queued = self.max_queued_inputs
        if not isinstance(queued, int) or isinstance(queued, bool) or queued < 1:
            raise ValueError(
                f"Limits.max_queued_inputs must be a whole number of at least 1, not {queued!r}"
            )


@dataclass(frozen=True, kw_only=True)
class Mode:
    """A named variant of a definition: another model, instructions, tool
    subset or limits.  Unset fields fall back to the definition's."""

    name: str
    model: Model | None = None
    system: str | None = None
    tools: Sequence[str] | None = None
    limits: Limits | None = None


@dataclass(frozen=True, kw_only=True)
class Delegate:
    """A child loop the model can start, shown to it as a tool."""

    name: str
    description: str
    definition: LoopDefinition
    background: bool = False


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

    def find_tool(self, name: str) -> Tool | None:
        """The tool called ``name`` whatever the mode: a mode only narrows the
        definition's tools, so a call admitted under any mode is found here."""
        return next((t for t in self.resolved(None).tools if t.name == name), None)

    def resolved(self, mode_name: str | None) -> ResolvedDefinition:
        mode = self.mode(mode_name)
        tools = [*self.tools, *(_delegate_tool(d) for d in self.delegates)]
        if mode is not None and mode.tools is not None:
            wanted = set(mode.tools)
            tools = [t for t in tools if t.name in wanted]
        return ResolvedDefinition(
            model=(mode.model if mode and mode.model else self.model),
            system=(mode.system if mode and mode.system is not None else self.system),
            tools=tuple(tools),
            limits=(mode.limits if mode and mode.limits else self.limits),
        )


@dataclass(frozen=True, kw_only=True)
class ResolvedDefinition:
    """A definition with its current mode applied."""

    model: Model
    system: str
    tools: tuple[Tool, ...]
    limits: Limits


class Delegator(Protocol):
    """What a delegate's tool reaches through ``ToolContext.runtime``: the
    loop, which runs the child (``delegation.run_delegate``)."""

    async def delegate(self, delegate: Delegate, task: str, *, execution_id: str) -> str: ...


_delegate_tools: dict[int, tuple[Delegate, Tool]] = {}


def _delegate_tool(delegate: Delegate) -> Tool:
    """The delegate's tool, built once per Delegate (its schema is cached)."""
    cached = _delegate_tools.get(id(delegate))
    if cached is None or cached[0] is not delegate:
        cached = _delegate_tools[id(delegate)] = (delegate, _build_delegate_tool(delegate))
    return cached[1]


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
    )(run)


def find_definition(root: LoopDefinition, name: str) -> LoopDefinition | None:
    """The definition called ``name``: ``root`` or one of its delegates, at any depth."""
    if root.name == name:
        return root
    for delegate in root.delegates:
        found = find_definition(delegate.definition, name)
        if found is not None:
            return found
    return None
