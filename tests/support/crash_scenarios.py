"""The small crash scenarios, and the loop definitions the killed child and the restoring
test share.

Rules: a scenario is an async function of string arguments, run in a child process by
``tests.support.crash_child``; it creates its session on the journal at ``url`` and calls
``ready`` when it reaches its kill point, then waits to be killed.  The test restores with
a definition from here, so both processes run loops of the same name, tools and limits.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import msgspec
import trio

from journal import Record, open_journal
from journal.content import Message, Text, ToolResult
from journal.events import (
    GateOpened,
    InputQueued,
    ModelOutput,
    SteerQueued,
    TurnEnded,
    TurnStarted,
)
from loopruntime import (
    AfterTool,
    BeforeTool,
    Delegate,
    Limits,
    LoopDefinition,
    PermissionRequest,
    ReplaceResult,
    Review,
    Rewrite,
    ToolContext,
    hook,
    tool,
)
from loopruntime.model import Model, ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.crash_points import KillingJournal
from tests.support.processes import ready

# -- a loop with one tool per kind of in-flight work -----------------------------------


def record_effect(side: Path, **fields: object) -> None:
    with side.open("a") as f:
        f.write(json.dumps(fields) + "\n")
        f.flush()


def effects(side: Path) -> list[dict[str, object]]:
    """Every tool effect the side file recorded, in order (what ran, and how often)."""
    if not side.exists():
        return []
    return [json.loads(line) for line in side.read_text().splitlines() if line]


class Shipping(msgspec.Struct, forbid_unknown_fields=True):
    """The form the ``form`` scenario's tool asks for."""

    city: str
    zip: int


def definition(scenario: str, side: Path, replies: list[Reply]) -> LoopDefinition:
    @tool(permission="ask")
    async def deploy(ctx: ToolContext, *, target: str) -> str:
        """Deploy (needs approval)."""
        record_effect(side, tool="deploy", execution=ctx.execution_id)
        return f"deployed {target}"

    @tool(permission="allow", resumable=True)
    async def confirm(ctx: ToolContext, *, question: str) -> str:
        """Ask, then act on the answer (resumable)."""
        record_effect(side, tool="confirm", phase="entered", execution=ctx.execution_id)
        answer = await ctx.ask_user(question, choices=["yes", "no"])
        record_effect(side, tool="confirm", phase="acted", execution=ctx.execution_id)
        return f"user said {answer}"

    @tool(permission="allow")
    async def charge(ctx: ToolContext, *, amount: int) -> str:
        """Charge a card (not replay-safe)."""
        record_effect(side, tool="charge", execution=ctx.execution_id)
        ready()
        await trio.sleep(3600)
        return f"charged {amount}"

    @tool(permission="allow", replay_safe=True)
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page (idempotent: safe to run again)."""
        record_effect(side, tool="fetch", execution=ctx.execution_id)
        if len(effects(side)) == 1:
            ready()
            await trio.sleep(3600)
        return f"contents of {url}"

    @tool(permission="allow", resumable=True)
    async def ship(ctx: ToolContext, *, item: str) -> str:
        """Ask for an address with a form, then ship (resumable)."""
        record_effect(side, tool="ship", phase="entered", execution=ctx.execution_id)
        address = await ctx.ask_form(f"Where should {item} go?", Shipping)
        record_effect(side, tool="ship", phase="acted", execution=ctx.execution_id)
        return f"{item} shipped to {address.city} {address.zip}"

    @tool(permission="allow")
    async def survey(ctx: ToolContext, *, question: str) -> str:
        """Ask, then act (NOT resumable)."""
        record_effect(side, tool="survey", execution=ctx.execution_id)
        answer = await ctx.ask_user(question)
        return f"survey says {answer}"

    return LoopDefinition(
        name=f"crash-{scenario}",
        model=ScriptedModel(replies),
        tools=[deploy, confirm, charge, fetch, survey, ship],
    )


SCRIPTS: dict[str, list[Reply]] = {
    "stream": [Reply(text="a long streamed reply " * 20, chunk_size=4, chunk_delay=0.05)],
    "permission": [Reply(tool_calls=[ToolCall(name="deploy", input={"target": "prod"})])],
    "question": [Reply(tool_calls=[ToolCall(name="confirm", input={"question": "go?"})])],
    "effect": [Reply(tool_calls=[ToolCall(name="charge", input={"amount": 7})])],
    "replay": [Reply(tool_calls=[ToolCall(name="fetch", input={"url": "https://example.org"})])],
    "survey": [Reply(tool_calls=[ToolCall(name="survey", input={"question": "why?"})])],
    "form": [Reply(tool_calls=[ToolCall(name="ship", input={"item": "a lamp"})])],
    "steer": [Reply(tool_calls=[ToolCall(name="deploy", input={"target": "staging"})])],
}
"""The model's replies in the child, per scenario: each one's first turn."""

Reaction = Callable[[Session, object], Awaitable[None]]
"""What a tools scenario does with each event its session publishes."""


async def _tools(
    scenario: str, url: str, session_id: str, side: str, react: Reaction | None = None
) -> None:
    async with open_journal(url) as journal:
        d = definition(scenario, Path(side), SCRIPTS[scenario])
        async with Session.create(journal, d, session_id=session_id) as s:
            await s.submit(f"run the {scenario} scenario")
            async for record in s.subscribe():
                if react is not None:
                    await react(s, getattr(record, "event", None))
            await trio.sleep_forever()


def _ready_at(kind: type) -> Reaction:
    async def react(s: Session, event: object) -> None:
        if isinstance(event, kind):
            ready()

    return react


async def stream(url: str, session_id: str, side: str) -> None:
    """Killed while a reply streams."""
    await _tools("stream", url, session_id, side, _ready_at(ModelOutput))


async def permission(url: str, session_id: str, side: str) -> None:
    """Killed while a tool call waits at its permission gate."""
    await _tools("permission", url, session_id, side, _ready_at(GateOpened))


async def question(url: str, session_id: str, side: str) -> None:
    """Killed while a resumable tool waits on its question to the user."""
    await _tools("question", url, session_id, side, _ready_at(GateOpened))


async def form(url: str, session_id: str, side: str) -> None:
    """Killed while a resumable tool waits on the form it asked for."""
    await _tools("form", url, session_id, side, _ready_at(GateOpened))


async def survey(url: str, session_id: str, side: str) -> None:
    """Killed while a tool that is not resumable waits on its question."""
    await _tools("survey", url, session_id, side, _ready_at(GateOpened))


async def effect(url: str, session_id: str, side: str) -> None:
    """Killed while a tool that is not replay-safe runs (the tool says READY)."""
    await _tools("effect", url, session_id, side)


async def replay(url: str, session_id: str, side: str) -> None:
    """Killed while a replay-safe tool runs (the tool says READY)."""
    await _tools("replay", url, session_id, side)


async def steer(url: str, session_id: str, side: str) -> None:
    """Killed with steering queued while the turn waits at a permission gate."""

    async def react(s: Session, event: object) -> None:
        if isinstance(event, GateOpened):
            await s.steer("deploy carefully")
        if isinstance(event, SteerQueued):
            ready()

    await _tools("steer", url, session_id, side, react)


# -- a call reviewed by a classifier and rewritten by hooks, killed while it runs ----------


def hooks_definition(side: Path, replies: list[Reply]) -> LoopDefinition:
    """A replay-safe ``fetch`` that needs approval: a classifier allows it, a
    before_tool hook moves its url to a mirror, an after_tool hook marks its
    result; each notes in ``side`` when it runs.  The first run of the tool
    ever says READY and waits to be killed."""

    @tool(permission="ask", replay_safe=True)
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page (idempotent)."""
        first = not any(e.get("tool") == "fetch" for e in effects(side))
        record_effect(side, tool="fetch", execution=ctx.execution_id, url=url)
        if first:
            ready()
            await trio.sleep(3600)
        return f"contents of {url}"

    def mirrors(request: PermissionRequest) -> Review:
        record_effect(side, hook="classifier", call=request.tool_use_id)
        return Review("allow", "reads from the mirror are safe")

    @hook("before_tool")
    async def mirror(call: BeforeTool) -> Rewrite:
        record_effect(side, hook="before_tool", call=call.tool_use_id)
        return Rewrite({"url": call.input["url"].replace("example.org", "mirror.example.org")})

    @hook("after_tool")
    async def stamp(call: AfterTool) -> ReplaceResult:
        record_effect(side, hook="after_tool", call=call.tool_use_id)
        text = " ".join(b.text for b in call.content if isinstance(b, Text))
        return ReplaceResult(f"[checked] {text}")

    return LoopDefinition(
        name="crash-hooks",
        model=ScriptedModel(replies),
        tools=[fetch],
        classifiers=[mirrors],
        hooks=[mirror, stamp],
    )


HOOKS_SCRIPT = [Reply(tool_calls=[ToolCall(name="fetch", input={"url": "https://example.org"})])]


async def hooks(url: str, session_id: str, side: str) -> None:
    """Killed while the reviewed, rewritten call runs (the tool says READY)."""
    async with open_journal(url) as journal:
        d = hooks_definition(Path(side), HOOKS_SCRIPT)
        async with Session.create(journal, d, session_id=session_id) as s:
            await s.submit("read the page")
            await trio.sleep_forever()


# -- a lead with three researchers -------------------------------------------------------


def team(lead_replies: list[Reply], researcher_reply: Reply) -> LoopDefinition:
    researcher = LoopDefinition(
        name="researcher", model=ScriptedModel(lambda _request: researcher_reply)
    )
    return LoopDefinition(
        name="lead",
        model=ScriptedModel(lead_replies),
        delegates=[
            Delegate(name="research", description="Research one topic", definition=researcher)
        ],
    )


SLOW = Reply(text="researching slowly " * 30, chunk_size=3, chunk_delay=0.05)
FAN_OUT = Reply(
    tool_calls=[ToolCall(name="research", input={"task": f"topic {i}"}) for i in range(3)]
)


async def delegation(url: str, session_id: str) -> None:
    """Killed once the lead's three researchers, started in parallel, all stream."""
    async with open_journal(url) as journal:
        async with Session.create(journal, team([FAN_OUT], SLOW), session_id=session_id) as s:
            await s.submit("research three topics")
            streaming: set[str] = set()
            async for record in s.subscribe():
                if isinstance(getattr(record, "event", None), ModelOutput) and "/" in record.loop:
                    streaming.add(record.loop)
                    if len(streaming) == 3:
                        ready()
            await trio.sleep_forever()


# -- a compaction that never finishes ----------------------------------------------------


class HangingCompactor:
    """Announces that it runs, then never returns."""

    async def summarize(
        self, messages: Sequence[Message], obligations: Sequence[str], *, model: Model
    ) -> str:
        ready()
        await trio.sleep_forever()
        raise AssertionError("unreachable")


def compaction_definition(model: ScriptedModel, compactor: object) -> LoopDefinition:
    """The definition both processes use (same name, same limits)."""
    return LoopDefinition(
        name="crash-compaction",
        model=model,
        limits=Limits(retained_exchanges=1),
        compactor=compactor,  # type: ignore[arg-type]
    )


async def compaction(url: str, session_id: str) -> None:
    """Two exchanges, then a compaction: killed once the compactor works (so
    ``compaction.started`` is durable)."""
    d = compaction_definition(
        ScriptedModel([Reply(text="a1"), Reply(text="a2")]), HangingCompactor()
    )
    async with open_journal(url) as journal:
        async with Session.create(journal, d, session_id=session_id) as s:
            for text in ("u1", "u2"):
                await s.submit(text)
                await s.wait_idle()
            await s.compact()
            await trio.sleep_forever()


# -- deadlines that pass in the middle of tool calls --------------------------------------
#
# ``deadline WORKDIR [KILL_AFTER]`` runs three requests from nothing, each with a tool call
# cut by its deadline (a transfer whose outcome becomes unknown, a replay-safe lookup that
# runs again, an atomic reservation that fails visibly), SIGKILLing itself right after
# append KILL_AFTER; ``deadline-restore WORKDIR`` restores whatever the journal holds and
# drives the requests to their end.  The deadlines are real time in the child: short.

DEADLINE_SESSION = "crash-deadline"
TOOL_DEADLINE = 0.2
"""Seconds: the deadline of every tool of the scenario."""
DEADLINE_STEPS = ("transfer 5 EUR", "look up the rate", "reserve a seat")
HOST_RESOLUTION = "the bank shows the transfer"


def deadline_url(workdir: Path) -> str:
    return "sqlite:///" + str(workdir / "journal.db")


def deadline_definition(side: Path) -> LoopDefinition:
    @tool(permission="allow", timeout=TOOL_DEADLINE)
    async def transfer(ctx: ToolContext, *, amount: int) -> str:
        """Move money (not replay-safe); this one never returns."""
        record_effect(side, tool="transfer", execution=ctx.execution_id)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @tool(permission="allow", timeout=TOOL_DEADLINE, replay_safe=True)
    async def lookup(ctx: ToolContext, *, what: str) -> str:
        """Read a rate (idempotent): its first run ever hangs, later ones answer."""
        first = not any(e["tool"] == "lookup" for e in effects(side))
        record_effect(side, tool="lookup", execution=ctx.execution_id)
        if first:
            await trio.sleep_forever()
        return f"{what}: 1.08"

    @tool(permission="allow", timeout=TOOL_DEADLINE, atomic=True)
    async def reserve(ctx: ToolContext, *, seat: str) -> str:
        """Reserve a seat (all or nothing); this one never returns."""
        record_effect(side, tool="reserve", execution=ctx.execution_id)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def brain(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        results = [b for b in last.blocks if isinstance(b, ToolResult)]
        if results:
            said = [" ".join(c.text for c in r.content if isinstance(c, Text)) for r in results]
            return Reply(text="Done: " + " ".join(said))
        said = " ".join(b.text for b in last.blocks if isinstance(b, Text))
        if "transfer" in said:
            return Reply(tool_calls=[ToolCall(name="transfer", input={"amount": 5})])
        if "rate" in said:
            return Reply(tool_calls=[ToolCall(name="lookup", input={"what": "EUR/USD"})])
        return Reply(tool_calls=[ToolCall(name="reserve", input={"seat": "12A"})])

    return LoopDefinition(
        name="crash-deadline",
        model=ScriptedModel(brain, name="scripted:deadline"),
        tools=[transfer, lookup, reserve],
    )


def deadline_step_done(records: list[Record], text: str) -> bool | None:
    """True once a turn that took the request ``text`` completed; None while
    it is queued or running; False when it was never asked or its last turn
    ended otherwise (a crash mid-reply ends a turn ``crashed``)."""
    ids = {
        r.event.input_id
        for r in records
        if isinstance(r.event, InputQueued)
        and any(isinstance(b, Text) and b.text == text for m in r.event.messages for b in m.blocks)
    }
    if not ids:
        return False
    outcome: str | None = None
    mine = False
    for r in records:
        if isinstance(r.event, TurnStarted):
            mine = bool(ids & set(r.event.input_ids))
            if mine:
                outcome = None
        elif isinstance(r.event, TurnEnded) and mine:
            outcome, mine = r.event.outcome, False
    if outcome is None:
        return None
    return outcome == "completed"


async def _drive_deadlines(s: Session) -> None:
    for step in DEADLINE_STEPS:
        for _ in range(5):
            while True:
                await s.wait_idle()
                state = await s.snapshot()
                if not state.unknown_effects:
                    break
                for started in state.unknown_effects:
                    await s.resolve(started.execution_id, HOST_RESOLUTION)
            done = deadline_step_done([r async for r in s.journal.read(s.id)], step)
            if done:
                break
            if done is False:
                await s.submit(step)
        else:
            raise RuntimeError(f"scenario step {step!r} did not complete")


async def deadline(workdir: str, kill_after: str | None = None) -> None:
    """The deadline scenario from nothing, SIGKILLed after append ``kill_after`` if given."""
    path = Path(workdir)
    async with open_journal(deadline_url(path)) as real:
        journal = KillingJournal(real, path, None if kill_after is None else int(kill_after))
        d = deadline_definition(path / "effects.jsonl")
        async with Session.create(journal, d, session_id=DEADLINE_SESSION) as s:
            await _drive_deadlines(s)
        (path / "appends").write_text(str(journal.appends))


async def deadline_restore(workdir: str) -> None:
    """The deadline scenario restored from whatever the journal holds, to its end."""
    path = Path(workdir)
    async with open_journal(deadline_url(path)) as journal:
        d = deadline_definition(path / "effects.jsonl")
        async with Session.restore(journal, DEADLINE_SESSION, d) as s:
            await _drive_deadlines(s)


# -- a call to an MCP server in flight -------------------------------------------------


def mcp_definition(workdir: Path, replies: list[Reply]) -> LoopDefinition:
    """A loop whose one tool source is the MCP test server (tests/support/mcp_server.py)."""
    from tests.support.mcp_servers import stdio_server

    return LoopDefinition(
        name="mcp",
        model=ScriptedModel(replies),
        toolsets=[stdio_server(workdir / "calls.jsonl", permission="allow")],
    )


async def mcp(url: str, session_id: str, workdir: str) -> None:
    """Killed while the MCP server runs a call (the server said so through
    the FIFO ``signal``; its pid is left in ``server.pid`` for the parent)."""
    from tests.support.mcp_servers import Signal

    work = Path(workdir)
    fifo = Signal(work / "signal")
    call = ToolCall(name="srv__hang", input={"signal": str(fifo.path)})
    async with open_journal(url) as journal:
        async with Session.create(
            journal, mcp_definition(work, [Reply(tool_calls=[call])]), session_id=session_id
        ) as s:
            await s.submit("start the job")
            pid = await fifo.wait()
            (work / "server.pid").write_text(str(pid))
            ready()
            await trio.sleep_forever()


CONSENT = "https://auth.example.org/consent?client=loop&state=abc"
"""The page the ``mcp-url`` scenario's server asks the person to open."""


def mcp_url_definition(workdir: Path, replies: list[Reply], resumable: bool) -> LoopDefinition:
    """The MCP test server's loop, its server ``resumable`` or not."""
    from tests.support.mcp_servers import stdio_server

    server = stdio_server(workdir / "calls.jsonl", permission="allow", resumable=resumable)
    return LoopDefinition(name="mcp", model=ScriptedModel(replies), toolsets=[server])


async def mcp_url(url: str, session_id: str, workdir: str, resumable: str) -> None:
    """Killed while the MCP server's page to open (URL-mode elicitation)
    waits at its gate; ``resumable``: "yes" or "no"."""
    call = ToolCall(name="srv__authorize", input={"service": "crm", "url": CONSENT})
    d = mcp_url_definition(Path(workdir), [Reply(tool_calls=[call])], resumable == "yes")
    async with open_journal(url) as journal:
        async with Session.create(journal, d, session_id=session_id) as s:
            await s.submit("authorize")
            async for record in s.subscribe():
                if isinstance(getattr(record, "event", None), GateOpened):
                    ready()
            await trio.sleep_forever()


# -- deploys: a definition that changed, a model chosen by command ----------------------


def deploy_definition(model: str, *, delay: float = 0.0) -> LoopDefinition:
    """The loop of the deploy scenarios: ``model`` is its model's name, and
    ``model-alt`` is registered beside it (both answer the same way)."""

    def reply(request: ModelRequest) -> Reply:
        return Reply(text=f"answer {len(request.messages)} " * 4, chunk_size=4, chunk_delay=delay)

    return LoopDefinition(
        name="deployed",
        model=ScriptedModel(reply, name=model),
        system="You answer.",
        models=[ScriptedModel(reply, name="model-alt")],
    )


async def reconfigure(url: str, session_id: str) -> None:
    """A deploy restores the session under ``model-b``: killed once its
    ``loop.reconfigured`` is durable, before any turn ran under it."""
    async with open_journal(url) as journal:
        async with Session.restore(journal, session_id, deploy_definition("model-b")):
            ready()
            await trio.sleep_forever()


async def inference(url: str, session_id: str) -> None:
    """Another model is chosen while a reply streams: killed once the choice
    is durable, before the turn it is for."""
    async with open_journal(url) as journal:
        d = deploy_definition("model-a", delay=0.05)
        async with Session.create(journal, d, session_id=session_id) as s:
            await s.submit("first")
            async for record in s.subscribe():
                if isinstance(getattr(record, "event", None), ModelOutput):
                    await s.change_inference(model="model-alt")
                    ready()
                    break
            await trio.sleep_forever()


async def live_host(url: str, session_id: str) -> None:
    """A host running the session: one turn, READY; then, on a line from
    stdin, another turn, READY again (it would fail if it had been fenced)."""
    async with open_journal(url) as journal:
        d = deploy_definition("model-a")
        async with Session.create(journal, d, session_id=session_id) as s:
            await s.submit("first")
            await s.wait_idle()
            ready()
            stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
            await stdin.receive_some()
            await s.submit("second")
            await s.wait_idle()
            ready()
            await trio.sleep_forever()
