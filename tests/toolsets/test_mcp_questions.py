"""Questions a server asks during a call (elicitation): while other calls of
the same server run, and answered with one plain value.

Against the real test server (tests/support/mcp_server.py); real clock, as
the other toolset tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from journal import open_journal
from journal.events import GateOpened, ToolCompleted, ToolStarted
from loopruntime import LoopDefinition
from loopruntime.models import ToolCall
from session import Session
from session.replay import check
from tests.support.loops import events_of
from tests.support.mcp_servers import calls_of, stdio_server
from tests.toolsets.test_mcp import calling, results, texts

pytestmark = pytest.mark.slow


async def test_questions_while_parallel_calls_run_go_to_their_own_calls(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(
        ToolCall(name="srv__launch", input={"target": "alpha"}),
        ToolCall(name="srv__launch", input={"target": "beta"}),
        ToolCall(name="srv__add", input={"a": 1, "b": 2}),
    )
    server = stdio_server(calls, permission="allow", parallel=True)
    definition = LoopDefinition(name="m", model=model, toolsets=[server])
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("launch both")
            await s.wait_idle()
            gates = (await s.snapshot()).open_gates
            assert sorted(g.kind for g in gates) == ["user_input", "user_input"]
            started = {e.execution_id: e for e in await events_of(journal, "s", ToolStarted)}
            by_target = {}
            for gate in gates:
                # Each question is a gate of the call that asked it.
                target = started[gate.execution_id].input["target"]
                assert gate.prompt.startswith(f"launch {target}?")
                by_target[target] = gate
            # Answered in the other order than asked: each reaches its own call.
            await s.answer(by_target["beta"].gate_id, '{"approve": true, "note": "b"}')
            await s.answer(by_target["alpha"].gate_id, '{"approve": false}')
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"
        opened = await events_of(journal, "s", GateOpened)
        assert len(opened) == 2
        done = {e.execution_id: e for e in await events_of(journal, "s", ToolCompleted)}
        assert {started[x].input.get("target"): d.disposition for x, d in done.items()} == {
            "alpha": "succeeded",
            "beta": "succeeded",
            None: "succeeded",
        }
        assert not (await check(journal, "s")).problems
    alpha, beta, added = results(model.requests[1])
    assert texts(alpha) == "not launched (accept)"
    assert texts(beta) == "launched beta (b)"
    assert texts(added) == "3"
    assert sorted(calls_of(calls)) == ["add", "launch", "launch", "launch", "launch"]


@pytest.mark.parametrize(
    ("kind", "answer", "expected"),
    [
        ("name", "Ada Lovelace", "name='Ada Lovelace'"),
        ("name", '"quoted"', "name='quoted'"),
        ("name", "42", "name='42'"),
        ("count", "42", "count=42"),
        ("go", "yes", "go=True"),
        ("go", "true", "go=True"),
        ("go", "no", "go=False"),
        ("count", "many", "no count (cancel)"),
    ],
)
async def test_a_one_field_question_takes_a_plain_answer(
    tmp_path: Path, kind: str, answer: str, expected: str
) -> None:
    model = calling(ToolCall(name="srv__ask", input={"kind": kind}))
    server = stdio_server(tmp_path / "calls.jsonl", permission="allow")
    definition = LoopDefinition(name="m", model=model, toolsets=[server])
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("ask")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert gate.prompt.startswith(f"which {kind}?")
            await s.answer(gate.gate_id, answer)
            await s.wait_idle()
    (result,) = results(model.requests[1])
    assert texts(result) == expected
