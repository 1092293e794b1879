"""Tool progress (``ToolContext.progress``): recorded without the tool
waiting, coalesced past ``Limits.max_progress_per_second`` with the newest
always kept, bounded in size, refused once the call ended; shown by replay
(transcript, tree, json), subscribers and the trace, ignored by the fold."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import pytest
import trio

from journal import Draft, Journal, Record, open_journal
from journal.events import LoopConfigured, ToolCompleted, ToolProgress, ToolStarted, TurnEnded
from loopruntime import (
    Limits,
    LoopDefinition,
    OutsideToolCallError,
    ProgressTooLargeError,
    ToolContext,
    tool,
)
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Client, DefinitionDriftError, Host, Session
from session.console.views import TranscriptFeed
from session.replay import build_tree, check, render_transcript, replay_command
from session.replay.tree import ToolStep
from session.traces.otel import spans_of
from tests.host.support import trio_clock_journal, wait_for
from tests.support.crash_progress import REPORTS
from tests.support.crash_progress import definition as migrator
from tests.support.loops import events_of, records, tags
from tests.support.processes import kill_when_ready

STEPS = 20


@tool(permission="allow")
async def crawl(ctx: ToolContext, *, pages: int) -> str:
    """Crawls pages, saying how far it got after each."""
    for i in range(pages):
        await trio.sleep(0.05)
        ctx.progress(f"page {i + 1} of {pages}", (i + 1) / pages)
    return f"crawled {pages}"


def script(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
        return Reply(text="done")
    return Reply(tool_calls=[ToolCall(name="crawl", input={"pages": STEPS})])


def definition(*tools: object, **limits: int) -> LoopDefinition:
    return LoopDefinition(
        name="crawler",
        model=ScriptedModel(script),
        tools=list(tools or [crawl]),  # type: ignore[arg-type]
        limits=Limits(**limits),
    )


@asynccontextmanager
async def journal_of(backend: str, tmp_path: Path) -> AsyncIterator[Journal]:
    url = "memory:" if backend == "memory" else f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as journal:
        yield journal


BACKENDS = pytest.mark.parametrize("backend", ["memory", "sqlite"])


@BACKENDS
async def test_reports_are_recorded_coalesced_and_the_newest_kept(
    backend: str, tmp_path: Path, autojump_clock: object
) -> None:
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, definition(), session_id="s") as s:
            seen: list[Record] = []

            async def watch() -> None:
                async for r in s.subscribe(after=0):
                    assert isinstance(r, Record)
                    seen.append(r)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                await s.submit("crawl")
                await s.wait_idle()
                nursery.cancel_scope.cancel()
            await s.verify()
        written = await records(journal, "s")
        report = await check(journal, "s")
    assert report.ok, report.summary()
    progress = [r.event for r in written if isinstance(r.event, ToolProgress)]
    # 20 reports over a second, at most 4 records a second: the first at
    # once, then one per interval, the newest (the last page) always.
    assert 2 <= len(progress) <= 1 + 4 + 1
    assert progress[0].message == "page 1 of 20" and progress[0].coalesced == 0
    assert progress[-1].message == "page 20 of 20" and progress[-1].fraction == 1.0
    assert sum(p.coalesced + 1 for p in progress) == STEPS
    pages = [int(p.message.split()[1]) for p in progress]
    assert pages == sorted(pages)
    (started,) = [r for r in written if isinstance(r.event, ToolStarted)]
    assert {p.execution_id for p in progress} == {started.id}  # a start's id is its execution's
    # Each names the call's start as its cause, and all come before its result.
    kinds = [str(r.event.__struct_config__.tag) for r in written]
    assert kinds.index("tool.completed") > max(
        i for i, k in enumerate(kinds) if k == "tool.progress"
    )
    assert all(r.cause == started.id for r in written if isinstance(r.event, ToolProgress))
    # Subscribers saw them, in seq order.
    assert [r.event for r in seen if isinstance(r.event, ToolProgress)] == progress


async def test_progress_is_shown_by_replay_and_the_trace(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal(url) as journal:
        async with Session.create(journal, definition(), session_id="s") as s:
            await s.submit("crawl")
            await s.wait_idle()
        written = await records(journal, "s")
    transcript = render_transcript(written)
    assert "… crawl 100%: page 20 of 20" in transcript
    assert transcript.index("… crawl") < transcript.index("← crawl (succeeded")
    steps = [
        step
        for stream in build_tree("s", written).streams
        for epoch in stream.epochs
        for talk in epoch.talks
        for run in talk.runs
        for step in run.steps
        if isinstance(step, ToolStep)
    ]
    (step,) = steps
    assert step.progress[-1].message == "page 20 of 20"
    assert [p.seq for p in step.progress] == [
        r.seq for r in written if isinstance(r.event, ToolProgress)
    ]
    lines: list[str] = []
    await replay_command(url, "s", fmt="tree", out=lines.append)
    assert "progress 100%: page 20 of 20" in "\n".join(lines)
    lines.clear()
    await replay_command(url, "s", fmt="json", out=lines.append)
    assert '"page 20 of 20"' in "\n".join(lines)
    # The console's live transcript shows the reports as they arrive.
    feed = TranscriptFeed()
    shown = [feed.item(r) for r in written]
    words = [
        "".join(text for _, text in line["spans"])
        for item in shown
        if item["tag"] == "tool.progress"
        for line in item["lines"]
    ]
    assert words[-1] == "… crawl 100%: page 20 of 20"
    (span,) = [sp for sp in spans_of("s", written) if sp.name == "execute_tool crawl"]
    reported = [ev for ev in span.events if ev.name == "loopruntime.tool.progress"]
    assert reported and reported[-1].attributes is not None
    assert reported[-1].attributes["loopruntime.progress.message"] == "page 20 of 20"
    assert reported[-1].attributes["loopruntime.progress.fraction"] == 1.0


@tool(permission="allow")
async def chatty(ctx: ToolContext) -> str:
    """Reports too much, then a bad fraction, then works on."""
    refused: list[str] = []
    try:
        ctx.progress("x" * 17)
    except ProgressTooLargeError as exc:
        refused.append(f"{exc.code} {exc.size}>{exc.limit} {exc.execution_id == ctx.execution_id}")
    for bad in (1.5, -0.1, float("nan")):
        try:
            ctx.progress("ok", bad)
        except ValueError as exc:
            refused.append(type(exc).__name__ + (" fraction" if "fraction" in str(exc) else ""))
    try:
        ctx.progress(b"bytes")  # type: ignore[arg-type]
    except TypeError:
        refused.append("TypeError")
    ctx.progress("é" * 8)  # 16 bytes: at the limit
    return "; ".join(refused)


@BACKENDS
async def test_a_message_over_the_limit_is_a_named_error_and_nothing_is_recorded(
    backend: str, tmp_path: Path, autojump_clock: object
) -> None:
    def calls_chatty(request: ModelRequest) -> Reply:
        if len(request.messages) > 1:
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="chatty", input={})])

    d = LoopDefinition(
        name="chatty",
        model=ScriptedModel(calls_chatty),
        tools=[chatty],
        limits=Limits(max_progress_bytes=16),
    )
    async with journal_of(backend, tmp_path) as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.submit("go")
            await s.wait_idle()
        (done,) = await events_of(journal, "s", ToolCompleted)
        progress = await events_of(journal, "s", ToolProgress)
    assert done.disposition == "succeeded"
    text = done.content[0].text
    assert text == (
        "tool.progress_too_large 17>16 True; ValueError fraction; ValueError fraction; "
        "ValueError fraction; TypeError"
    )
    assert [p.message for p in progress] == ["é" * 8]


def test_the_limits_are_checked_when_made() -> None:
    with pytest.raises(ValueError, match="max_progress_per_second"):
        Limits(max_progress_per_second=0)
    with pytest.raises(TypeError, match="max_progress_bytes"):
        Limits(max_progress_bytes=1.5)  # type: ignore[arg-type]


async def test_a_context_used_after_its_call_ended_is_refused(autojump_clock: object) -> None:
    kept: list[ToolContext] = []

    @tool(permission="allow", name="crawl")
    async def keeps(ctx: ToolContext, *, pages: int) -> str:
        """Keeps its context past its call."""
        kept.append(ctx)
        ctx.progress("started")
        return "kept"

    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(keeps), session_id="s") as s:
            await s.submit("go")
            await s.wait_idle()
            with pytest.raises(OutsideToolCallError, match="after tool call exe_") as caught:
                kept[0].progress("late")
            assert caught.value.code == "gate.outside_tool_call"
        progress = await events_of(journal, "s", ToolProgress)
    assert [p.message for p in progress] == ["started"]


async def test_a_tool_that_never_reports_records_nothing_new(autojump_clock: object) -> None:
    @tool(permission="allow", name="crawl")
    async def quiet(ctx: ToolContext, *, pages: int) -> str:
        """Says nothing while it works."""
        return "quiet"

    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(quiet), session_id="s") as s:
            await s.submit("go")
            await s.wait_idle()
        assert "tool.progress" not in await tags(journal, "s")


@pytest.mark.parametrize("replay_safe", ["no", "yes"])
async def test_reports_stay_across_sigkill_and_the_call_is_settled_as_before(
    tmp_path: Path, replay_safe: str
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    await kill_when_ready("progress", url, "ses_p", replay_safe)
    async with open_journal(url) as journal:
        before = await records(journal, "ses_p")
        reports = [r.event for r in before if isinstance(r.event, ToolProgress)]
        assert reports[-1].message == f"table {REPORTS} of 10"
        assert sum(p.coalesced + 1 for p in reports) == REPORTS
        (started,) = [r.event for r in before if isinstance(r.event, ToolStarted)]
        restored = migrator(replay_safe == "yes", restored=True)
        async with Session.restore(journal, "ses_p", restored) as s:
            await s.wait_idle()
            if replay_safe == "no":
                # Its effect is unknown, as for any call a crash cut.
                assert list((await s.snapshot()).unknown) == [started.execution_id]
                await s.resolve(started.execution_id, "migrated by hand")
                await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        after = await records(journal, "ses_p")
        report = await check(journal, "ses_p")
    assert report.ok, report.summary()
    assert state.last_outcome == "completed"
    # The reports made before the kill stay, as they were.
    assert [(r.seq, r.id) for r in after[: len(before)]] == [(r.seq, r.id) for r in before]
    later = [str(r.event.__struct_config__.tag) for r in after[len(before) :]]
    progress_after = [r.event for r in after[len(before) :] if isinstance(r.event, ToolProgress)]
    if replay_safe == "no":
        assert "tool.abandoned" in later and "tool.resolved" in later
        assert progress_after == []
    else:
        # Run again under the same execution id: its new report names it.
        assert [(p.execution_id, p.message) for p in progress_after] == [
            (started.execution_id, "again from the start")
        ]
        assert later.index("tool.progress") < later.index("tool.completed")


async def test_progress_through_a_host(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, {"crawler": definition()}, host_id="h1", poll=0.5):
        sid = await client.create("crawler", key="c1")
        await client.submit(sid, "crawl", key="s1")

        async def ended() -> bool:
            return bool(await events_of(journal, sid, TurnEnded))

        await wait_for(ended)
    written = await records(journal, sid)
    progress = [r.event for r in written if isinstance(r.event, ToolProgress)]
    assert progress[-1].message == f"page {STEPS} of {STEPS}"
    assert sum(p.coalesced + 1 for p in progress) == STEPS
    assert len(progress) < STEPS
    report = await check(journal, sid)
    assert report.ok, report.summary()


async def test_a_journal_recorded_before_the_progress_limits_is_no_drift() -> None:
    new = ("max_progress_per_second", "max_progress_bytes")
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(), session_id="s") as s:
            await s.submit("crawl")
            await s.wait_idle()
        # The same session as code before these limits recorded it.
        lease = await journal.open_session("old", create=True)
        drafts = []
        for r in await records(journal, "s"):
            event = r.event
            if isinstance(event, LoopConfigured):
                limits = {k: v for k, v in event.config.limits.items() if k not in new}
                config = msgspec.structs.replace(event.config, limits=limits)
                event = msgspec.structs.replace(event, config=config)
            drafts.append(Draft(id=r.id, loop=r.loop, event=event, cause=r.cause))
        await journal.append(lease, drafts, expected_seq=0)
        await journal.release(lease)
        async with Session.restore(journal, "old", definition(), drift="refuse") as s:
            await s.wait_idle()
        assert "loop.reconfigured" not in await tags(journal, "old")
        # A limit set apart from its default is drift, as any other.
        with pytest.raises(DefinitionDriftError, match="max_progress_bytes"):
            async with Session.restore(
                journal, "old", definition(max_progress_bytes=100), drift="refuse"
            ):
                pass
