"""The loop package's import graph: no cycles, nothing imported inside a function.

A worker depends on ``loopruntime.ports``, never on the actor; a module that
needed a cycle would have to hide an import inside a function or behind
``TYPE_CHECKING``, so both are refused here (except the lazy import of the
heavy Anthropic SDK in ``loopruntime.models``).
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAZY_ALLOWED = {("loopruntime.models", "loopruntime.models.anthropic")}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports(path: pathlib.Path, tree: ast.AST) -> list[tuple[ast.stmt, str]]:
    """(statement, imported loopruntime module) for every import in ``tree``,
    the syntax of ``path``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[ast.stmt, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node, a.name) for a in node.names if a.name.startswith("loopruntime")]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = (
                ".".join([*base, *([node.module] if node.module else [])])
                if node.level
                else node.module or ""
            )
            if not target.startswith("loopruntime"):
                continue
            subs = [f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")]
            out += [(node, s) for s in subs]
            if len(subs) < len(node.names):
                out.append((node, target))
    return out


def _graph() -> dict[str, set[str]]:
    return {
        _module_name(p): {t for _, t in _imports(p, ast.parse(p.read_text()))} - {_module_name(p)}
        for p in (ROOT / "loopruntime").rglob("*.py")
    }


def test_no_import_cycles() -> None:
    graph = _graph()
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join([*path, module]))
        if module in done:
            return
        path.append(module)
        for dep in sorted(graph.get(module, ())):
            visit(dep)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def test_no_imports_hidden_in_functions_or_type_checking() -> None:
    for path in (ROOT / "loopruntime").rglob("*.py"):
        module = _module_name(path)
        tree = ast.parse(path.read_text())
        imports = _imports(path, tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                raise AssertionError(f"{module}: an import behind TYPE_CHECKING")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if not isinstance(inner, ast.Import | ast.ImportFrom):
                        continue
                    targets = {t for n, t in imports if n is inner}
                    assert targets and all((module, t) in LAZY_ALLOWED for t in targets), (
                        f"{module}: an import inside {node.name}: {ast.unparse(inner)}"
                    )
