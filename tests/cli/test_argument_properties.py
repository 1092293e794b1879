"""Property tests at the command line's edge: any arguments to any command
end in its outcome or one line naming what was refused (exit 1 or 2), never
a traceback, and a refused command writes nothing.

The commands run in this process (``main``) on one SQLite journal that holds
a session asked for through the inbox (``s1``) and one with records
(``s3``); each example compares the journal's sessions, heads, incarnations
and waiting entries before and after.  ``host`` runs until stopped, so its
numbers are only parsed here; ``console`` writes only when a person acts (its
own tests cover that), ``demo`` takes no arguments, and ``journal init``
would create journals wherever its argument points."""

from __future__ import annotations

import argparse
import io
import math
import uuid
from collections.abc import Iterator

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import open_blocking, open_journal
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel
from session import Session, SyncClient
from session.cli.hosting import seconds
from session.cli.main import main, parser

# Text as argv can hold it: no NUL; lone surrogates are what bytes that are
# not UTF-8 become, so one is among the samples.
_TEXT = st.text(st.characters(blacklist_characters="\x00"), max_size=20)
# Half the draws are good values, so that bad ones meet commands that would
# otherwise write: a refusal after a write shows only there.
_IDS = st.sampled_from(["s1", "s3"]) | st.sampled_from(["nosuch", "", "\udcff", "-x"]) | _TEXT
FRESH = "<fresh key>"
"""Replaced by a key not used yet when the command runs: the journal lives
across examples, and a put under a used key would write nothing."""
_NUMBERS = (
    st.sampled_from(["-5", "0", "nan", "inf", "-inf", "1e309", "soon", "", "-0.0", "2.5"])
    | st.integers(-(2**70), 2**70).map(str)
    | st.floats().map(str)
)

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def waiting(text: str) -> str:
    """``--wait``'s value, with any that would wait kept to 0: no host runs
    here, so a positive wait would only sit out its time."""
    try:
        value = seconds(text)
    except argparse.ArgumentTypeError:
        return text
    return "0" if value > 0 else text


@st.composite
def inbox_commands(draw: st.DrawFn) -> list[str]:
    """A command that would write, with at most one argument drawn from
    anything: a refusal after a write would show on that argument."""
    command = draw(st.sampled_from(["submit", "answer", "decide", "resolve"]))
    wild = draw(
        st.sampled_from(["", "session", "text", "key", "principal", "wait", "gate", "choice"])
    )

    def pick(field: str, good: st.SearchStrategy[str], anything: st.SearchStrategy[str]) -> str:
        return draw(anything if field == wild else good)

    session = pick("session", st.just("s1"), _IDS)
    gate = pick("gate", st.just("gate_1"), _IDS)
    text = pick("text", st.just("hi"), st.sampled_from(["", "  "]) | _TEXT)
    match command:
        case "submit":
            argv = ["submit", session, text]
            if wild == "choice" or draw(st.booleans()):
                argv += ["--create", pick("choice", st.just("counter"), _TEXT)]
        case "answer":
            argv = ["answer", session, gate, text]
        case "decide":
            argv = ["decide", session, gate]
            argv.append(pick("choice", st.sampled_from(["allow", "deny"]), _TEXT))
            argv += ["--scope", pick("choice", st.just("once"), _TEXT)]
        case _:
            argv = ["resolve", session, gate, "--result", text]
            if draw(st.booleans()):
                argv += ["--error"]
    argv += ["--key", pick("key", st.just(FRESH), st.sampled_from(["c1", "k" * 201]) | _TEXT)]
    if wild == "principal" or draw(st.booleans()):
        argv += ["--principal", pick("principal", st.just("ops"), _TEXT)]
    if wild == "wait" or draw(st.booleans()):
        argv += ["--wait", waiting(pick("wait", st.just("0"), _NUMBERS))]
    return argv


@st.composite
def reading_commands(draw: st.DrawFn) -> list[str]:
    """The commands that read, fork or resolve offline (no inbox)."""
    session = draw(_IDS)
    match draw(st.sampled_from(["sessions", "replay", "fork", "resolve"])):
        case "sessions":
            return ["sessions"]
        case "replay":
            argv = ["replay", session]
            if draw(st.booleans()):
                argv += ["--at", draw(_NUMBERS)]
            if draw(st.booleans()):
                argv += ["--format", draw(st.sampled_from(["transcript", "tree", "json", "x"]))]
            if draw(st.booleans()):
                argv += ["--check"]
            return argv
        case "fork":
            argv = ["fork", session, "--at", draw(_NUMBERS)]
            if draw(st.booleans()):
                argv += ["--new-session", draw(_IDS)]
            return argv
        case _:
            return ["resolve", session, draw(_IDS), "--result", draw(_TEXT)]


def snapshot(url: str) -> list[tuple[str, int, int, int, str | None]]:
    blocking = open_blocking(url)
    try:
        return [
            (i.session, i.head, i.incarnation, i.pending, i.definition) for i in blocking.sessions()
        ]
    finally:
        blocking.close()


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli-properties') / 'journal.db'}"
    with SyncClient.open(url) as client:
        client.create("counter", session_id="s1", key="c1")

    async def one_turn() -> None:
        plain = LoopDefinition(name="plain", model=ScriptedModel(lambda _r: Reply(text="hi")))
        async with open_journal(url) as journal:
            async with Session.create(journal, plain, session_id="s3") as s:
                await s.submit("hello")
                await s.wait_idle()

    trio.run(one_turn)
    yield url


def outcome(url: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit code of ``loopruntime ARGV`` and what it said on stderr (an
    exception escaping ``main`` is a traceback a person would see: it fails
    the test)."""
    try:
        code = main([*argv, "--journal", url])
    except SystemExit as exit:  # argparse's refusal, or --help
        code = int(exit.code or 0)
    said = capsys.readouterr().err
    if code:
        assert said.strip(), f"{argv!r} exited {code} saying nothing"
    assert "Traceback" not in said
    return code, said


def check(url: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = [uuid.uuid4().hex if a == FRESH else a for a in argv]
    before = snapshot(url)
    code, said = outcome(url, argv, capsys)
    assert code in (0, 1, 2), (argv, code)
    # A wait that ran out follows a write that was the command's outcome (no
    # host runs here); any other failure is a refusal, and writes nothing.
    if code and "was not applied within" not in said:
        assert snapshot(url) == before, f"{argv!r} was refused after writing: {said}"


@settings(SETTINGS, max_examples=60)
@given(argv=inbox_commands())
def test_inbox_commands(url: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    check(url, argv, capsys)


@SETTINGS
@given(argv=reading_commands())
def test_reading_commands(url: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    check(url, argv, capsys)


@SETTINGS
@given(
    session=st.none() | _IDS,
    model=st.none() | _TEXT,
    said=st.sampled_from(["", "hello\n", "  \n\nhi\n"]),
)
def test_chat(
    url: str,
    session: str | None,
    model: str | None,
    said: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``chat`` reads its lines from stdin (here: a few, then its end) with the
    local echo model (no API key)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(said))
    argv = ["chat"]
    if session is not None:
        argv += ["--session", session]
    if model is not None:
        argv += ["--model", model]
    check(url, argv, capsys)


@SETTINGS
@given(
    option=st.sampled_from(["--lease-ttl", "--idle-after", "--poll", "--max-sessions"]),
    value=_NUMBERS,
)
def test_host_options_are_refused_by_argparse_or_usable(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the host would be given: a refusal naming the option before
    anything runs, or a value ``Host`` takes (positive, finite)."""
    argv = ["host", "--definitions", "m:D", option, value]
    try:
        args = parser().parse_args(argv)
    except SystemExit as exit:
        assert exit.code == 2
        assert option in capsys.readouterr().err
        return
    given_value = getattr(args, option.lstrip("-").replace("-", "_"))
    assert given_value > 0 and math.isfinite(given_value)
    if option == "--max-sessions":
        assert isinstance(given_value, int)


def test_the_strategies_reach_every_inbox_and_reading_command() -> None:
    """The generated commands cover each form (a hand check on the strategies)."""
    names = {"submit", "answer", "decide", "resolve", "sessions", "replay", "fork"}
    seen: set[str] = set()

    @settings(max_examples=200, database=None)
    @given(argv=inbox_commands() | reading_commands())
    def collect(argv: list[str]) -> None:
        seen.add(argv[0])

    collect()
    assert seen == names
