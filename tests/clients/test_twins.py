"""``Client`` and ``SyncClient`` are one API: every public method of one is on
the other, with the same parameters (names, kinds, defaults, annotations)
and the same return annotation, ``async`` aside (``AsyncIterator`` and
``Iterator`` are the same stream; ``aclose`` is ``close``; ``__aenter__``
is ``__enter__``)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from session import Client, SyncClient

ASYNC_NAMES = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}
"""The async method of each pair whose names differ (Python's own protocol names)."""

BUILT_DIFFERENTLY = {"__init__"}
"""Built on a different journal by design: a trio ``Journal`` or a ``BlockingJournal``."""


def public(cls: type) -> dict[str, Callable[..., Any]]:
    names = {n for n in vars(cls) if not n.startswith("_")}
    names |= {n for n in ("__enter__", "__exit__", "__aenter__", "__aexit__") if n in vars(cls)}
    return {n: getattr(cls, n) for n in names if callable(getattr(cls, n))}


def sync_name(name: str) -> str:
    return ASYNC_NAMES.get(name, name)


def hints(method: Callable[..., Any]) -> dict[str, Any]:
    """Resolved in the module that wrote them (a ``SyncClient`` method made
    from ``Client``'s carries ``Client``'s annotations)."""
    return typing.get_type_hints(method)


def same_stream(left: Any, right: Any) -> bool:
    """``AsyncIterator[X]`` (async) against ``Iterator[X]`` (sync)."""
    return (
        typing.get_origin(left) is AsyncIterator
        and typing.get_origin(right) is Iterator
        and typing.get_args(left) == typing.get_args(right)
    )


def test_every_public_method_has_its_twin() -> None:
    async_names = {sync_name(n) for n in public(Client)}
    assert async_names == set(public(SyncClient))


@pytest.mark.parametrize("name", sorted(set(public(Client)) - BUILT_DIFFERENTLY))
def test_twins_take_the_same_parameters_and_return_the_same(name: str) -> None:
    async_method = public(Client)[name]
    sync_method = public(SyncClient)[sync_name(name)]
    async_signature = inspect.signature(async_method)
    sync_signature = inspect.signature(sync_method)
    assert [(p.name, p.kind, p.default) for p in async_signature.parameters.values()] == [
        (p.name, p.kind, p.default) for p in sync_signature.parameters.values()
    ]
    async_hints = hints(async_method)
    sync_hints = hints(sync_method)
    returned = async_hints.pop("return"), sync_hints.pop("return")
    assert async_hints == sync_hints
    if returned[0] is Client:
        assert returned[1] is SyncClient  # each opener returns its own kind
    elif name == "subscribe":
        assert same_stream(*returned), returned
    else:
        assert returned[0] == returned[1]
    is_async = inspect.iscoroutinefunction(async_method)
    assert is_async == (name != "subscribe"), "every async twin but the stream is awaited"
    assert not inspect.iscoroutinefunction(sync_method)


def test_sessions_reads_the_same_status_records() -> None:
    """The defect the comparison above now catches: ``SyncClient.sessions``
    returned ``SessionInfo`` (no ``status``) and ``Client.sessions``
    ``SessionStatus``."""
    from session import SessionStatus

    assert hints(Client.sessions)["return"] == list[SessionStatus]
    assert hints(SyncClient.sessions)["return"] == list[SessionStatus]
