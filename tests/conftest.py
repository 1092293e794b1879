"""Shared pytest configuration.  Fixture plugins live in tests/support/."""

import logging
from collections.abc import Iterator

import pytest
import structlog

from loopruntime import mailbox, state
from session import writer

# The library never configures logging; tests keep it quiet below warnings.
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

pytest_plugins: list[str] = ["tests.support.postgres"]


@pytest.fixture(autouse=True)
def _shared_empty_state_containers_stay_empty() -> Iterator[None]:
    """Every idle ``LoopState`` shares one empty list and dict (``shed_empty``),
    every idle mailbox one empty lane, every idle writer one empty queue: a
    write into them anywhere (a writer that did not take its own container
    first) would show in every other state, mailbox or writer.  Checked after
    each test."""
    yield
    assert state._NO_LIST == [] and state._NO_DICT == {}, (state._NO_LIST, state._NO_DICT)
    assert mailbox._EMPTY == [], mailbox._EMPTY
    assert writer._NONE == [], writer._NONE
