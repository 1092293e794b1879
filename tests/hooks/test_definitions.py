"""Bad hooks, middleware and classifiers are refused when the definition
(or the hook, or the tool) is made, with an error saying what to do."""

from __future__ import annotations

from typing import Any

import pytest

from journal import open_journal
from journal.events import LoopConfigured, LoopReconfigured
from loopruntime import Limits, LoopDefinition, ToolContext, classifier, hook, tool
from loopruntime.models import ScriptedModel
from session import Session
from tests.support.loops import events_of


async def on_call(shown: Any) -> None:
    return None


def sync_function(shown: Any) -> None:
    return None


def make(**options: Any) -> LoopDefinition:
    return LoopDefinition(name="bad", model=ScriptedModel([]), **options)


def test_a_hook_needs_a_known_point() -> None:
    with pytest.raises(ValueError, match="'before_everything' is not a hook point; use one of"):
        hook("before_everything")(on_call)


def test_a_hook_must_be_an_async_function() -> None:
    with pytest.raises(TypeError, match=r"hook 'sync_function' must be an async function"):
        hook("before_tool")(sync_function)
    with pytest.raises(TypeError, match="must be an async function"):
        hook("before_tool", "not a function")  # type: ignore[call-overload]


def test_a_hook_timeout_must_be_seconds() -> None:
    with pytest.raises(ValueError, match="hook 'on_call': timeout must be a positive"):
        hook("before_tool", timeout=0)(on_call)


@pytest.mark.parametrize("bad", [on_call, "on_call", 3, None])
def test_hooks_take_only_hooks(bad: Any) -> None:
    with pytest.raises(TypeError, match=r"hooks takes hooks made with @hook\(point\)"):
        make(hooks=[bad])


def test_hooks_must_be_a_list() -> None:
    with pytest.raises(TypeError, match=r"hooks must be a list.*wrap a single one in \[\.\.\.\]"):
        make(hooks=hook("before_tool")(on_call))


def test_two_hooks_with_one_name_are_refused() -> None:
    one = hook("before_tool")(on_call)
    two = hook("after_tool")(on_call)
    with pytest.raises(ValueError, match="more than one hook named 'on_call'"):
        make(hooks=[one, two])
    make(hooks=[one, hook("after_tool", name="other")(on_call)])


@pytest.mark.parametrize("bad", [sync_function, "retry", 42, int])
def test_middleware_must_be_async_functions(bad: Any) -> None:
    with pytest.raises(TypeError, match="tool_middleware must be an async function"):
        make(tool_middleware=[bad])
    with pytest.raises(TypeError, match="tool fetch: middleware must be an async function"):

        @tool(middleware=[bad])
        async def fetch(ctx: ToolContext) -> str:
            return ""


def test_middleware_may_be_an_object_with_an_async_call() -> None:
    class Metrics:
        async def __call__(self, ctx: ToolContext, call_next: Any) -> Any:
            return await call_next()

    make(tool_middleware=[Metrics()])


@pytest.mark.parametrize("bad", ["rules", 7, None, int])
def test_classifiers_must_be_callables(bad: Any) -> None:
    with pytest.raises(TypeError, match="a classifier must be a function of a PermissionRequest"):
        make(classifiers=[bad])


def test_classifiers_sync_and_async_are_accepted_and_named_once() -> None:
    make(classifiers=[sync_function, on_call, classifier(name="x")(sync_function)])
    with pytest.raises(ValueError, match="more than one classifier named 'sync_function'"):
        make(classifiers=[sync_function, sync_function])


def test_hook_timeout_in_limits_is_checked() -> None:
    with pytest.raises(ValueError, match=r"Limits\.hook_timeout must be a positive"):
        Limits(hook_timeout=-1)
    assert Limits(hook_timeout=None).hook_timeout is None


async def test_the_configuration_names_hooks_and_classifiers_and_a_deploy_changing_them() -> None:
    guard = hook("before_tool", name="guard")(on_call)
    audit = hook("after_tool", name="audit")(on_call)
    async with open_journal("memory:") as journal:
        async with Session.create(journal, make(hooks=[guard], classifiers=[sync_function])) as s:
            pass
        async with Session.restore(journal, s.id, make(hooks=[guard, audit])):
            pass
        [configured] = await events_of(journal, s.id, LoopConfigured)
        [reconfigured] = await events_of(journal, s.id, LoopReconfigured)
    assert configured.config.hooks == ("before_tool:guard",)
    assert configured.config.classifiers == ("sync_function",)
    assert [(c.what, c.old, c.new) for c in reconfigured.changes] == [
        ("hooks", "before_tool:guard", "before_tool:guard, after_tool:audit"),
        ("classifiers", "sync_function", ""),
    ]


async def retry(ctx: ToolContext, call_next: Any) -> Any:
    return await call_next()


async def audit(ctx: ToolContext, call_next: Any) -> Any:
    return await call_next()


def with_middleware(own: list[Any], outer: list[Any]) -> LoopDefinition:
    @tool(permission="allow", middleware=own)
    async def fetch(ctx: ToolContext) -> str:
        """Fetches."""
        return ""

    return make(tools=[fetch], tool_middleware=outer)


async def test_the_configuration_names_middleware_and_a_deploy_changing_it() -> None:
    from session import DefinitionDriftError

    here = "tests.hooks.test_definitions"
    async with open_journal("memory:") as journal:
        async with Session.create(journal, with_middleware([retry], [])) as s:
            pass
        changed = with_middleware([audit, retry], [audit])
        with pytest.raises(DefinitionDriftError, match=r"tool fetch: middleware \["):
            async with Session.restore(journal, s.id, changed, drift="refuse"):
                pass
        async with Session.restore(journal, s.id, changed):
            pass
        [configured] = await events_of(journal, s.id, LoopConfigured)
        [reconfigured] = await events_of(journal, s.id, LoopReconfigured)
    (fetch,) = configured.config.tools
    assert fetch.middleware == (f"{here}.retry",)
    assert configured.config.tool_middleware == ()
    assert [(c.what, c.name, c.old, c.new) for c in reconfigured.changes] == [
        ("tool_middleware", "fetch", f"{here}.retry", f"{here}.audit, {here}.retry"),
        ("middleware", "", "", f"{here}.audit"),
    ]
