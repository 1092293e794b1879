"""Shared pytest configuration.  Fixture plugins live in tests/support/."""

import logging
from collections.abc import Iterator

import pytest
import structlog

from loopruntime import empties

# The library never configures logging; tests keep it quiet below warnings.
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

pytest_plugins: list[str] = ["tests.support.postgres", "tests.support.clocks"]


@pytest.fixture(autouse=True)
def _shared_empty_containers_stay_empty() -> Iterator[None]:
    """Idle loop states, mailboxes and writers share one empty list and dict
    (``loopruntime.empties``), which refuse writes; a write that got past that
    (a C-level call, say) would show in every other one.  Checked after each
    test."""
    yield
    assert empties.NO_LIST == [] and empties.NO_DICT == {}, (empties.NO_LIST, empties.NO_DICT)
