"""Shared pytest configuration.  Fixture plugins live in tests/support/."""

pytest_plugins: list[str] = ["tests.support.postgres"]
