"""session.embedded.collector: the cyclic collector paused while many sessions are made, their
objects frozen out of later collections, and given back; process-wide switches the
runtime itself never throws."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio

from journal import open_journal
from session import Session, collector_paused, freeze_held, thaw_held

from .test_idle_cost import one_step


class Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def collector_as_found() -> Iterator[None]:
    # Whatever a test does, the next one finds the collector on and nothing frozen.
    assert gc.isenabled() and gc.get_freeze_count() == 0
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


def test_a_pause_turns_automatic_collection_off_then_freezes_what_is_alive() -> None:
    with collector_paused():
        assert not gc.isenabled()
        kept = Cycle()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    # Frozen objects are out of every generation the collector walks.
    assert not any(o is kept for o in gc.get_objects())
    frozen = thaw_held()
    assert frozen > 0 and gc.get_freeze_count() == 0
    assert any(o is kept for o in gc.get_objects())


def test_the_collection_at_the_end_frees_cycles_made_inside_before_freezing() -> None:
    gc.collect()
    collected: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop":
            collected.append(info["collected"])

    gc.callbacks.append(count)
    try:
        with collector_paused():
            for _ in range(1000):
                Cycle()
            # Nothing collects them while the block runs, however many are made.
            assert collected == []
    finally:
        gc.callbacks.remove(count)
    assert sum(collected) >= 1000
    thaw_held()


def test_without_freeze_it_only_collects() -> None:
    with collector_paused(freeze=False):
        Cycle()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_an_error_inside_turns_the_collector_back_on_and_freezes_nothing() -> None:
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("x")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_collector_the_application_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused(freeze=False):
        pass
    assert not gc.isenabled()


async def test_overlapping_pauses_in_two_tasks_resume_when_the_last_one_leaves() -> None:
    # Not nested: the first task leaves while the second is still inside.
    first_in, second_in, first_out = trio.Event(), trio.Event(), trio.Event()
    seen: list[bool] = []

    async def first() -> None:
        with collector_paused(freeze=False):
            first_in.set()
            await second_in.wait()
        seen.append(gc.isenabled())
        first_out.set()

    async def second() -> None:
        await first_in.wait()
        with collector_paused(freeze=False):
            second_in.set()
            await first_out.wait()
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        nursery.start_soon(second)
    assert seen == [False, False, True]


def test_freeze_held_counts_what_it_froze_and_thaw_gives_it_back() -> None:
    frozen = freeze_held()
    assert frozen == gc.get_freeze_count() > 0
    assert thaw_held() == frozen
    assert gc.get_freeze_count() == 0


async def test_sessions_made_in_a_pause_stay_frozen_until_thawed(tmp_path: Path) -> None:
    # What the idle benchmark does, small: sessions made inside a pause, each after
    # a turn, are frozen at its end and keep working; a closed session is cyclic
    # garbage (its loops refer to it), which the collector frees once thawed.
    definition = one_step()
    async with open_journal(f"sqlite:///{tmp_path / 'idle.db'}") as journal:
        made: list[weakref.ref[Session]] = []
        async with AsyncExitStack() as stack:
            with collector_paused():
                for _ in range(10):
                    s = await stack.enter_async_context(Session.create(journal, definition))
                    await s.submit("go")
                    await s.wait_idle()
                    made.append(weakref.ref(s))
            assert gc.get_freeze_count() > 0
            await s.submit("again")
            await s.wait_idle()
            await s.verify()
            assert (await s.snapshot()).turn_index == 2
        del s
        gc.collect()
        assert all(ref() is not None for ref in made)
        thaw_held()
        gc.collect()
        assert all(ref() is None for ref in made)
