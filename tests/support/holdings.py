"""What an idle session holds, found through public introspection only: the
tasks of the run (trio's task tree from its root) and the objects the
library's objects refer to (``vars`` and ``__slots__``), never a private
name.  A test of memory or tasks then keeps working when an attribute is
renamed, and covers every object of the session, not only those it names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import trio

LIBRARY = ("journal.", "loopruntime.", "session.")
"""The packages whose objects and tasks are the library's own."""


def library_tasks() -> list[str]:
    """The names of the run's tasks that run library code (every such task
    is named after the function it runs), found from the root task down."""
    names: list[str] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task is None:
            continue
        if task.name.startswith(LIBRARY):
            names.append(task.name)
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return sorted(names)


def attributes(obj: Any) -> list[Any]:
    """The values ``obj`` holds in its ``__dict__`` and its slots."""
    held = list(vars(obj).values()) if hasattr(obj, "__dict__") else []
    slots = [n for cls in type(obj).__mro__ for n in getattr(cls, "__slots__", ())]
    return held + [getattr(obj, n, None) for n in slots if n not in ("__dict__", "__weakref__")]


def _is_library(value: Any) -> bool:
    return type(value).__module__.startswith(LIBRARY) and not isinstance(value, type)


def holdings(root: Any) -> Iterator[tuple[str, Any]]:
    """Every value a library object reachable from ``root`` holds, as
    (the holder's class name, the value); reachable means through library
    objects and the lists, tuples and dict values they hold."""
    seen = {id(root)}
    todo = [root]
    while todo:
        owner = todo.pop()
        for value in attributes(owner):
            yield type(owner).__name__, value
            inner = value.values() if isinstance(value, dict) else value
            members = inner if isinstance(inner, list | tuple | type({}.values())) else (value,)
            for member in members:
                if _is_library(member) and id(member) not in seen:
                    seen.add(id(member))
                    todo.append(member)
