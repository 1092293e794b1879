"""One row of a figures table: what was measured, its value and unit, the
target it answers (if any) and whether it was met.  The hosts, scale-out and
takeover sections print their rows through the same table, so they share
this shape."""

from __future__ import annotations

from typing import Any


def target_row(
    benchmark: str, value: float, unit: str, target: str, met: bool | None, note: str = ""
) -> dict[str, Any]:
    return {
        "benchmark": benchmark,
        "value": value,
        "unit": unit,
        "target": target,
        "met": met,
        "note": note,
    }
