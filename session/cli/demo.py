"""The demo: a scripted agent on the embedded SQLite journal, no API key.

It shows what the runtime is for, for real: parallel tools, a permission
gate, a crash (a child *process* killed with SIGKILL while a tool runs), the
restore that follows, the unknown effect the host resolves, a deploy that
changed the system prompt (recorded as ``loop.reconfigured``), and the
journal check.  Every reply comes from a deterministic scripted brain.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import TextIO

import trio

from journal import open_journal
from journal.content import Text, ToolResult
from journal.events import Notice
from loopruntime import LoopDefinition, ModelRequest, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall

from ..embedded.runtime import Session
from ..replay import check, render_transcript

__all__ = ["demo_definition", "run_demo"]

_FORECASTS = {"Paris": "14°C, light rain", "Oslo": "-3°C, clear skies"}


def _brain(request: ModelRequest) -> Reply:
    """Replies as a function of the conversation, so a restored process
    answers exactly as the original would have."""
    last = request.messages[-1]
    results = [b for b in last.blocks if isinstance(b, ToolResult)]
    if results:
        texts = [" ".join(c.text for c in r.content if isinstance(c, Text)) for r in results]
        return Reply(text="Done. " + " ".join(texts), chunk_size=12)
    said = " ".join(b.text for b in last.blocks if isinstance(b, Text)).lower()
    if "weather" in said:
        return Reply(
            text="Let me check both cities at once.",
            tool_calls=[
                ToolCall(name="forecast", input={"city": "Paris"}),
                ToolCall(name="forecast", input={"city": "Oslo"}),
            ],
        )
    if "book" in said:
        return Reply(
            text="I'll book it; that needs your approval.",
            tool_calls=[ToolCall(name="book_table", input={"place": "Chez Loop", "people": 2})],
        )
    if "invoice" in said:
        return Reply(
            text="Sending the invoice now.",
            tool_calls=[ToolCall(name="send_invoice", input={"customer": "ACME", "amount": 120})],
        )
    return Reply(text="I can check the weather, book a table, or send an invoice.")


DEPLOYED_SYSTEM = "You are a helpful assistant. Answer in one short sentence."
"""The system prompt of the demo's second deploy."""


def demo_definition(workdir: Path, system: str = "You are a helpful assistant.") -> LoopDefinition:
    ledger = workdir / "invoices.log"

    @tool(permission="allow", concurrency="parallel", replay_safe=True)
    async def forecast(ctx: ToolContext, *, city: str) -> str:
        """Today's weather for a city."""
        await trio.sleep(0.05)
        return f"{city}: {_FORECASTS.get(city, 'unknown')}."

    @tool(permission="ask")
    async def book_table(ctx: ToolContext, *, place: str, people: int) -> str:
        """Book a restaurant table (asks the user first)."""
        return f"Table for {people} booked at {place}."

    @tool(permission="allow")
    async def send_invoice(ctx: ToolContext, *, customer: str, amount: int) -> str:
        """Send an invoice (not idempotent: never re-run it blindly)."""
        with ledger.open("a") as f:
            f.write(json.dumps({"execution": ctx.execution_id, "customer": customer}) + "\n")
        # The demo's crash happens here: the invoice went out, the result
        # never came back.
        print("TOOL_RUNNING", flush=True)
        await trio.sleep(3600)
        return f"Invoice for {amount} EUR sent to {customer}."

    return LoopDefinition(
        name="demo",
        model=ScriptedModel(_brain, name="scripted:demo"),
        system=system,
        tools=[forecast, book_table, send_invoice],
    )


async def _child(url: str, session_id: str, workdir: Path) -> None:
    """The process that is killed: it asks for the invoice and dies in the tool."""
    async with open_journal(url) as journal:
        async with Session.restore(journal, session_id, demo_definition(workdir)) as s:
            await s.submit("Please send the invoice to ACME.")
            await trio.sleep_forever()


def _say(out: TextIO, text: str) -> None:
    print(f"\n== {text}", file=out, flush=True)


async def run_demo(url: str, workdir: Path, out: TextIO = sys.stdout) -> int:
    definition = demo_definition(workdir)
    async with open_journal(url) as journal:
        async with Session.create(journal, definition) as s:
            session_id = s.id
            _say(out, f"session {session_id} on {url}")
            _say(out, "user: What's the weather in Paris and Oslo?  (two tools run in parallel)")
            await s.submit("What's the weather in Paris and Oslo?")
            await s.wait_idle()
            _say(out, "user: Book a table for two.  (the tool needs approval: a gate opens)")
            await s.submit("Book a table for two.")
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
            _say(out, f"gate {gate.gate_id}: {gate.prompt} -> the demo approves it once")
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()

    _say(out, "a child process restores the session, calls send_invoice, and is killed (SIGKILL)")
    child = await trio.lowlevel.open_process(
        [sys.executable, "-m", "session.cli.demo", "--child", url, session_id, str(workdir)],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    said = b""
    while b"\n" not in said:
        chunk = await child.stdout.receive_some()
        if not chunk:
            break
        said += chunk
    if said.strip() != b"TOOL_RUNNING":
        child.kill()
        await child.wait()
        print(f"demo: the child process did not reach the tool (said {said!r})", file=out)
        return 1
    child.send_signal(signal.SIGKILL)
    await child.wait()

    _say(out, "restore in this process: the invoice call is an unknown effect, never re-run")
    async with open_journal(url) as journal:
        async with Session.restore(journal, session_id, definition) as s:
            state = await s.snapshot()
            notices = [
                r.event
                async for r in journal.read(session_id)
                if isinstance(r.event, Notice) and r.event.code == "unknown_effects"
            ]
            for notice in notices:
                print(f"notice: {notice.text}", file=out)
            [unknown] = state.unknown_effects
            ledger = (workdir / "invoices.log").read_text().splitlines()
            sent = any(json.loads(x)["execution"] == unknown.execution_id for x in ledger)
            verdict = "the ledger shows it was sent" if sent else "the ledger shows nothing"
            _say(out, f"the host checks its ledger: {verdict}; it resolves the call")
            await s.resolve(
                unknown.execution_id,
                "Invoice for 120 EUR sent to ACME (confirmed from the ledger)."
                if sent
                else "The invoice was not sent.",
            )
            await s.wait_idle()
            await s.verify()

        _say(out, "a deploy changes the system prompt: restore records the change and goes on")
        deployed = demo_definition(workdir, system=DEPLOYED_SYSTEM)
        async with Session.restore(journal, session_id, deployed) as s:
            await s.submit("Thanks!")
            await s.wait_idle()
            await s.verify()

        _say(out, "the journal, as the replay tool shows it")
        records = [r async for r in journal.read(session_id)]
        print(render_transcript(records, color=out.isatty()), file=out)
        report = await check(journal, session_id)
        _say(out, f"journal check: {report.summary()}")
        return 0 if report.ok else 1


def _main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        trio.run(_child, sys.argv[2], sys.argv[3], Path(sys.argv[4]))
    else:
        print("usage: python -m session.cli.demo --child URL SESSION WORKDIR", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    _main()
