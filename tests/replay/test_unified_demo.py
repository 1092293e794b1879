"""The golden unified document of the demo session (session/cli/demo.py: parallel
tools, a gate, a process killed in a tool, the host's resolution, a deploy).

What differs from run to run (the session id, generated ids, seqs of the
parallel tools, clock times) is named away: each node is its kind and ordinal,
each relation its type, its ends' names and its quality.  Regenerate after an
intended change with ``LOOPRUNTIME_GOLDEN=write``."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from journal import open_journal
from session.cli.demo import run_demo
from session.replay import build_unified, unified_json
from tests.replay.test_unified import assert_well_formed

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).parent / "unified_demo.golden.json"

STABLE_ATTRS = ("name", "status", "outcome", "trigger", "gate_kind", "record", "code")


def named(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with every id replaced by ``kind#ordinal``."""
    names: dict[str, str] = {}
    count: dict[str, int] = {}
    for node in doc["nodes"]:
        count[node["kind"]] = count.get(node["kind"], 0) + 1
        names[node["id"]] = f"{node['kind']}#{count[node['kind']]}"
    nodes = []
    for node in doc["nodes"]:
        attrs = {k: node["attrs"][k] for k in STABLE_ATTRS if k in node["attrs"]}
        nodes.append(
            {
                "name": names[node["id"]],
                "parent": names.get(node["parent"]) if node["parent"] else None,
                "claim": node["claim"],
                "content": node["content"],
                "role": node["role"],
                "trigger": node["trigger"],
                "text": node["text"][:80],
                "attrs": attrs,
                **manifest(node.get("manifest"), names),
            }
        )
    relations = sorted(
        [r["type"], names[r["from"]], names[r["to"]], r["quality"]] for r in doc["relations"]
    )
    return {
        "schema": doc["schema"],
        "version": doc["version"],
        "nodes": nodes,
        "relations": relations,
    }


def manifest(found: dict[str, Any] | None, names: dict[str, str]) -> dict[str, Any]:
    """An llm.call's manifest by node names (its seqs vary with the run)."""
    if found is None:
        return {}
    return {
        "manifest": {
            "after": names.get(found["after"]) if found["after"] else None,
            "inherited": found["inherited"],
            "nodes": [names[n] for n in found["nodes"]],
            "request": found["request"],
        }
    }


async def test_the_demo_sessions_unified_document_is_the_golden_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    assert await run_demo(url, tmp_path, io.StringIO()) == 0
    async with open_journal(url) as journal:
        [info] = await journal.sessions()
        records = [r async for r in journal.read(info.session)]
    doc = json.loads(unified_json(build_unified(info.session, records)))
    assert_well_formed(doc)
    got = named(doc)
    if os.environ.get("LOOPRUNTIME_GOLDEN") == "write":
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    assert got == json.loads(GOLDEN.read_text())
