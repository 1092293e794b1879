"""A scripted list after a restore goes on where the conversation left off:
a reply the loop already had is never played again (its tool would run twice)."""

from __future__ import annotations

import trio

from journal import open_journal
from journal.content import InputJsonDelta, Message, Text, TextDelta, ToolUse
from journal.events import ToolStarted
from loopruntime import LoopDefinition, LoopStatus, ModelError, ModelRequest, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.loops import events_of

CHARGES: list[int] = []


@tool(permission="ask")
async def charge(ctx: ToolContext, *, amount: int) -> str:
    """Charge a card."""
    CHARGES.append(amount)
    return f"charged {amount}"


SCRIPT = [
    Reply(tool_calls=[ToolCall(name="charge", input={"amount": 30})]),
    Reply(text="The card was charged."),
]


def _definition(model: ScriptedModel) -> LoopDefinition:
    return LoopDefinition(name="shop", model=model, tools=[charge])


async def _session_waiting_on_its_gate(journal_url: str) -> str:
    """A session whose first reply asked for the charge, left with its
    permission gate open (a clean shutdown keeps it open)."""
    async with open_journal(journal_url) as journal:
        async with Session.create(journal, _definition(ScriptedModel(SCRIPT))) as s:
            await s.submit("Charge 30.")
            await s.wait_idle()
            assert (await s.snapshot()).status is LoopStatus.AWAITING_GATE
            return s.id


async def test_the_whole_script_goes_on_after_the_replies_the_journal_holds(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    CHARGES.clear()
    session_id = await _session_waiting_on_its_gate(url)
    # A new process would build its definition afresh: a new model, the same list.
    async with open_journal(url) as journal:
        async with Session.restore(journal, session_id, _definition(ScriptedModel(SCRIPT))) as s:
            [gate] = (await s.snapshot()).open_gates
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()
            state = await s.snapshot()
            assert state.messages[-1].blocks[-1].text == "The card was charged."
            assert not state.open_gates
        assert CHARGES == [30]
        assert len(await events_of(journal, session_id, ToolStarted)) == 1


async def test_a_list_of_the_replies_still_to_come_is_played_as_given(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    CHARGES.clear()
    session_id = await _session_waiting_on_its_gate(url)
    rest = ScriptedModel([Reply(text="Done, 30 charged.")])
    async with open_journal(url) as journal:
        async with Session.restore(journal, session_id, _definition(rest)) as s:
            [gate] = (await s.snapshot()).open_gates
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()
            assert (await s.snapshot()).messages[-1].blocks[-1].text == "Done, 30 charged."
    assert CHARGES == [30]


def _assistant(text: str = "", *calls: tuple[str, dict[str, int]]) -> Message:
    blocks = ([Text(text=text)] if text else []) + [
        ToolUse(id=f"tu_{i}", name=name, input=value) for i, (name, value) in enumerate(calls)
    ]
    return Message(role="assistant", blocks=tuple(blocks))


def _user(text: str) -> Message:
    return Message(role="user", blocks=(Text(text=text),))


async def _first_reply(script: list[Reply], messages: list[Message]) -> str:
    """What a fresh model of ``script`` answers first, given ``messages``."""
    model = ScriptedModel(script)
    request = ModelRequest(system="", messages=[*messages, _user("go on")])
    said: list[str] = []
    while True:
        try:
            async with model.stream(request) as deltas:
                async for delta in deltas:
                    if isinstance(delta, TextDelta):
                        said.append(delta.text)
                    elif isinstance(delta, InputJsonDelta):
                        said.append(delta.partial_json)
            return "".join(said)
        except ModelError:
            continue  # a scripted failure: the next call takes the next reply


async def test_which_replies_the_conversation_already_holds() -> None:
    script = [
        Reply(error=ModelError("overloaded", kind="overloaded")),
        Reply(tool_calls=[ToolCall(name="charge", input={"amount": 30})]),
        Reply(text="charged"),
        Reply(text="anything else?"),
    ]
    call = _assistant("", ("charge", {"amount": 30}))
    # Nothing said yet: from the start (the failure, then the call).
    assert await _first_reply(script, [_user("hi")]) == '{"amount":30}'
    # A failure leaves no message: passed over, then the call matches.
    assert await _first_reply(script, [_user("hi"), call]) == "charged"
    conversation = [_user("hi"), call, _user("ok"), _assistant("charged")]
    assert await _first_reply(script, conversation) == "anything else?"
    # Another call, or other text: the list is the rest, played as given.
    other = _assistant("", ("charge", {"amount": 31}))
    assert await _first_reply(script, [_user("hi"), other]) == '{"amount":30}'
    assert await _first_reply(script, [_user("hi"), _assistant("hello")]) == '{"amount":30}'
    # More replies than the list holds: not this list's conversation.
    two = [Reply(text="a"), Reply(text="b")]
    assert await _first_reply(two, [_assistant("a"), _assistant("b"), _assistant("c")]) == "a"


async def test_two_sessions_on_one_model_keep_sharing_the_list() -> None:
    # Within one process the list plays on across sessions: the script is the
    # model's, not a session's.
    model = ScriptedModel([Reply(text="one"), Reply(text="two")])
    definition = LoopDefinition(name="talk", model=model)
    async with open_journal("memory:") as journal:
        for said in ("one", "two"):
            async with Session.create(journal, definition) as s:
                await s.submit("hi")
                await s.wait_idle()
                assert (await s.snapshot()).messages[-1].blocks[-1].text == said
    await trio.lowlevel.checkpoint()
