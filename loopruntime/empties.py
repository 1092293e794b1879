"""Empty containers many idle objects share, which refuse every write.

An idle session keeps a dozen empty lists and dicts (its loop's state, its
mailbox's lanes, its writer's queues); sharing one of each makes an idle
session about a kilobyte lighter.  A shared container written by mistake
would hand one session's data to every other, so these refuse the write
with ``TypeError`` instead: a writer takes a container of its own first
(``own_list``, ``own_dict``), and a write that forgot to fails loudly, in
the one session that made it.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

__all__ = ["NO_DICT", "NO_LIST", "own_dict", "own_list"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


def _refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(
        f"a shared empty {type(self).__mro__[1].__name__} was written: take one of your own first"
    )


class _EmptyList(list[Any]):
    __slots__ = ()
    # Only what adds is refused: taking from an empty container (``pop`` with
    # a default, ``clear``) finds nothing and changes nothing, as on any other.
    append = extend = insert = __setitem__ = __iadd__ = _refuse


class _EmptyDict(dict[Any, Any]):
    __slots__ = ()
    update = setdefault = __setitem__ = __ior__ = _refuse


NO_LIST: list[Any] = _EmptyList()
"""The one empty list idle objects share (it encodes, compares and copies as
``[]``)."""

NO_DICT: dict[Any, Any] = _EmptyDict()
"""The one empty dict idle objects share (it encodes, compares and copies as
``{}``)."""


def own_list(value: list[T]) -> list[T]:
    """``value``, or a new list of its own if it is the shared empty one."""
    return [] if value is NO_LIST else value


def own_dict(value: dict[K, V]) -> dict[K, V]:
    """``value``, or a new dict of its own if it is the shared empty one."""
    return {} if value is NO_DICT else value
