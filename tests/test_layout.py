"""The layout's rules, checked over the source (docs/architecture.md says why each holds).

- no import cycle between modules of the project, counting imports inside
  functions and under ``TYPE_CHECKING`` (a cycle dodged that way is still one);
- layers only look down: ``journal`` imports neither ``loopruntime`` nor
  ``session``, ``loopruntime`` does not import ``session``;
- ``session`` uses only what the lower layers export;
- a module over ``MAX_LINES`` says in its opening docstring why it is one piece;
- test-only hooks live in ``tests/support/``, and there is one crash-child harness.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
from collections.abc import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("journal", "loopruntime", "session")
MAX_LINES = 600
# The phrase a long module's docstring uses to say why it is not split.
ONE_PIECE = "one piece"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


MODULES = _modules()


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _imports(module: str) -> Iterator[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import in the module."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if _is_package(module) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                yield target, alias.name, node.lineno


def _edges(module: str) -> set[str]:
    """The project modules this module needs: a submodule named in ``from pkg import sub``
    counts as that submodule, not as the package."""
    found: set[str] = set()
    for target, name, _ in _imports(module):
        if name is not None and f"{target}.{name}" in MODULES:
            found.add(f"{target}.{name}")
        elif target in MODULES:
            found.add(target)
    found.discard(module)
    return found


def test_no_import_cycle() -> None:
    graph = {module: _edges(module) for module in MODULES}
    # Tarjan's strongly connected components: any component of two or more is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert cycles == [], f"import cycles: {cycles}"


def test_the_checker_sees_a_cycle() -> None:
    # Guards the walk itself: loopruntime/__init__ imports actor, so an edge back would be
    # a cycle; the edge relation must see the first half.
    assert "loopruntime.actor" in _edges("loopruntime")


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [("journal", ("loopruntime", "session")), ("loopruntime", ("session",))],
)
def test_layers_only_look_down(package: str, forbidden: tuple[str, ...]) -> None:
    for module in MODULES:
        if module.split(".")[0] != package:
            continue
        for target, _, line in _imports(module):
            assert target.split(".")[0] not in forbidden, f"{MODULES[module]}:{line}: {target}"


def _exported(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__)


# What session may use: the public names of the lower layers, and the public submodules
# they export by name (``journal.codec``, ``journal.content``, ``journal.events``,
# ``journal.inbox``).
LOWER_SURFACE = {
    "journal": _exported("journal"),
    "journal.codec": _exported("journal.codec"),
    "journal.content": _exported("journal.content"),
    "journal.events": _exported("journal.events"),
    "journal.inbox": _exported("journal.inbox"),
    "loopruntime": _exported("loopruntime"),
    "loopruntime.host": _exported("loopruntime.host"),
    "loopruntime.models": _exported("loopruntime.models"),
    "loopruntime.models.anthropic": {"AnthropicModel"},
}


def test_session_uses_only_what_lower_layers_export() -> None:
    for module in MODULES:
        if module.split(".")[0] != "session":
            continue
        for target, name, line in _imports(module):
            if target.split(".")[0] not in ("journal", "loopruntime"):
                continue
            where = f"{MODULES[module]}:{line}"
            assert target in LOWER_SURFACE, f"{where}: imports from {target}, not a public module"
            assert name in LOWER_SURFACE[target], f"{where}: {target}.{name} is not exported"


def test_long_modules_say_why_they_are_one_piece() -> None:
    for path in MODULES.values():
        lines = path.read_text().count("\n")
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert ONE_PIECE in doc, f"{path} has {lines} lines and no word on why it is one piece"


def test_no_test_hooks_on_production_classes() -> None:
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert "for_tests" not in node.name, f"{path}:{node.lineno}: {node.name}"


def test_one_crash_child_harness() -> None:
    harnesses = sorted(
        str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("*crash_child*.py")
    )
    assert harnesses == ["tests/support/crash_child.py"]


# The parts of ``session``, each a sub-package, with the lower parts it may import.
# Only ``session/__init__.py``, the public facade, stands above them all.
SESSION_PARTS: dict[str, frozenset[str]] = {
    "embedded": frozenset(),
    "replay": frozenset({"embedded"}),
    "traces": frozenset({"embedded", "replay"}),
    "clients": frozenset({"embedded"}),
    "hosting": frozenset({"embedded"}),
    "console": frozenset({"embedded", "replay", "clients"}),
    "cli": frozenset({"embedded", "traces", "replay", "clients", "hosting", "console"}),
}


def _part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "session" and len(parts) > 1 else None


def _part_imports(module: str) -> Iterator[tuple[str, int]]:
    """(imported part, line) for each import of another part of ``session``."""
    own = _part(module)
    for target, name, line in _imports(module):
        imported = _part(target)
        if imported is None and target == "session" and name is not None:
            imported = name if name in SESSION_PARTS else None
        if imported is not None and imported != own:
            yield imported, line


def test_session_is_made_of_its_parts() -> None:
    parts = {_part(module) for module in MODULES if module.startswith("session.")}
    assert parts == set(SESSION_PARTS), "a module of session outside its parts"
    for part in SESSION_PARTS:
        assert _is_package(f"session.{part}"), f"session.{part} is not a sub-package"


def test_session_parts_only_look_down() -> None:
    for module in MODULES:
        own = _part(module)
        if own is None:
            continue
        for imported, line in _part_imports(module):
            assert imported in SESSION_PARTS[own], (
                f"{MODULES[module]}:{line}: the part {own} imports the part {imported}"
            )


def test_the_part_check_sees_imports_inside_functions() -> None:
    # Guards the walk: the command line imports the console part only inside a
    # function (the extra ``console`` may be missing), and that import still counts.
    assert "console" in {imported for imported, _ in _part_imports("session.cli.hosting")}
