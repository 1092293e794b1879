"""The console tests' agent: a scripted brain whose reply depends on what the
person said, so one definition shows every thing the console must show.

``loopruntime host --definitions tests.console.scenario:definitions`` runs it
in a host process; the HTTP tests run it in a ``Host`` of their own.

* "weather ..." two ``forecast`` calls in parallel;
* "stream ..."  a long reply streamed in small chunks, slowly (model.output records);
* "book ..."    ``book_table``, which asks permission (a permission gate);
* "ask ..."     ``choose``, which asks a question with choices (a question gate);
* "charge ..."  ``charge``, which never returns and has a 5 s deadline (an unknown effect);
* "invoice ..." ``send_invoice``, which never returns (the host is SIGKILLed in it);
* "page ..."    ``fetch_page``, whose result holds markup (it must be shown as text);
* anything else is echoed.

The ``gates`` definition shows the gate kinds and decisions beyond those:

* "form ..."    ``ship``, which asks a form (``Parcel``: a ``<script>`` in its
  title's description and a field's description);
* "url ..."     ``connect``, which asks to open a URL holding markup characters;
* "code ..."    ``connect_code``, the same asking for a value back;
* "deploy ..."  ``deploy``, which a classifier reviews (``ask``) before its
  permission gate opens;
* "wipe ..."    ``wipe``, which a hook denies;
* "load ..."    ``load_tools`` loading the deferred ``atlas``.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import trio

from journal.content import Text, ToolResult
from loopruntime import (
    BeforeTool,
    Deny,
    LoopDefinition,
    ModelRequest,
    PermissionRequest,
    Review,
    ToolContext,
    classifier,
    hook,
    tool,
)
from loopruntime.models import Reply, ScriptedModel, ToolCall

__all__ = [
    "HOSTILE",
    "HOSTILE_URL",
    "STREAMED",
    "Parcel",
    "definition",
    "definitions",
    "gates_definition",
]

STREAMED = (
    "Here is a long answer that arrives a few characters at a time, so a page that "
    "watches the journal sees it grow before the message is committed."
)
HOSTILE = "<script>document.title='owned'</script><b id=\"bold\">not bold</b>"


@tool(permission="allow", concurrency="parallel")
async def forecast(ctx: ToolContext, *, city: str) -> str:
    """Today's weather for a city."""
    return {"Paris": "Paris: 14°C, light rain.", "Oslo": "Oslo: -3°C, clear skies."}.get(
        city, f"{city}: no forecast."
    )


@tool(permission="ask")
async def book_table(ctx: ToolContext, *, place: str) -> str:
    """Book a table (asks first)."""
    return f"Table booked at {place}."


@tool(permission="allow")
async def choose(ctx: ToolContext, *, what: str) -> str:
    """Ask the person to choose."""
    picked = await ctx.ask_user(f"Which {what}?", ["red", "blue"])
    return f"picked {picked}"


@tool(permission="allow", timeout=5)
async def charge(ctx: ToolContext, *, amount: int) -> str:
    """Charge a card; never answers (its deadline leaves the outcome unknown)."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


@tool(permission="allow")
async def send_invoice(ctx: ToolContext, *, customer: str) -> str:
    """Send an invoice; never answers (the test kills the host in it)."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


@tool(permission="allow")
async def fetch_page(ctx: ToolContext, *, url: str) -> str:
    """A page's text, markup and all."""
    return HOSTILE


def _brain(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    results = [b for b in last.blocks if isinstance(b, ToolResult)]
    if results:
        texts = [" ".join(c.text for c in r.content if isinstance(c, Text)) for r in results]
        return Reply(text="Done: " + " ".join(texts))
    said = " ".join(b.text for b in last.blocks if isinstance(b, Text))
    word = said.split(" ", 1)[0].lower()
    if word == "stream":
        return Reply(text=STREAMED, chunk_size=6, chunk_delay=0.15)
    calls = {
        "book": ToolCall(name="book_table", input={"place": "Chez Loop"}),
        "ask": ToolCall(name="choose", input={"what": "colour"}),
        "charge": ToolCall(name="charge", input={"amount": 120}),
        "invoice": ToolCall(name="send_invoice", input={"customer": "ACME"}),
        "page": ToolCall(name="fetch_page", input={"url": "https://example.org"}),
    }
    if word in calls:
        return Reply(tool_calls=[calls[word]])
    if word == "weather":
        return Reply(
            text="Let me check both cities at once.",
            tool_calls=[
                ToolCall(name="forecast", input={"city": "Paris"}),
                ToolCall(name="forecast", input={"city": "Oslo"}),
            ],
        )
    return Reply(text=f"echo: {said}")


def definition() -> LoopDefinition:
    return LoopDefinition(
        name="console",
        model=ScriptedModel(_brain, name="scripted:console"),
        system="You are a helpful assistant.",
        tools=[forecast, book_table, choose, charge, send_invoice, fetch_page],
    )


# -- the gates definition ----------------------------------------------------------

HOSTILE_URL = 'https://auth.example.org/consent?next="><script>alert(1)</script>&x=<b>'
"""An http(s) URL the runtime accepts (no spaces) holding markup characters."""


class Parcel(msgspec.Struct):
    """Where the parcel goes. <script>document.title='owned'</script>"""

    city: Annotated[str, msgspec.Meta(description="<script>alert('city')</script> the city")]
    zip: int
    express: bool = False
    size: Literal["small", "large"] = "small"
    note: str | None = None
    tags: list[str] = []


@tool(permission="allow")
async def ship(ctx: ToolContext, *, item: str) -> str:
    """Ship an item (asks where, as a form)."""
    parcel = await ctx.ask_form(f"Where should the {item} go?", Parcel)
    express = " express" if parcel.express else ""
    return f"shipped {item} to {parcel.city} {parcel.zip} ({parcel.size}{express})"


@tool(permission="allow")
async def connect(ctx: ToolContext, *, service: str) -> str:
    """Connect a service (a person opens its consent page)."""
    answer = await ctx.ask_open_url(f"Allow access to {service}", HOSTILE_URL)
    return f"connected {service} ({answer})"


@tool(permission="allow")
async def connect_code(ctx: ToolContext, *, service: str) -> str:
    """Connect a service whose page gives a code back."""
    code = await ctx.ask_open_url(f"Allow {service}, then paste its code", HOSTILE_URL, value=True)
    return f"connected {service} with code {code}"


@tool(permission="ask")
async def deploy(ctx: ToolContext, *, target: str) -> str:
    """Deploy (a classifier looks first, then a person)."""
    return f"deployed to {target}"


@tool(permission="allow")
async def wipe(ctx: ToolContext, *, disk: str) -> str:
    """Wipe a disk (a hook never lets it run)."""
    raise AssertionError("the guard hook denies every wipe")


@tool(permission="allow", deferred=True)
async def atlas(ctx: ToolContext, *, place: str) -> str:
    """Where a place is (deferred: loaded on demand)."""
    return f"{place} is on the map"


@classifier(name="rules")
def rules(request: PermissionRequest) -> Review:
    return Review("ask", f"{request.tool} to {request.input.get('target')} needs a person")


@hook("before_tool", name="guard")
async def guard(call: BeforeTool) -> Deny | None:
    return Deny("wiping disks is not allowed here") if call.tool == "wipe" else None


def _gates_brain(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    results = [b for b in last.blocks if isinstance(b, ToolResult)]
    if results:
        texts = [" ".join(c.text for c in r.content if isinstance(c, Text)) for r in results]
        return Reply(text="Done: " + " ".join(texts))
    said = " ".join(b.text for b in last.blocks if isinstance(b, Text))
    word = said.split(" ", 1)[0].lower()
    calls = {
        "form": ToolCall(name="ship", input={"item": "lamp"}),
        "url": ToolCall(name="connect", input={"service": "CRM"}),
        "code": ToolCall(name="connect_code", input={"service": "bank"}),
        "deploy": ToolCall(name="deploy", input={"target": "prod"}),
        "wipe": ToolCall(name="wipe", input={"disk": "sda"}),
        "load": ToolCall(name="load_tools", input={"names": ["atlas"]}),
    }
    if word in calls:
        return Reply(tool_calls=[calls[word]])
    return Reply(text=f"echo: {said}")


def gates_definition() -> LoopDefinition:
    return LoopDefinition(
        name="gates",
        model=ScriptedModel(_gates_brain, name="scripted:gates"),
        system="You are a careful assistant.",
        tools=[ship, connect, connect_code, deploy, wipe, atlas],
        classifiers=[rules],
        hooks=[guard],
    )


def definitions() -> dict[str, LoopDefinition]:
    return {"console": definition(), "gates": gates_definition()}
