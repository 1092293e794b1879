"""The full projections of records (the fold, the trace, the tree, the
unified model's facts, the transcript, the checker) dispatch a record the one
way the house does: a ``match`` on its event whose last case is
``assert_never``, so mypy proves it
exhaustive.  This test proves it too, over every event kind the journal
defines: a new event is a failure here, naming each projection that does not
say what it does with it (a case of its own, or one of those it passes over
in a case that says so)."""

from __future__ import annotations

import ast
import importlib
import inspect
import typing

import pytest

from journal.events import Event

PROJECTIONS = [
    ("loopruntime.state", "fold"),
    ("session.traces.otel", "SpanBuilder"),
    ("session.replay.tree_builder", "_StreamBuilder"),
    ("session.replay.unified_facts", "read_facts"),
    ("session.replay.transcript", "TranscriptRenderer"),
    ("session.embedded.check.checker", "_Checker"),
]

EVENT_KINDS: tuple[type, ...] = typing.get_args(Event)


def _pattern_names(pattern: ast.pattern) -> list[str]:
    if isinstance(pattern, ast.MatchClass) and isinstance(pattern.cls, ast.Name):
        return [pattern.cls.id]
    if isinstance(pattern, ast.MatchOr):
        return [name for p in pattern.patterns for name in _pattern_names(p)]
    if isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        return _pattern_names(pattern.pattern)
    return []


def _ends_in_assert_never(match: ast.Match) -> bool:
    last = match.cases[-1]
    is_wildcard = isinstance(last.pattern, ast.MatchAs) and last.pattern.pattern is None
    calls = [
        node.func.id
        for node in ast.walk(ast.Module(body=last.body, type_ignores=[]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]
    return is_wildcard and "assert_never" in calls


def dispatched_kinds(module_name: str, scope: str) -> set[type]:
    """The event kinds the exhaustive ``match``es in ``scope`` name (a base
    class names all of its kinds)."""
    module = importlib.import_module(module_name)
    tree = ast.parse(inspect.getsource(getattr(module, scope)))
    named: list[type] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Match) and _ends_in_assert_never(node):
            for case in node.cases:
                named.extend(getattr(module, n) for n in _pattern_names(case.pattern))
    return {kind for kind in EVENT_KINDS if any(issubclass(kind, n) for n in named)}


def test_the_event_kinds_are_the_journals() -> None:
    assert len(EVENT_KINDS) > 40 and all(inspect.isclass(k) for k in EVENT_KINDS)


@pytest.mark.parametrize("module_name, scope", PROJECTIONS)
def test_every_projection_says_what_it_does_with_every_event_kind(
    module_name: str, scope: str
) -> None:
    missing = set(EVENT_KINDS) - dispatched_kinds(module_name, scope)
    assert not missing, (
        f"{module_name}.{scope} has no case for {sorted(k.__name__ for k in missing)}: "
        "add one (or add the kind to the case that passes over kinds it does not use)"
    )


def test_a_projection_that_passes_over_kinds_silently_is_caught() -> None:
    source = """
def feed(e):
    match e:
        case TurnStarted():
            pass
        case _:
            pass
"""
    [match] = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Match)]
    assert not _ends_in_assert_never(match)
