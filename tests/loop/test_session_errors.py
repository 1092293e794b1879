"""Bad input to the Session API: a named error, and nothing committed is lost."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from journal import (
    TAIL_LIMIT,
    Checkpointed,
    FencedError,
    ForwardingJournal,
    Record,
    SessionLease,
    open_journal,
)
from journal.content import Text, ToolResult
from loopruntime import (
    InvalidAnswerError,
    LoopDefinition,
    Mode,
    ModelRequest,
    ModeNotFoundError,
    ToolContext,
    tool,
)
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session, UnknownSessionError
from session.embedded.errors import InvalidContentError, SeqOutOfRangeError
from session.replay import check
from tests.support import crash_scenarios
from tests.support.loops import records, tags
from tests.support.processes import kill_when_ready


def definition(ran: list[str]) -> LoopDefinition:
    @tool(permission="ask")
    async def deploy(ctx: ToolContext) -> str:
        """Deploy (asks for permission)."""
        ran.append(ctx.execution_id)
        return "deployed"

    def brain(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if any(isinstance(b, ToolResult) for b in last.blocks):
            return Reply(text="done")
        said = " ".join(b.text for b in last.blocks if isinstance(b, Text))
        if "deploy" in said:
            return Reply(tool_calls=[ToolCall(name="deploy", input={})])
        return Reply(text="hello")

    return LoopDefinition(name="errors", model=ScriptedModel(brain), tools=[deploy])


async def open_gate(s: Session) -> str:
    await s.submit("deploy it")
    await s.wait_idle()
    [gate_id] = (await s.snapshot()).gates
    return gate_id


@pytest.mark.parametrize(
    ("allow", "scope"),
    [("no", "once"), (0, "once"), (None, "once"), (False, "forever"), (True, "Session")],
)
async def test_a_malformed_decision_is_refused_and_the_gate_stays_open(
    allow: Any, scope: Any
) -> None:
    ran: list[str] = []
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(ran)) as s:
            gate_id = await open_gate(s)
            before = await tags(journal, s.id)
            with pytest.raises(InvalidAnswerError, match=gate_id):
                await s.decide(gate_id, allow, scope)
            assert await tags(journal, s.id) == before
            assert gate_id in (await s.snapshot()).gates and ran == []
            await s.decide(gate_id, False)  # the real answer still counts
            await s.wait_idle()
            state = await s.snapshot()
    assert ran == [] and state.gates == {} and state.last_outcome == "completed"


@pytest.mark.parametrize(
    "content",
    [["plain string"], ("a", "b"), 42, None, "lone surrogate \ud800", [Text(text="\udfff")]],
)
async def test_input_the_journal_could_not_read_back_is_refused(content: Any) -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition([])) as s:
            await s.submit("hi")
            await s.wait_idle()
            before = await records(journal, s.id)
            with pytest.raises(InvalidContentError):
                await s.submit(content)
            with pytest.raises(InvalidContentError):
                await s.steer(content)
            assert await records(journal, s.id) == before  # readable, and unchanged
            await s.submit("still here")
            await s.wait_idle()
            assert (await s.snapshot()).turn_index == 2
            await s.verify()
        assert (await check(journal, s.id)).ok


async def test_a_malformed_resolution_is_refused_and_the_effect_stays_unknown(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    side = tmp_path / "side.jsonl"
    await kill_when_ready("effect", url, "ses_u", str(side))
    async with open_journal(url) as journal:
        d = crash_scenarios.definition("effect", side, [Reply(text="settled")])
        async with Session.restore(journal, "ses_u", d) as s:
            [effect] = (await s.snapshot()).unknown_effects
            before = await records(journal, s.id)
            for result, is_error in ((["ok"], False), (7, False), ("ok", "yes")):
                with pytest.raises(InvalidContentError):
                    await s.resolve(effect.execution_id, result, is_error)  # type: ignore[arg-type]
            assert await records(journal, s.id) == before
            await s.resolve(effect.execution_id, "it ran", False)
            await s.wait_idle()
            state = await s.snapshot()
        assert state.unknown == {} and state.last_outcome == "completed"
        assert (await check(journal, "ses_u")).ok


async def test_subscribe_after_outside_the_session_is_refused() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition([])) as s:
            await s.submit("hi")
            await s.wait_idle()
            head = await journal.head(s.id)
            for after in (-1, head + 1):
                with pytest.raises(SeqOutOfRangeError) as info:
                    async for _ in s.subscribe(after=after):
                        pass
                assert info.value.head == head and f"after={after}" in str(info.value)
            seen = []
            async for record in s.subscribe(after=head - 1):
                seen.append(record.seq)
                break
            assert seen == [head]


async def test_the_older_of_two_restores_is_fenced_and_the_journal_stays_whole(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as journal:
        async with Session.create(journal, definition([]), session_id="ses_f") as s:
            await s.submit("hi")
            await s.wait_idle()
    async with open_journal(url) as first, open_journal(url) as second:
        with pytest.raises(FencedError, match="newer writer"):
            async with Session.restore(first, "ses_f", definition([])) as old:
                async with trio.open_nursery() as nursery:
                    # The newer session runs beside the older one, not inside it:
                    # the older's failure ends only its own body.
                    newer_done = trio.Event()

                    async def newer() -> None:
                        async with Session.restore(second, "ses_f", definition([])) as new:
                            await new.submit("from the newer writer")
                            await new.wait_idle()
                        newer_done.set()

                    nursery.start_soon(newer)
                    await newer_done.wait()
                    await old.submit("from the older writer")
        texts = [
            b.text
            for r in await records(second, "ses_f")
            for m in getattr(r.event, "messages", ())
            for b in m.blocks
            if isinstance(b, Text)
        ]
        assert "from the newer writer" in texts and "from the older writer" not in texts
        assert (await check(second, "ses_f")).ok


async def test_restore_with_a_definition_that_does_not_fit_is_a_named_error() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition([]), session_id="ses_d") as s:
            await s.submit("hi")
            await s.wait_idle()
        before = await records(journal, "ses_d")
        other = LoopDefinition(name="other", model=ScriptedModel(lambda _r: Reply(text="x")))
        with pytest.raises(UnknownSessionError, match="runs definition 'errors'"):
            async with Session.restore(journal, "ses_d", other):
                pass
        assert await records(journal, "ses_d") == before


@pytest.mark.parametrize("misfit", ["definition", "mode"])
async def test_a_restore_that_does_not_fit_never_fences_the_live_host(
    tmp_path: Path, misfit: str
) -> None:
    """Restore checks the journal against its definition before it takes the
    lease: a restore bound to fail leaves the process running the session
    writing, and says why it failed."""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    careful = dataclasses.replace(definition([]), modes=[Mode(name="careful")])
    wrong: tuple[LoopDefinition, type[Exception], str] = (
        (
            LoopDefinition(name="other", model=ScriptedModel(lambda _r: Reply(text="x"))),
            UnknownSessionError,
            "runs definition 'errors'",
        )
        if misfit == "definition"
        else (definition([]), ModeNotFoundError, "mode 'careful'")
    )
    async with open_journal(url) as live_journal, open_journal(url) as other:
        async with Session.create(live_journal, careful, session_id="ses_l") as live:
            await live.submit("hi")
            await live.wait_idle()
            if misfit == "mode":
                await live.change_mode("careful")
            incarnations = [i.incarnation for i in await other.sessions()]
            d, error, match = wrong
            with pytest.raises(error, match=match):
                async with Session.restore(other, "ses_l", d):
                    pass
            assert [i.incarnation for i in await other.sessions()] == incarnations
            await live.submit("still here")
            await live.wait_idle()
            assert (await live.snapshot()).turn_index == 2
            await live.verify()
        with pytest.raises(UnknownSessionError, match="no session ses_nope"):
            async with Session.restore(other, "ses_nope", careful):
                pass
        assert (await check(other, "ses_l")).ok


class RacingJournal(ForwardingJournal):
    """Counts reads (a restore's is one ``read_checkpointed``, and a ``read``
    for a tail it left), and runs ``before_lease`` just before a lease is taken."""

    reads = 0
    before_lease: Callable[[], Awaitable[None]] | None = None

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        self.reads += 1
        return super().read(session, after=after, skip_stream=skip_stream)

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        self.reads += 1
        return await super().read_checkpointed(session, tail_limit=tail_limit)

    async def open_session(self, session: str, *, create: bool = True) -> SessionLease:
        if self.before_lease is not None:
            await self.before_lease()
        return await super().open_session(session, create=create)


@pytest.mark.parametrize("checkpoint_every", [None, 2])
async def test_restore_reads_again_only_when_the_journal_moved_before_the_lease(
    checkpoint_every: int | None,
) -> None:
    async with open_journal("memory:") as inner:
        async with Session.create(
            inner, definition([]), session_id="ses_r", checkpoint_every=checkpoint_every
        ) as live:
            await live.submit("hi")
            await live.wait_idle()
            racing = RacingJournal(inner)

            async def meanwhile() -> None:
                # The live host commits a whole turn after restore's read.
                await live.submit("meanwhile")
                await live.wait_idle()

            racing.before_lease = meanwhile
            async with Session.restore(racing, "ses_r", definition([])) as restored:
                assert racing.reads == 2  # verify reads too: counted before it
                state = await restored.snapshot()
                await restored.verify()
            assert state.turn_index == 2 and state.messages[-2].blocks == (Text(text="meanwhile"),)
        quiet = RacingJournal(inner)
        async with Session.restore(quiet, "ses_r", definition([])) as again:
            assert quiet.reads == 1  # nothing moved: one read, as before
            await again.submit("later")
            await again.wait_idle()
            await again.verify()
        assert (await check(inner, "ses_r")).ok
