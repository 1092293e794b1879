"""Attenuated authority: what a delegate's child may do, narrowed from its
definition (``Delegate(tools=..., permissions=...)``).

Rules: a delegate only narrows.  Its tools are a subset of the definition's
(tools, registry tools, delegates, MCP servers by name); a fixed permission
wider than the definition's fixed one is refused when the delegate is made
(``DefinitionError``, rule ``capabilities_widened``); a permission function
is combined with the definition's policy, the stricter answer winning, so it
cannot widen either.  The narrowed definition carries a name of its own
(``definition[delegate]``): the child's records name it, and a restore that
resolves the name finds the same narrowed child.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .errors import DefinitionError
from .tools import PermissionPolicy, decide

__all__ = ["attenuated"]

_RANK = {"deny": 0, "ask": 1, "allow": 2}
"""How much a fixed permission grants; no policy at all denies."""


def attenuated(delegate: Any, where: str) -> Any:
    """``delegate.definition`` narrowed by the ``Delegate``'s ``tools`` and
    ``permissions`` (itself when it narrows nothing).  Typed loosely: the
    definition module, which holds both types, imports this one."""
    base = delegate.definition
    if delegate.tools is None and not delegate.permissions:
        return base
    reachable = {t.name: t for t in base.all_tools()}
    servers = {s.name: s for s in base.toolsets}

    def widened(name: str, why: str) -> DefinitionError:
        return DefinitionError(
            f"{where} {why}; a delegate may only narrow its child's authority, never "
            "widen it beyond the definition",
            definition=base.name,
            name=name,
            rule="capabilities_widened",
        )

    kept: set[str] = set(reachable) | set(servers)
    if delegate.tools is not None:
        if isinstance(delegate.tools, str):
            raise TypeError(f"{where}: tools takes a list of tool names, not a str")
        for name in delegate.tools:
            if name not in kept:
                known = ", ".join(sorted(kept)) or "none"
                raise widened(
                    name,
                    f"gives its child the tool {name!r}, which the definition "
                    f"does not have (it has: {known})",
                )
        kept = set(delegate.tools)
    policies = dict(base.permissions)
    for name, policy in (delegate.permissions or {}).items():
        found = reachable.get(name)
        server = next((s for s in base.toolsets if s.remote_name(name) is not None), None)
        if found is None and server is None:
            raise widened(
                name, f"sets a permission for {name!r}, which the definition has no tool of"
            )
        if name not in kept and (found is not None or server is None or server.name not in kept):
            raise widened(name, f"sets a permission for {name!r}, a tool its tools= leaves out")
        own = base.permissions.get(
            name, found.permission if found is not None else server.permission if server else None
        )
        if not callable(policy) and policy not in _RANK:
            raise TypeError(
                f"{where}: the permission for {name!r} must be 'allow', 'ask', "
                f"'deny' or a function, not {policy!r}"
            )
        if callable(own) or callable(policy):
            policies[name] = _Stricter(own, policy)
            continue
        if _RANK[policy] > (_RANK[own] if own is not None else 0):
            raise widened(
                name,
                f"sets {policy!r} for {name!r}, where the definition says "
                f"{own or 'nothing (denied)'!r}",
            )
        policies[name] = policy
    return replace(
        base,
        name=f"{base.name}[{delegate.name}]",
        tools=[t for t in base.tools if t.name in kept],
        tool_registry=[t for t in base.tool_registry if t.name in kept],
        delegates=[d for d in base.delegates if d.name in kept],
        toolsets=[s for s in base.toolsets if s.name in kept],
        deferred_tools=[n for n in base.deferred_tools if n in kept],
        permissions={n: p for n, p in policies.items() if n in kept or _served(base, n, kept)},
    )


def _served(base: Any, name: str, kept: set[str]) -> bool:
    return any(s.name in kept and s.remote_name(name) is not None for s in base.toolsets)


@dataclass(frozen=True)
class _Stricter:
    """Two policies applied together: the answer that grants less wins."""

    first: PermissionPolicy | None
    second: PermissionPolicy

    def __call__(self, name: str, raw: Mapping[str, Any]) -> Any:
        a, b = decide(self.first, name, raw), decide(self.second, name, raw)
        return a if _RANK[a] <= _RANK[b] else b
