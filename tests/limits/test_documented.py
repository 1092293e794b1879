"""docs/boundaries.md lists every limit: each ``Limits`` field and each
module-level ``MAX_*`` bound of the packages appears in its last section."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from loopruntime import Limits

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Every limit and its default"


def listed() -> str:
    text = (ROOT / "docs" / "boundaries.md").read_text()
    assert SECTION in text
    return text.split(SECTION, 1)[1]


def test_every_limits_field_is_in_the_table() -> None:
    section = listed()
    missing = [f.name for f in dataclasses.fields(Limits) if f"| `{f.name}` |" not in section]
    assert missing == []


def test_every_module_bound_is_named() -> None:
    section = listed()
    bounds = set()
    for package in ("journal", "loopruntime", "session"):
        for path in (ROOT / package).rglob("*.py"):
            bounds |= set(re.findall(r"^(MAX_[A-Z_]+)\s*=", path.read_text(), flags=re.M))
    assert bounds >= {"MAX_ENTRY_BYTES", "MAX_KEY_LENGTH", "MAX_SUMMARY_CHARS"}
    assert sorted(b for b in bounds if b not in section) == []
