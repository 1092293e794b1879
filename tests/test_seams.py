"""Tests read the library through its public names.

A test that reads a private attribute of a library object (``s._writer``)
breaks when the library renames it and pins how, not what; it reads a
public property or method instead, or checks the behaviour.  The few tests
that must look inside are listed below, each with its reason.  "Private"
here is a name starting with one underscore that the library itself
defines, read anywhere but on ``self``/``cls``, or imported from a library
module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("journal", "loopruntime", "session")

ALLOWED: dict[tuple[str, str], str] = {
    ("tests/support/damage.py", "_sessions"): "damages a memory journal's stored rows on "
    "purpose, which no public API may do",
    ("tests/support/damage.py", "_blobs"): "damages a memory journal's stored blobs on purpose",
    ("tests/blobs/backends.py", "_sessions"): "reads a memory journal's stored rows, as the "
    "SQLite and PostgreSQL backends' tests read their tables: the storage the API hides",
    ("tests/blobs/backends.py", "_blobs"): "reads a memory journal's stored blobs, likewise",
    ("tests/journal/test_sqlite.py", "_writer"): "asks the SQLite writer's own connection "
    "(a PRAGMA is per connection) and traces the statements it runs",
    ("tests/journal/test_sqlite.py", "_token"): "counts the SQLite writer thread's "
    "handovers to trio, which only its token sees",
    ("tests/journal/test_sqlite.py", "_apply_slow"): "spies on the SQLite writer's "
    "request-by-request path, the private code under test",
    ("tests/journal/test_postgres.py", "_commit_checked"): "spies on the PostgreSQL "
    "writer's group path, the private code under test",
    ("tests/journal/test_postgres.py", "_writer_connection"): "traces the PostgreSQL "
    "writer's connections from their first byte (libpq's trace) to count its round trips",
    ("tests/console/test_views.py", "import _spans"): "a test of the views module's own "
    "marker parser",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def library_private_names() -> set[str]:
    """Every private name the library defines: functions, classes, module
    names and attributes set on ``self``/``cls``."""
    names: set[str] = set()
    for package in LIBRARY:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = node.name
                elif isinstance(node, ast.Attribute) and _on_self(node):
                    name = node.attr
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    name = node.id
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    name = node.value  # a slot's name
                else:
                    continue
                if _private(name) and name.isidentifier():
                    names.add(name)
    return names


def _on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def private_reads(source: str, private: set[str]) -> Iterator[tuple[int, str]]:
    """(line, name) of each read of a library's private name in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in private and not _on_self(node):
            yield node.lineno, node.attr
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(LIBRARY):
            for alias in node.names:
                if _private(alias.name):
                    yield node.lineno, f"import {alias.name}"


def test_tests_read_the_library_through_public_names() -> None:
    private = library_private_names()
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for line, name in private_reads(path.read_text(encoding="utf-8"), private):
            if (where, name) in ALLOWED:
                used.add((where, name))
            else:
                found.append(f"{where}:{line} reads {name}")
    assert not found, "read a public name or check the behaviour instead:\n" + "\n".join(found)
    assert used == set(ALLOWED), f"allowed but no longer read: {set(ALLOWED) - used}"


def test_the_check_finds_a_private_read() -> None:
    source = "from loopruntime.commands import _Command\nhead = s._writer.head\nself._writer\n"
    assert list(private_reads(source, {"_writer"})) == [(1, "import _Command"), (2, "_writer")]
