"""The full projections of records (the fold, the trace, the tree, the
unified model's facts, the transcript, the checker) dispatch a record the one
way the house does: a ``match`` on its event whose last case is
``assert_never``, so mypy proves it
exhaustive.  This test proves it too, over every event kind the journal
defines: a new event is a failure here, naming each projection whose dispatch
(that one ``match``) does not say what it does with it (a case of its own, or
one of those it passes over in a case that says so)."""

from __future__ import annotations

import ast
import importlib
import inspect
import types
import typing

import pytest

from journal import events

PROJECTIONS = [
    ("loopruntime.state", "fold"),
    ("session.traces.otel", "SpanBuilder"),
    ("session.replay.tree_builder", "_StreamBuilder"),
    ("session.replay.unified_facts", "read_facts"),
    ("session.replay.transcript", "TranscriptRenderer"),
    ("session.embedded.check.checker", "_Checker"),
]

EVENT_KINDS: tuple[type, ...] = typing.get_args(events.Event)


def _dotted(node: ast.expr) -> str:
    """``TurnStarted`` or ``ev.TurnStarted``, as written in a class pattern."""
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    assert isinstance(node, ast.Name), ast.dump(node)
    return node.id


def _pattern_names(pattern: ast.pattern) -> list[str]:
    if isinstance(pattern, ast.MatchClass):
        return [_dotted(pattern.cls)]
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


def _resolve(module: object, dotted: str) -> type:
    """The class a pattern names, looked up from the module it is written in."""
    found = module
    for part in dotted.split("."):
        found = getattr(found, part)
    assert inspect.isclass(found), f"{dotted} is not a class"
    return found


def _named_kinds(module: object, match: ast.Match) -> set[type]:
    """The event kinds the cases of ``match`` name (a base class names all of its kinds)."""
    named = [_resolve(module, n) for case in match.cases for n in _pattern_names(case.pattern)]
    return {kind for kind in EVENT_KINDS if any(issubclass(kind, n) for n in named)}


def dispatched_kinds(module_name: str, scope: str) -> set[type]:
    """The event kinds the dispatch in ``scope`` names: its widest exhaustive
    ``match``.  Only one ``match`` counts, so a kind the dispatch forgets is
    not hidden by a narrower ``match`` further down that names it too."""
    module = importlib.import_module(module_name)
    return _dispatch_kinds(module, ast.parse(inspect.getsource(getattr(module, scope))))


def _dispatch_kinds(module: object, tree: ast.AST) -> set[type]:
    matches = [n for n in ast.walk(tree) if isinstance(n, ast.Match) and _ends_in_assert_never(n)]
    return max((_named_kinds(module, m) for m in matches), key=len, default=set())


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


def test_a_kind_the_dispatch_forgets_is_caught_though_a_narrower_match_names_it() -> None:
    source = """
def feed(e):
    match e:
        case ev.TurnStarted():
            turn(e)
        case ev.SessionLevelEvent():
            pass
        case _:
            assert_never(e)

def turn(e):
    match e:
        case ev.TurnStarted() | ev.TurnEnded():
            pass
        case _:
            assert_never(e)
"""
    module = types.SimpleNamespace(ev=events)
    kinds = _dispatch_kinds(module, ast.parse(source))
    assert events.TurnStarted in kinds and events.CollabEnded in kinds
    assert events.TurnEnded not in kinds
