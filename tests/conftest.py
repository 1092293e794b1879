"""Shared pytest configuration.  Fixture plugins live in tests/support/."""

import logging

import structlog

# The library never configures logging; tests keep it quiet below warnings.
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

pytest_plugins: list[str] = ["tests.support.postgres"]
