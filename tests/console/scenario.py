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
"""

from __future__ import annotations

import trio

from journal.content import Text, ToolResult
from loopruntime import LoopDefinition, ModelRequest, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall

__all__ = ["HOSTILE", "STREAMED", "definition", "definitions"]

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


def definitions() -> dict[str, LoopDefinition]:
    return {"console": definition()}
