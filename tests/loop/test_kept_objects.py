"""What a conversation keeps for the cyclic collector to walk: its history is data
(events, messages and blocks are not tracked, `docs/decisions.md`), so a loop's
turns add no tracked object that every full collection of the process would visit
again, and a turn leaves no cyclic garbage behind to be found."""

from __future__ import annotations

import collections
import gc
from typing import Any

import trio

from journal import open_journal
from loopruntime import Limits, LoopDefinition, Tool, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.embedded.writer import IDLE_EXIT


@tool(permission="allow")
async def lookup(ctx: ToolContext, *, query: str) -> str:
    """Look it up."""
    return "found: " + query


def one_tool_step() -> LoopDefinition:
    # The shape of every turn in the many-loops benchmark: a tool step, then an answer.
    # Like a real model it keeps no request (``ScriptedModel.requests`` is for tests).
    def script(request: Any) -> Reply:
        model.requests.clear()
        if request.messages[-1].role == "user" and any(
            type(block).__name__ == "ToolResult" for block in request.messages[-1].blocks
        ):
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="lookup", input={"query": "q"})])

    model = ScriptedModel(script)
    # No model-call deadlines: trio keeps an exited scope's deadline in its heap
    # until the heap is pruned, which is trio's bookkeeping, not the conversation's.
    limits = Limits(model_first_token_timeout=None, model_call_timeout=None)
    return LoopDefinition(name="kept", model=model, tools=[lookup], limits=limits)


def tracked() -> collections.Counter[str]:
    gc.collect()
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


async def test_turns_add_no_tracked_objects_to_a_conversation(autojump_clock: Any) -> None:
    turns = 40
    async with open_journal("memory:") as journal:
        async with Session.create(journal, one_tool_step()) as s:
            for _ in range(3):  # one-off costs: first turn, caches, grown lists
                await s.submit("go")
                await s.wait_idle()
            # Past every deadline a turn left waiting (a flush's, a writer's idle
            # exit): what is left after it is what the conversation keeps.
            await trio.sleep(IDLE_EXIT + 1)
            before = tracked()
            for _ in range(turns):
                await s.submit("go")
                await s.wait_idle()
            await trio.sleep(IDLE_EXIT + 1)
            after = tracked()
            # Each turn added four messages and their blocks to the history: tracked,
            # with the tuples holding them, they were about eleven objects a turn.
            assert len((await s.snapshot()).messages) >= 4 * (turns + 3)
    grown = after - before
    grown.pop("Counter", None)  # ``before`` itself
    # The ABC caches' weak references to types (and their callbacks): filled anew
    # after another test registers a class with an ABC, a few per kind of object.
    grown.pop("ReferenceType", None)
    grown.pop("builtin_function_or_method", None)
    # No kind of object grows with the turns (a few one-off objects may appear).
    assert max(grown.values(), default=0) < turns // 2, grown.most_common(10)


async def test_a_turn_leaves_no_cyclic_garbage() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, one_tool_step()) as s:
            await s.submit("go")
            await s.wait_idle()
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for _ in range(5):
                    await s.submit("go")
                    await s.wait_idle()
                gc.collect()
                garbage = list(gc.garbage)
            finally:
                gc.garbage.clear()
                gc.set_debug(0)
                gc.enable()
    kinds = collections.Counter(type(o).__qualname__ for o in garbage)
    assert not garbage, kinds.most_common(10)


def test_a_delegates_tool_is_freed_with_the_delegate() -> None:
    import weakref

    from loopruntime import Delegate

    child = LoopDefinition(name="child", model=ScriptedModel([Reply(text="ok")]))
    delegate = Delegate(name="helper", description="Helps.", definition=child)
    built = [
        LoopDefinition(name=f"parent{i}", model=ScriptedModel([]), delegates=[delegate])
        .resolved(None)
        .tools[-1]
        for i in range(2)
    ]
    assert built[0].name == "helper" and built[0] is built[1]  # built once per delegate
    gone = weakref.ref(delegate)
    del delegate, built
    gc.collect()
    assert gone() is None


def test_load_tools_tools_are_kept_for_a_bounded_number_of_sets() -> None:
    from loopruntime.deferred import LOADERS_KEPT, load_tools_tool

    def loader(i: int) -> Tool:
        return load_tools_tool([tool(permission="allow", name=f"t{i}")(lookup.fn)])

    first = loader(0)
    assert loader(0) is first  # built once per set while kept
    for i in range(1, LOADERS_KEPT + 1):
        loader(i)
    # The least recently used set was let go, and is built again.
    assert loader(0) is not first
