"""Gate kinds: forms (answers validated as a msgspec type) and URLs to open and
confirm; durable across a restart, answered through Session and the inbox."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing

from journal import open_journal
from journal.events import GateCancelled, GateOpened, GateResolved, ToolCompleted
from loopruntime import InvalidAnswerError, LoopDefinition, LoopStatus, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Client, CommandRefusedError, Host, Session
from session.replay import check, render_transcript
from tests.host.support import trio_clock_journal, wait_for
from tests.support.loops import events_of, records


class Address(msgspec.Struct, forbid_unknown_fields=True):
    city: str
    zip: int
    country: str = "NO"


entered: list[str] = []
asked = trio.Event()


@tool(permission="allow", resumable=True)
async def ship(ctx: ToolContext, *, item: str) -> str:
    """Ship an item to an address the person gives."""
    entered.append(ctx.execution_id)
    address = await ctx.ask_form(f"Where should {item} go?", Address)
    assert isinstance(address, Address)
    return f"{item} → {address.city} {address.zip} {address.country}"


@tool(permission="allow", resumable=True)
async def connect(ctx: ToolContext, *, service: str) -> str:
    """Connect an account."""
    code = await ctx.ask_open_url(
        f"Allow access to {service}", "https://auth.example.org/consent?c=1", value=True
    )
    return f"connected with {code}"


def loop_of(call: ToolCall, *rest: Reply) -> tuple[LoopDefinition, ScriptedModel]:
    model = ScriptedModel([Reply(tool_calls=[call]), *rest, Reply(text="done")])
    return LoopDefinition(name="shop", model=model, tools=[ship, connect]), model


def last_result(model: ScriptedModel) -> str:
    return model.requests[-1].messages[-1].blocks[0].content[0].text  # type: ignore[union-attr]


async def test_a_form_is_answered_with_typed_data_and_a_bad_answer_names_the_field(
    autojump_clock: object,
) -> None:
    d, model = loop_of(ToolCall(name="ship", input={"item": "a lamp"}))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("ship a lamp")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert gate.form is not None and gate.kind == "user_input"
            assert gate.form["properties"]["zip"] == {"type": "integer"}
            assert gate.form["required"] == ["city", "zip"]
            head = len(await records(journal, "s"))
            for bad, words in (
                ('{"city": "Oslo", "zip": "0150"}', r"Expected `int`, got `str` - at `\$.zip`"),
                ({"zip": 150}, r"missing required field `city`"),
                ("Oslo 0150", "is not JSON"),
                ({"city": "Oslo", "zip": 1, "planet": "Earth"}, "unknown field `planet`"),
            ):
                with pytest.raises(InvalidAnswerError, match=words):
                    await s.answer(gate.gate_id, bad)
            # Refused answers committed nothing; the gate is still open.
            assert len(await records(journal, "s")) == head
            assert (await s.snapshot()).status is LoopStatus.AWAITING_GATE
            await s.answer(gate.gate_id, {"city": "Oslo", "zip": 150}, principal="ann")
            await s.wait_idle()
            await s.verify()
        assert last_result(model) == "a lamp → Oslo 150 NO"
        (resolved,) = await events_of(journal, "s", GateResolved)
        # Recorded as the JSON of the value it validated as (defaults filled).
        assert msgspec.json.decode(resolved.answer) == {"city": "Oslo", "zip": 150, "country": "NO"}
        assert resolved.principal == "ann"
        text = render_transcript(await records(journal, "s"))
        assert f"? gate {gate.gate_id} (user_input, form fields city, country, zip)" in text
        assert "! answered by ann: " in text
        assert (await check(journal, "s")).ok


async def test_a_struct_answer_is_taken_as_its_data(autojump_clock: object) -> None:
    d, model = loop_of(ToolCall(name="ship", input={"item": "a chair"}))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("ship")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            await s.answer(gate.gate_id, Address(city="Bergen", zip=5003, country="SE"))
            await s.wait_idle()
    assert last_result(model) == "a chair → Bergen 5003 SE"


async def test_a_type_msgspec_cannot_describe_fails_the_call_before_any_gate(
    autojump_clock: object,
) -> None:
    @tool(permission="allow")
    async def odd(ctx: ToolContext) -> str:
        """Asks for something no form can hold."""
        return str(await ctx.ask_form("a callable?", complex))

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="odd")]), Reply(text="hm")])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="t", model=model, tools=[odd])) as s:
            await s.submit("go")
            await s.wait_idle()
        (completed,) = await events_of(journal, s.id, ToolCompleted)
        assert completed.disposition == "failed"
        assert "msgspec cannot describe" in completed.content[0].text  # type: ignore[union-attr]
        assert await events_of(journal, s.id, GateOpened) == []


async def test_a_url_gate_records_the_url_and_wants_its_value(autojump_clock: object) -> None:
    d, model = loop_of(ToolCall(name="connect", input={"service": "crm"}))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("connect the crm")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert (gate.url, gate.needs_value) == ("https://auth.example.org/consent?c=1", True)
            with pytest.raises(InvalidAnswerError, match="asks for a value with the confirmation"):
                await s.answer(gate.gate_id, "  ")
            with pytest.raises(InvalidAnswerError, match="must be text"):
                await s.answer(gate.gate_id, {"code": 1})
            await s.answer(gate.gate_id, "code-7f3")
            await s.wait_idle()
        assert last_result(model) == "connected with code-7f3"
        text = render_transcript(await records(journal, "s"))
        assert (
            "(user_input, open url): Allow access to crm → https://auth.example.org/consent?c=1"
            " (confirm with a value)"
        ) in text
        assert (await check(journal, "s")).ok


@pytest.mark.parametrize(
    "url", ["javascript:alert(1)", "/relative/path", "file:///etc/passwd", "https://a b.org/"]
)
async def test_a_url_that_is_not_an_http_address_fails_the_call(
    url: str, autojump_clock: object
) -> None:
    @tool(permission="allow")
    async def go(ctx: ToolContext) -> str:
        """Opens a page."""
        return await ctx.ask_open_url("open it", url)

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="go")]), Reply(text="hm")])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, LoopDefinition(name="t", model=model, tools=[go])) as s:
            await s.submit("go")
            await s.wait_idle()
        (completed,) = await events_of(journal, s.id, ToolCompleted)
        assert "is not an absolute http(s) URL" in completed.content[0].text  # type: ignore[union-attr]
        assert await events_of(journal, s.id, GateOpened) == []


async def test_an_open_form_survives_a_restart_and_still_checks_answers(tmp_path: Path) -> None:
    entered.clear()
    url = f"sqlite:///{tmp_path / 'j.db'}"
    d, _ = loop_of(ToolCall(name="ship", input={"item": "a desk"}))
    async with open_journal(url) as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("ship a desk")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
    d2 = LoopDefinition(name="shop", model=ScriptedModel([Reply(text="done")]), tools=[ship])
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", d2) as s:
            assert (await s.snapshot()).open_gates == [gate]
            with pytest.raises(InvalidAnswerError, match=r"at `\$.zip`"):
                await s.answer(gate.gate_id, {"city": "Oslo", "zip": "x"})
            assert (await s.snapshot()).open_gates == [gate]
            await s.answer(gate.gate_id, '{"city": "Tromsø", "zip": 9008}')
            await s.wait_idle()
            await s.verify()
        # Re-entered once after the restart; the same gate, never a second one.
        assert len(entered) == 2 and entered[0] == entered[1]
        assert len(await events_of(journal, "s", GateOpened)) == 1
        assert await events_of(journal, "s", GateCancelled) == []
        (completed,) = await events_of(journal, "s", ToolCompleted)
        assert completed.content[0].text == "a desk → Tromsø 9008 NO"  # type: ignore[union-attr]
        assert (await check(journal, "s")).ok


async def test_an_answer_before_the_restored_tool_asks_again_is_held(
    autojump_clock: object,
) -> None:
    release = trio.Event()
    runs: list[int] = []

    @tool(name="ship", permission="allow", resumable=True)
    async def slow_ship(ctx: ToolContext, *, item: str) -> str:
        """Ship, after a slow look-up on every run."""
        runs.append(1)
        if len(runs) > 1:
            await release.wait()
        address = await ctx.ask_form(f"Where should {item} go?", Address)
        return f"{item} → {address.city}"

    def definition(*replies: Reply) -> LoopDefinition:
        return LoopDefinition(name="shop", model=ScriptedModel(list(replies)), tools=[slow_ship])

    async with open_journal("memory:") as journal:
        first = definition(Reply(tool_calls=[ToolCall(name="ship", input={"item": "a bed"})]))
        async with Session.create(journal, first, session_id="s") as s:
            await s.submit("ship a bed")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
        async with Session.restore(journal, "s", definition(Reply(text="shipped"))) as s:
            outcome: list[object] = []

            async def answer(value: object) -> None:
                try:
                    await s.answer(gate.gate_id, value)
                    outcome.append("ok")
                except InvalidAnswerError as exc:
                    outcome.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer, {"city": 7, "zip": 1})
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(answer, {"city": "Bodø", "zip": 8006})
                await trio.testing.wait_all_tasks_blocked()
                assert outcome == []  # held: the form's type is not known yet
                assert (await s.snapshot()).open_gates == [gate]
                release.set()
            assert isinstance(outcome[0], InvalidAnswerError) and "$.city" in str(outcome[0])
            assert outcome[1] == "ok"
            await s.wait_idle()
        (completed,) = await events_of(journal, "s", ToolCompleted)
        assert completed.content[0].text == "a bed → Bodø"  # type: ignore[union-attr]


async def test_a_restored_tool_that_asks_something_else_replaces_the_form(
    autojump_clock: object,
) -> None:
    @tool(name="ship", permission="allow", resumable=True)
    async def changed(ctx: ToolContext, *, item: str) -> str:
        """A new deploy asks a plain question instead."""
        return await ctx.ask_user(f"city for {item}?")

    async with open_journal("memory:") as journal:
        first = LoopDefinition(
            name="shop",
            model=ScriptedModel([Reply(tool_calls=[ToolCall(name="ship", input={"item": "x"})])]),
            tools=[ship],
        )
        async with Session.create(journal, first, session_id="s") as s:
            await s.submit("ship x")
            await s.wait_idle()
            (form,) = (await s.snapshot()).open_gates
        second = LoopDefinition(
            name="shop", model=ScriptedModel([Reply(text="ok")]), tools=[changed]
        )
        async with Session.restore(journal, "s", second) as s:
            await s.wait_idle()
            (question,) = (await s.snapshot()).open_gates
            assert question.gate_id != form.gate_id and question.form is None
            await s.answer(question.gate_id, "Oslo")
            await s.wait_idle()
        (cancelled,) = await events_of(journal, "s", GateCancelled)
        assert (cancelled.gate_id, cancelled.reason) == (form.gate_id, "restore_unavailable")
        assert (await check(journal, "s")).ok


async def test_forms_are_answered_through_the_inbox(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    d, _ = loop_of(ToolCall(name="ship", input={"item": "a rug"}))
    async with Host.open(journal, {"shop": d}, host_id="h1", poll=0.5):
        sid = await client.create("shop", key="c1")
        await client.submit(sid, "ship a rug", key="s1")

        async def gate_open() -> bool:
            return bool(await events_of(journal, sid, GateOpened))

        await wait_for(gate_open)
        (gate,) = await events_of(journal, sid, GateOpened)
        await client.answer(sid, gate.gate_id, {"city": "Oslo"}, key="a1", principal="ann")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait(sid, "a1", timeout=30)
        assert caught.value.outcome.error == "InvalidAnswerError"
        assert "missing required field `zip`" in str(caught.value)
        await client.answer(sid, gate.gate_id, '{"city": "Oslo", "zip": 1}', key="a2")
        await client.wait(sid, "a2", timeout=30)

        async def completed() -> bool:
            return bool(await events_of(journal, sid, ToolCompleted))

        await wait_for(completed)
    assert (await events_of(journal, sid, ToolCompleted))[0].content[0].text == "a rug → Oslo 1 NO"  # type: ignore[union-attr]
    assert len(await events_of(journal, sid, GateResolved)) == 1


async def test_a_keyed_form_answer_repeated_as_data_is_answered_once(
    autojump_clock: object,
) -> None:
    d, model = loop_of(ToolCall(name="ship", input={"item": "a vase"}))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("ship")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            address = {"city": "Oslo", "zip": 1}
            await s.answer(gate.gate_id, address, key="form-1")
            await s.wait_idle()
            # The gate is closed: the repeat is recognised by its key.
            await s.answer(gate.gate_id, address, key="form-1")
        assert len(await events_of(journal, "s", GateResolved)) == 1
    assert last_result(model) == "a vase → Oslo 1 NO"
