"""Redacted calls: a secret in a tool's input or result reaches the tool and
the live model, and never the journal (the SQLite file's bytes, PostgreSQL's
tables), the logs, the traces or replay; after a restore the model sees the
redacted form; a replay-safe call re-run after a crash gets its input from
the host, proven by its digest, or is refused with a clear error."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
import structlog
import trio
import trio.testing
from structlog.testing import capture_logs

from journal import Journal, open_journal
from journal.content import ToolResult, ToolUse
from journal.events import Notice, ToolAbandoned, ToolCompleted, ToolStarted
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.redaction import REDACTED, input_digest
from session import Session
from session.cli.main import main
from session.replay import check
from session.traces.otel import spans_of
from tests.support.loops import crashed_copy, records

SECRET = "hunter2-0x5ec12e7"
TOKEN = "tok-77c0ffee-55"


class Seen:
    """What the tool ran with and what the model was shown, per test."""

    def __init__(self) -> None:
        self.tool_inputs: list[dict[str, Any]] = []
        self.requests: list[ModelRequest] = []


def definition(seen: Seen, **options: Any) -> LoopDefinition:
    @tool(permission="allow", redact=["password"], redact_result=["token"], **options)
    async def login(ctx: ToolContext, *, user: str, password: str) -> dict[str, str]:
        """Logs in."""
        seen.tool_inputs.append({"user": user, "password": password})
        return {"user": user, "token": TOKEN}

    def script(request: ModelRequest) -> Reply:
        seen.requests.append(request)
        last = request.messages[-1]
        if last.role == "user" and any(isinstance(b, ToolResult) for b in last.blocks):
            return Reply(text="logged in")
        return Reply(tool_calls=[ToolCall(name="login", input={"user": "bob", "password": SECRET})])

    return LoopDefinition(name="login", model=ScriptedModel(script), tools=[login])


@contextlib.contextmanager
def every_log_line() -> Iterator[list[MutableMapping[str, Any]]]:
    """structlog's captured lines at every level (the suite keeps warnings only).

    The standard loggers are set to keep debug lines too: the runtime asks
    them before making a line it would make every turn (``Loop.logs``)."""
    before = structlog.get_config()
    stdlib = [logging.getLogger(name) for name in ("loopruntime", "session", "journal")]
    levels = [logger.level for logger in stdlib]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    for logger in stdlib:
        logger.setLevel(logging.DEBUG)
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**before)
        for logger, level in zip(stdlib, levels, strict=True):
            logger.setLevel(level)


def shown_calls(request: ModelRequest) -> list[dict[str, Any]]:
    return [b.input for m in request.messages for b in m.blocks if isinstance(b, ToolUse)]


def shown_results(request: ModelRequest) -> list[str]:
    return [
        c.text  # type: ignore[union-attr]
        for m in request.messages
        for b in m.blocks
        if isinstance(b, ToolResult)
        for c in b.content
    ]


def sqlite_bytes(path: Path) -> bytes:
    data = b""
    for name in (path, Path(f"{path}-wal")):
        if name.exists():
            data += name.read_bytes()
    return data


async def run_once(journal: Journal, seen: Seen, session_id: str) -> None:
    async with Session.create(journal, definition(seen), session_id=session_id) as s:
        await s.submit("log me in")
        await s.wait_idle()


def test_a_secret_reaches_the_tool_and_the_live_model_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.db"
    seen = Seen()

    async def run() -> list[Any]:
        async with open_journal(f"sqlite:///{path}") as journal:
            await run_once(journal, seen, "s")
            report = await check(journal, "s")
            assert report.ok, report.summary()
            return await records(journal, "s")

    with every_log_line() as logs:
        written = trio.run(run)
    # The tool ran with the real input; the model was shown its real call and
    # the real result in the live turn.
    assert seen.tool_inputs == [{"user": "bob", "password": SECRET}]
    assert shown_calls(seen.requests[-1]) == [{"user": "bob", "password": SECRET}]
    assert any(TOKEN in text for text in shown_results(seen.requests[-1]))
    # The journal holds the redacted forms, and the digest of the real input.
    (started,) = [r.event for r in written if isinstance(r.event, ToolStarted)]
    assert started.input == {"user": "bob", "password": REDACTED}
    assert started.input_digest == input_digest({"user": "bob", "password": SECRET})
    (completed,) = [r.event for r in written if isinstance(r.event, ToolCompleted)]
    assert TOKEN not in completed.content[0].text  # type: ignore[union-attr]
    assert REDACTED in completed.content[0].text  # type: ignore[union-attr]
    # Not a byte of either secret in the file (records, blobs, WAL).
    data = sqlite_bytes(path)
    assert data and SECRET.encode() not in data and TOKEN.encode() not in data
    # Nor in the logs, the traces, or what replay shows.
    assert logs and SECRET not in repr(logs) and TOKEN not in repr(logs)
    for span in spans_of("s", written, capture_content=True):
        text = repr(dict(span.attributes or {}))
        text += repr([dict(e.attributes or {}) for e in span.events])
        assert SECRET not in text and TOKEN not in text
    capsys.readouterr()
    for form in ("transcript", "json", "tree", "otel-json"):
        assert main(["replay", "--journal", str(path), "s", "--format", form]) == 0
        out = capsys.readouterr().out
        assert "bob" in out or form in ("tree", "otel-json")
        assert SECRET not in out and TOKEN not in out


async def test_postgres_tables_hold_no_secret(postgres_url: str) -> None:
    seen = Seen()
    async with open_journal(postgres_url) as journal:
        await run_once(journal, seen, "pg")
    assert seen.tool_inputs == [{"user": "bob", "password": SECRET}]

    def dump() -> bytes:
        with psycopg.connect(postgres_url) as conn:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE tablename LIKE 'loopruntime_%'"
                )
            ]
            out = b""
            for table in tables:
                for row in conn.execute(f"SELECT * FROM {table}"):
                    out += repr(row).encode()
                    out += b"".join(c for c in row if isinstance(c, bytes))
            return out

    data = await trio.to_thread.run_sync(dump)
    assert b"bob" in data  # the rows were read
    assert SECRET.encode() not in data and TOKEN.encode() not in data


async def test_after_a_restore_the_model_sees_the_redacted_call() -> None:
    seen = Seen()
    async with open_journal("memory:") as journal:
        await run_once(journal, seen, "s")
        again = Seen()
        async with Session.restore(journal, "s", definition(again)) as s:
            await s.submit("and again")
            await s.wait_idle()
    first = again.requests[0]
    assert shown_calls(first)[0] == {"user": "bob", "password": REDACTED}
    assert not any(TOKEN in t for t in shown_results(first))
    # Its own new call it sees in full, as before.
    assert shown_calls(again.requests[-1])[-1] == {"user": "bob", "password": SECRET}


async def _crashed_after_start(journal: Journal, seen: Seen) -> str:
    """A session cut right after the login call started (the tool never finished)."""
    await run_once(journal, seen, "s")
    written = await records(journal, "s")
    started = next(r.seq for r in written if isinstance(r.event, ToolStarted))
    return await crashed_copy(journal, "s", started)


async def test_a_replay_safe_call_rerun_after_a_crash_gets_its_input_from_the_host() -> None:
    asked: list[tuple[str, Mapping[str, Any]]] = []

    def recover(execution_id: str, redacted: Mapping[str, Any]) -> dict[str, Any]:
        asked.append((execution_id, dict(redacted)))
        return {**redacted, "password": SECRET}

    seen = Seen()
    async with open_journal("memory:") as journal:
        copy = await _crashed_after_start(journal, seen)
        again = Seen()
        restored = definition(again, replay_safe=True, recover_input=recover)
        async with Session.restore(journal, copy, restored) as s:
            await s.wait_idle()
        written = await records(journal, copy)
        report = await check(journal, copy)
        assert report.ok, report.summary()
    started = next(r.event for r in written if isinstance(r.event, ToolStarted))
    assert asked == [(started.execution_id, {"user": "bob", "password": REDACTED})]
    # Re-run with the real input, under the same execution id.
    assert again.tool_inputs == [{"user": "bob", "password": SECRET}]
    done = [r.event for r in written if isinstance(r.event, ToolCompleted)]
    assert [d.execution_id for d in done] == [started.execution_id]


@pytest.mark.parametrize("host", ["none", "nothing", "wrong"])
async def test_a_rerun_without_the_real_input_is_refused_clearly(host: str) -> None:
    def recover(execution_id: str, redacted: Mapping[str, Any]) -> dict[str, Any] | None:
        return None if host == "nothing" else {**redacted, "password": "not-it"}

    options: dict[str, Any] = {"replay_safe": True}
    if host != "none":
        options["recover_input"] = recover
    seen = Seen()
    async with open_journal("memory:") as journal:
        copy = await _crashed_after_start(journal, seen)
        again = Seen()
        async with Session.restore(journal, copy, definition(again, **options)) as s:
            await s.wait_idle()
            written = await records(journal, copy)
            abandoned = [r.event for r in written if isinstance(r.event, ToolAbandoned)]
            assert [a.reason for a in abandoned] == ["restore_unavailable"]
            (notice,) = [
                r.event
                for r in written
                if isinstance(r.event, Notice) and r.event.code == "redacted_input_unavailable"
            ]
            why = {
                "none": "has no recover_input",
                "nothing": "no original input",
                "wrong": "not the one the call started with",
            }[host]
            assert why in notice.text and "loopruntime resolve" in notice.text
            # The host settles it as any unknown outcome.
            await s.resolve(abandoned[0].execution_id, "logged in by hand")
            await s.wait_idle()
        report = await check(journal, copy)
        assert report.ok, report.summary()
    # The tool never ran with a made-up input.
    assert again.tool_inputs == []


async def test_a_redacted_call_that_had_not_started_is_answered_with_an_error() -> None:
    seen = Seen()
    async with open_journal("memory:") as journal:
        await run_once(journal, seen, "s")
        written = await records(journal, "s")
        message = next(r.seq for r in written if type(r.event).__name__ == "ModelMessageCommitted")
        copy = await crashed_copy(journal, "s", message)
        again = Seen()
        async with Session.restore(journal, copy, definition(again)) as s:
            await s.wait_idle()
        written = await records(journal, copy)
    assert again.tool_inputs == []
    rejected = [
        r.event
        for r in written
        if isinstance(r.event, ToolCompleted) and r.event.disposition == "rejected"
    ]
    assert rejected and "was redacted" in rejected[0].content[0].text  # type: ignore[union-attr]


def test_a_redaction_naming_a_field_the_tool_does_not_have_is_refused() -> None:
    async def login(ctx: ToolContext, *, user: str, password: str) -> str:
        """Logs in."""
        return "ok"

    with pytest.raises(ValueError, match="redact names 'pasword', which its input does not have"):
        tool(redact=["pasword"])(login)
    with pytest.raises(TypeError, match="list of field names or a function"):
        tool(redact="password")(login)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must name at least one field"):
        tool(redact=[])(login)
    with pytest.raises(TypeError, match="must name at least one field"):
        tool(redact_result=[1])(login)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="recover_input must be a function"):
        tool(redact=["password"], recover_input="vault")(login)  # type: ignore[arg-type]
    # A function is taken as it is.
    made = tool(redact=lambda v: {**v, "password": "*"})(login)
    assert made.redact_input is not None
    assert made.redact_input({"user": "a", "password": "b"}) == {"user": "a", "password": "*"}


def test_sqlite_rows_hold_the_digest_not_the_secret(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    trio.run(lambda: _run_file(path))
    conn = sqlite3.connect(path)
    try:
        bodies = b"".join(r[0] for r in conn.execute("SELECT body FROM records"))
    finally:
        conn.close()
    assert input_digest({"user": "bob", "password": SECRET}).encode() in bodies
    assert SECRET.encode() not in bodies


async def _run_file(path: Path) -> None:
    async with open_journal(f"sqlite:///{path}") as journal:
        await run_once(journal, Seen(), "s")


def test_an_error_quoting_the_secret_is_recorded_and_logged_without_it() -> None:
    @tool(permission="allow", redact=["password"])
    async def login(ctx: ToolContext, *, user: str, password: str) -> str:
        """Logs in."""
        raise PermissionError(f"user {user} gave the wrong password {password}")

    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="login", input={"user": "bob", "password": SECRET})]),
            Reply(text="failed"),
        ]
    )

    async def run() -> list[Any]:
        async with open_journal("memory:") as journal:
            defn = LoopDefinition(name="login", model=model, tools=[login])
            async with Session.create(journal, defn, session_id="s") as s:
                await s.submit("log in")
                await s.wait_idle()
            return await records(journal, "s")

    with every_log_line() as logs:
        written = trio.run(run)
    (failed,) = [r.event for r in written if isinstance(r.event, ToolCompleted)]
    text = failed.content[0].text  # type: ignore[union-attr]
    assert "wrong password [redacted]" in text and SECRET not in text
    (line,) = [e for e in logs if e["event"] == "tool_failed"]
    assert SECRET not in repr(line) and "[redacted]" in line["error"]


async def test_subscribers_see_no_streamed_secret() -> None:
    from journal.content import BlockStarted, InputJsonDelta

    seen = Seen()
    items: list[Any] = []
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition(seen), session_id="s") as s:

            async def follow() -> None:
                async for item in s.subscribe(after=0, deltas=True):
                    items.append(item)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await trio.testing.wait_all_tasks_blocked()
                await s.submit("log me in")
                await s.wait_idle()
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
    deltas = [i.delta for i in items if not hasattr(i, "seq")]
    # The call's start is shown; its streamed input is not.
    assert any(isinstance(d, BlockStarted) and d.name == "login" for d in deltas)
    assert not any(isinstance(d, InputJsonDelta) for d in deltas)
    assert SECRET not in repr(items) and TOKEN not in repr(items)
    assert seen.tool_inputs == [{"user": "bob", "password": SECRET}]


async def test_a_permission_policy_and_gate_see_the_redacted_input() -> None:
    asked: list[dict[str, Any]] = []
    ran: list[str] = []

    def policy(name: str, value: Mapping[str, Any]) -> Any:
        asked.append(dict(value))
        return "ask"

    @tool(permission=policy, redact=["password"])
    async def login(ctx: ToolContext, *, user: str, password: str) -> str:
        """Logs in."""
        ran.append(password)
        return "ok"

    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="login", input={"user": "bob", "password": SECRET})]),
            Reply(text="done"),
        ]
    )
    async with open_journal("memory:") as journal:
        defn = LoopDefinition(name="login", model=model, tools=[login])
        async with Session.create(journal, defn, session_id="s") as s:
            await s.submit("log in")
            await s.wait_idle()
            [gate] = (await s.snapshot()).open_gates
            assert gate.preview == {"tool": "login", "input": {"user": "bob", "password": REDACTED}}
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()
    assert asked == [{"user": "bob", "password": REDACTED}]
    assert ran == [SECRET]


def hide_password(value: Mapping[str, Any]) -> dict[str, Any]:
    return {**value, "password": REDACTED}


def payroll(**options: Any) -> LoopDefinition:
    @tool(permission="allow", **options)
    async def pay(ctx: ToolContext, *, user: str, password: str) -> dict[str, str]:
        """Pays."""
        return {"user": user, "token": TOKEN}

    return LoopDefinition(name="payroll", model=ScriptedModel([]), tools=[pay])


@pytest.mark.parametrize(
    ("before", "after", "old", "new"),
    [
        ({}, {"redact": ["password"]}, "redact=(none)", "redact=fields password"),
        ({"redact": ["password"]}, {}, "redact=fields password", "redact=(none)"),
        (
            {"redact": ["password"]},
            {"redact": hide_password},
            "redact=fields password",
            "redact=function tests.redaction.test_redaction.hide_password",
        ),
        ({}, {"redact_result": ["token"]}, "redact_result=(none)", "redact_result=fields token"),
        (
            {"redact_result": ["token"]},
            {"redact_result": ["user", "token"]},
            "redact_result=fields token",
            "redact_result=fields user, token",
        ),
    ],
    ids=["input-added", "input-dropped", "names-to-function", "result-added", "result-widened"],
)
async def test_a_deploy_changing_a_tools_redaction_is_recorded_or_refused(
    before: dict[str, Any], after: dict[str, Any], old: str, new: str
) -> None:
    from journal.events import LoopConfigured, LoopReconfigured
    from session import DefinitionDriftError
    from tests.support.loops import events_of

    async with open_journal("memory:") as journal:
        async with Session.create(journal, payroll(**before), session_id="s"):
            pass
        with pytest.raises(DefinitionDriftError, match="tool pay: redact"):
            async with Session.restore(journal, "s", payroll(**after), drift="refuse"):
                pass
        async with Session.restore(journal, "s", payroll(**after)):
            pass
        (configured,) = await events_of(journal, "s", LoopConfigured)
        (reconfigured,) = await events_of(journal, "s", LoopReconfigured)
        # Unchanged once recorded: a second restore commits nothing more.
        async with Session.restore(journal, "s", payroll(**after)):
            pass
        assert len(await events_of(journal, "s", LoopReconfigured)) == 1
    (change,) = reconfigured.changes
    assert change.what == "tool_redaction" and change.name == "pay"
    assert old in change.old and new in change.new
    (recorded,) = reconfigured.config.tools
    assert (recorded.redact, recorded.redact_result) != (
        configured.config.tools[0].redact,
        configured.config.tools[0].redact_result,
    )
