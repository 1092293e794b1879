"""What a loop runs under, as the journal records it (pure).

``describe`` turns a definition into the ``LoopConfig`` a ``loop.configured``
record carries: names, digests, flags and limits, never code.  ``changes``
compares two of them field by field, so a restore can say what a deploy
changed (``loop.reconfigured``) or refuse it.  docs/restore.md ("Deploys")
says what each change does.

The tools an MCP server lists are part of the configuration, but only a
connected server can tell them: a loop records them when it starts, and a
restore, which decides before any server is connected, carries the recorded
ones over (``restore_config``) until the loop lists them again
(``relisted_config``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import weakref
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec

from journal.events import ConfigChange, LoopConfig, ModeConfig, ToolConfig

from .classifiers import as_classifier
from .definition import Limits, LoopDefinition
from .model import Model
from .redaction import qualified_name
from .tools import PermissionPolicy, Tool

__all__ = [
    "change_text",
    "changes",
    "describe",
    "describe_shared",
    "digest",
    "prompts_of",
    "relisted_config",
    "restore_config",
    "server_of",
]


def digest(text: str) -> str:
    """A short, stable digest of a text (a system prompt, a schema)."""
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def prompts_of(definition: LoopDefinition) -> dict[str, str]:
    """Digest -> text of every system prompt the definition may run under.

    Made once per definition object (a definition is frozen) and shared by
    every loop of it: read it, never change it.  Kept because hashing the
    prompts at every loop's start costs in proportion to their length, and a
    long prompt is hashed for every session."""
    kept = _prompt_sets.get(id(definition))
    if kept is not None and kept[0]() is definition:
        return kept[1]
    texts = [definition.system, *(m.system for m in definition.modes if m.system is not None)]
    prompts = {digest(t): t for t in texts}
    _keep(_prompt_sets, definition, prompts)
    return prompts


def describe(definition: LoopDefinition, listed: Sequence[Tool] = ()) -> LoopConfig:
    """The configuration of ``definition``, with the tools its servers listed
    (``listed``): equal for equal definitions and listings, so a restore with
    an unchanged one records nothing."""
    offered = {t.name for t in definition.resolved(None, listed).tools}
    return LoopConfig(
        model=definition.model.name,
        model_settings=_settings(definition.model),
        system=digest(definition.system),
        tools=tuple(
            _tool(
                t,
                definition.permissions.get(t.name, t.permission),
                t.name in offered,
                deferred=definition.is_deferred(t),
            )
            for t in definition.all_tools(listed)
        ),
        models=tuple(sorted({m.name for m in definition.models})),
        modes=tuple(
            ModeConfig(
                name=m.name,
                model=m.model.name if m.model else None,
                system=digest(m.system) if m.system is not None else None,
                tools=tuple(m.tools) if m.tools is not None else None,
                limits=_limits(m.limits) if m.limits else None,
            )
            for m in definition.modes
        ),
        limits=_limits(definition.limits),
        hooks=tuple(f"{h.point}:{h.name}" for h in definition.hooks),
        classifiers=tuple(as_classifier(c).name for c in definition.classifiers),
        tool_middleware=tuple(qualified_name(m) for m in definition.tool_middleware),
    )


_configs: dict[int, tuple[weakref.ref[LoopDefinition], LoopConfig]] = {}
_prompt_sets: dict[int, tuple[weakref.ref[LoopDefinition], dict[str, str]]] = {}


def _keep(
    table: dict[int, tuple[weakref.ref[LoopDefinition], Any]],
    definition: LoopDefinition,
    value: Any,
) -> None:
    """Keep ``value`` in ``table`` for as long as ``definition`` lives (by id:
    a definition holding lists is not hashable)."""
    key = id(definition)

    def forget(_: object) -> None:
        if (entry := table.get(key)) is not None and entry[0]() is None:
            del table[key]

    table[key] = (weakref.ref(definition, forget), value)


def describe_shared(definition: LoopDefinition, listed: Sequence[Tool]) -> LoopConfig:
    """``describe(definition, listed)``, made once per definition object when
    its loops list no server tools (a definition is frozen): every session of
    a host shares one immutable configuration instead of building and
    holding its own."""
    if listed:
        return describe(definition, listed)
    key = id(definition)
    kept = _configs.get(key)
    if kept is not None and kept[0]() is definition:
        return kept[1]
    config = describe(definition)
    _keep(_configs, definition, config)
    return config


def server_of(definition: LoopDefinition, name: str) -> str | None:
    """The name of the definition's MCP server whose tool ``name`` is (by its
    prefix), or None for a tool of the definition's own."""
    return next((s.name for s in definition.toolsets if s.remote_name(name) is not None), None)


def restore_config(recorded: LoopConfig, definition: LoopDefinition) -> LoopConfig:
    """``describe(definition)`` as a restore can know it, before any server is
    connected: each of the definition's servers with the tools the journal
    last recorded for it (a server the definition dropped has none)."""
    now = describe_shared(definition, ())
    carried = tuple(t for t in recorded.tools if server_of(definition, t.name) is not None)
    return msgspec.structs.replace(now, tools=(*now.tools, *carried))


def relisted_config(
    recorded: LoopConfig,
    definition: LoopDefinition,
    listed: Sequence[Tool],
    answered: Collection[str],
) -> LoopConfig:
    """``recorded`` with the tools of each server that answered the listing
    (``answered``, by server name) as it listed them now (``listed``).  A
    server that could not be reached says nothing about its tools: the
    recorded ones stay."""
    now = describe(definition, listed)

    def relisting(name: str) -> bool:
        return server_of(definition, name) in answered

    kept = tuple(t for t in recorded.tools if not relisting(t.name))
    fresh = tuple(t for t in now.tools if relisting(t.name))
    return msgspec.structs.replace(recorded, tools=(*kept, *fresh))


def _plain(value: Any) -> Any:
    """``value`` as the journal gives it back (tuples become lists, ...), so a
    configuration read back equals the one described."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(value))


def _settings(model: Model) -> dict[str, Any]:
    """The context window, and the settings an adapter reports as a
    ``settings`` mapping (optional: the ``Model`` protocol does not ask for it)."""
    found = getattr(model, "settings", None)
    extra = dict(found) if isinstance(found, Mapping) else {}
    try:
        plain = _plain(extra)
    except (TypeError, msgspec.EncodeError):
        plain = {k: repr(v) for k, v in extra.items()}
    return {"context_window": model.context_window, **plain}


def _limits(limits: Limits) -> dict[str, Any]:
    return {f.name: getattr(limits, f.name) for f in dataclasses.fields(limits)}


@functools.cache
def _default_limits() -> dict[str, Any]:
    """``Limits()`` as a configuration records it: made once (read it, never
    change it), as every restore compares with it."""
    return _limits(Limits())


def _with_later_limits(config: LoopConfig) -> LoopConfig:
    """``config`` with each ``Limits`` field it predates at its default: a
    limit is added with a default that keeps what loops did before it, so a
    journal recorded before it ran as that default says (no drift)."""
    defaults = _default_limits()

    def filled(limits: dict[str, Any]) -> dict[str, Any]:
        return limits if defaults.keys() <= limits.keys() else {**defaults, **limits}

    if defaults.keys() <= config.limits.keys() and all(
        m.limits is None or defaults.keys() <= m.limits.keys() for m in config.modes
    ):
        return config
    modes = tuple(
        m if m.limits is None else msgspec.structs.replace(m, limits=filled(m.limits))
        for m in config.modes
    )
    return msgspec.structs.replace(config, limits=filled(config.limits), modes=modes)


def _permission(policy: PermissionPolicy | None) -> str:
    if policy is None:
        return "none"
    return "function" if callable(policy) else str(policy)


def _tool(
    tool: Tool, policy: PermissionPolicy | None, offered: bool, *, deferred: bool = False
) -> ToolConfig:
    schema = msgspec.json.encode(tool.schema.input_schema, order="sorted").decode()
    return ToolConfig(
        name=tool.name,
        schema=digest(schema),
        replay_safe=tool.replay_safe,
        resumable=tool.resumable,
        atomic=tool.atomic,
        permission=_permission(policy),
        offered=offered,
        deferred=deferred,
        redact=tool.redaction or _described(tool.redact_input),
        redact_result=tool.result_redaction or _described(tool.redact_output),
        middleware=tuple(qualified_name(m) for m in tool.middleware),
        direct=tool.direct,
    )


def _described(fn: object) -> str:
    """A redaction given to ``Tool`` as a compiled function only."""
    return "" if fn is None else f"function {qualified_name(fn)}"


def changes(old: LoopConfig, new: LoopConfig) -> tuple[ConfigChange, ...]:
    """Every difference from ``old`` to ``new`` (empty when they are equal)."""
    old = _with_later_limits(old)
    found: list[ConfigChange] = []
    if old.model != new.model:
        found.append(ConfigChange(what="model", old=old.model, new=new.model))
    found += _mapping("model_setting", old.model_settings, new.model_settings)
    if old.system != new.system:
        found.append(ConfigChange(what="system", old=old.system, new=new.system))
    before = {t.name: t for t in old.tools}
    after = {t.name: t for t in new.tools}
    for name in after.keys() - before.keys():
        found.append(ConfigChange(what="tool_added", name=name))
    for name in before.keys() - after.keys():
        found.append(ConfigChange(what="tool_removed", name=name))
    for name in before.keys() & after.keys():
        was, now = before[name], after[name]
        if was.schema != now.schema:
            found.append(
                ConfigChange(what="tool_schema", name=name, old=was.schema, new=now.schema)
            )
        if _flags(was) != _flags(now):
            found.append(
                ConfigChange(what="tool_flags", name=name, old=_flags(was), new=_flags(now))
            )
        if _redaction(was) != _redaction(now):
            found.append(
                ConfigChange(
                    what="tool_redaction", name=name, old=_redaction(was), new=_redaction(now)
                )
            )
        if was.middleware != now.middleware:
            found.append(
                ConfigChange(
                    what="tool_middleware",
                    name=name,
                    old=", ".join(was.middleware),
                    new=", ".join(now.middleware),
                )
            )
    if old.models != new.models:
        found.append(
            ConfigChange(what="models", old=", ".join(old.models), new=", ".join(new.models))
        )
    modes_before = {m.name: m for m in old.modes}
    modes_after = {m.name: m for m in new.modes}
    for name in modes_after.keys() - modes_before.keys():
        found.append(ConfigChange(what="mode_added", name=name))
    for name in modes_before.keys() - modes_after.keys():
        found.append(ConfigChange(what="mode_removed", name=name))
    for name in modes_before.keys() & modes_after.keys():
        was_m, now_m = modes_before[name], modes_after[name]
        if was_m != now_m:
            fields = [
                f for f in ModeConfig.__struct_fields__ if getattr(was_m, f) != getattr(now_m, f)
            ]
            found.append(
                ConfigChange(
                    what="mode_changed",
                    name=name,
                    old=", ".join(f"{f}={getattr(was_m, f)!r}" for f in fields),
                    new=", ".join(f"{f}={getattr(now_m, f)!r}" for f in fields),
                )
            )
    found += _mapping("limit", old.limits, new.limits)
    for what in ("hooks", "classifiers"):
        was_n, now_n = getattr(old, what), getattr(new, what)
        if was_n != now_n:
            found.append(ConfigChange(what=what, old=", ".join(was_n), new=", ".join(now_n)))
    if old.tool_middleware != new.tool_middleware:
        found.append(
            ConfigChange(
                what="middleware",
                old=", ".join(old.tool_middleware),
                new=", ".join(new.tool_middleware),
            )
        )
    return tuple(sorted(found, key=lambda c: (_ORDER.index(c.what), c.name)))


_ORDER = (
    "model",
    "model_setting",
    "system",
    "tool_added",
    "tool_removed",
    "tool_schema",
    "tool_flags",
    "tool_redaction",
    "tool_middleware",
    "models",
    "mode_added",
    "mode_removed",
    "mode_changed",
    "limit",
    "hooks",
    "classifiers",
    "middleware",
)


def _flags(tool: ToolConfig) -> str:
    on = [
        f
        for f in ("replay_safe", "resumable", "atomic", "offered", "deferred", "direct")
        if getattr(tool, f)
    ]
    return ", ".join([*on, f"permission={tool.permission}"])


def _redaction(tool: ToolConfig) -> str:
    return f"redact={tool.redact or '(none)'}; redact_result={tool.redact_result or '(none)'}"


def _mapping(what: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[ConfigChange]:
    missing = object()
    found = []
    for key in sorted(old.keys() | new.keys()):
        was, now = old.get(key, missing), new.get(key, missing)
        if was != now:
            found.append(
                ConfigChange(
                    what=what,
                    name=key,
                    old="" if was is missing else repr(was),
                    new="" if now is missing else repr(now),
                )
            )
    return found


def change_text(change: ConfigChange) -> str:
    """One change in words: ``model a → b``, ``tool added: x``, ..."""
    c = change
    match c.what:
        case "model":
            return f"model {c.old} → {c.new}"
        case "system":
            return f"system prompt {c.old[:8]} → {c.new[:8]}"
        case "tool_added" | "tool_removed" | "mode_added" | "mode_removed":
            noun, verb = c.what.split("_")
            return f"{noun} {verb}: {c.name}"
        case "tool_schema":
            return f"tool {c.name}: input schema {c.old[:8]} → {c.new[:8]}"
        case "tool_flags" | "tool_redaction":
            return f"tool {c.name}: {c.old} → {c.new}"
        case "tool_middleware":
            return f"tool {c.name}: middleware [{c.old}] → [{c.new}]"
        case "middleware":
            return f"tool_middleware [{c.old}] → [{c.new}]"
        case "models":
            return f"registered models [{c.old}] → [{c.new}]"
        case "hooks" | "classifiers":
            return f"{c.what} [{c.old}] → [{c.new}]"
        case "mode_changed":
            return f"mode {c.name}: {c.old} → {c.new}"
        case "limit" | "model_setting":
            word = "limit" if c.what == "limit" else "model setting"
            return f"{word} {c.name} {c.old or '(unset)'} → {c.new or '(unset)'}"
        case _:
            return f"{c.what} {c.name} {c.old} → {c.new}".strip()
