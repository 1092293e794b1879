"""Shared pytest configuration.  Fixture plugins live in tests/support/."""

import logging
from collections.abc import Iterator

import pytest
import structlog

from loopruntime import state

# The library never configures logging; tests keep it quiet below warnings.
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

pytest_plugins: list[str] = ["tests.support.postgres"]


@pytest.fixture(autouse=True)
def _shared_empty_state_containers_stay_empty() -> Iterator[None]:
    """Every idle ``LoopState`` shares one empty list and dict (``shed_empty``):
    a write into them anywhere (a fold writer that did not take its own
    container first) would show in every other state.  Checked after each test."""
    yield
    assert state._NO_LIST == [] and state._NO_DICT == {}, (state._NO_LIST, state._NO_DICT)
