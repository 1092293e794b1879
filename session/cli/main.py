"""The ``loopruntime`` command: demo, chat, sessions, replay, fork, resolve, journal,
and (``hosting``) host, submit, answer, decide.

Every command takes ``--journal URL_OR_PATH`` (default
``$LOOPRUNTIME_JOURNAL``, else ``./.loopruntime/journal.db``).  Logging is
configured here and only here: human-readable on a terminal, JSON with
``--log-json``; API keys never reach a log.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import structlog
import trio

from journal import (
    JournalError,
    JournalLocation,
    SessionInfo,
    init_journal,
    make_journal_directory,
    parse_location,
)
from loopruntime import LoopError
from loopruntime.host import check_principal

from ..clients.client import CommandRefusedError
from ..embedded.fork import plan_fork, write_fork
from ..embedded.restore import resolve_offline
from ..replay import ReplayInputError, open_for_replay, replay_command
from ..traces.command import trace_command
from .chat import chat_definition, run_chat
from .hosting import add_commands, seconds, submit_command
from .listing import list_sessions

__all__ = ["main"]

DEFAULT_JOURNAL = "./.loopruntime/journal.db"


def journal_url(value: str | None, *, create: bool = False) -> str:
    """A journal URL from ``--journal``, the environment, or the default path.
    Only commands that start sessions (``create``) make the directory; the
    others must not conjure an empty journal out of a mistyped path."""
    location = parse_location(value or os.environ.get("LOOPRUNTIME_JOURNAL") or DEFAULT_JOURNAL)
    if create:
        hint = _relative_url_hint(location)
        if hint:
            print(f"loopruntime: note: {hint}", file=sys.stderr)
        make_journal_directory(location)
    return location.url


def _relative_url_hint(location: JournalLocation) -> str | None:
    """``sqlite:///tmp/x.db`` names ``./tmp/x.db``; when that directory is missing
    but ``/tmp`` exists, the absolute path was almost certainly meant."""
    if location.scheme != "sqlite" or location.plain_path or location.path is None:
        return None
    path = Path(location.path)
    if path.is_absolute() or path.parent.exists() or not Path("/", path).parent.exists():
        return None
    return (
        f"{location.url} is relative to this directory ({path}); for /{path} write "
        f"sqlite:////{path} (four slashes)"
    )


# The project's loggers: the library logs through the standard logger of each
# module's name (``structlog.wrap_logger(logging.getLogger(__name__))``) and
# configures nothing; the command decides here what reaches the terminal.
_PROJECT_LOGGERS = ("journal", "loopruntime", "session")


class _StderrHandler(logging.Handler):
    """Writes each line to ``sys.stderr`` as it is when the line is logged.

    ``logging.StreamHandler(sys.stderr)`` would keep the stream of the moment
    the CLI configured logging; a host that runs ``main`` in its own process
    and later swaps or closes that stream (a test harness capturing output
    does) would then fail every later log call with "I/O operation on closed
    file".
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(self.format(record), file=sys.stderr, flush=True)
        except Exception:
            self.handleError(record)


def _configure_logging(json_logs: bool, verbose: bool, info: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.INFO if info else logging.WARNING
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_logs
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        # Lines below the level are dropped before any processor runs.
        wrapper_class=structlog.make_filtering_bound_logger(level),
    )
    for name in _PROJECT_LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
            logger.removeHandler(old)
        logger.addHandler(_StderrHandler())
        logger.setLevel(level)
        logger.propagate = False


# -- demo ---------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    url = journal_url(args.journal, create=True)
    with tempfile.TemporaryDirectory(prefix="loopruntime-demo-") as work:
        return trio.run(run_demo, url, Path(work))


def cmd_chat(args: argparse.Namespace) -> int:
    session_id = _checked_text(args.session, "session id") if args.session else None
    # The model first: a bad --model is refused before the journal is touched.
    chosen = chat_definition(args.model, args.base_url)
    return trio.run(run_chat, journal_url(args.journal, create=True), session_id, chosen)


# -- sessions -----------------------------------------------------------------------


async def _sessions(args: argparse.Namespace) -> int:
    return await list_sessions(journal_url(args.journal))


def cmd_sessions(args: argparse.Namespace) -> int:
    return trio.run(_sessions, args)


# -- replay -------------------------------------------------------------------------


async def _replay(args: argparse.Namespace) -> int:
    # Not journal_url(): replay only reads, so it must not create directories.
    url = args.journal or os.environ.get("LOOPRUNTIME_JOURNAL") or DEFAULT_JOURNAL

    def out(text: str) -> None:
        print(text, flush=True)

    def err(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    session_id = _checked_text(args.session, "session id")
    if args.otlp is not None or args.format == "otel-json":
        others = args.check or args.follow or args.causes or args.at is not None
        if others or (args.otlp is not None and args.format != "transcript"):
            err("loopruntime replay: the trace (--otlp, --format otel-json) takes no other option")
            return 2
        return await trace_command(url, session_id, otlp=args.otlp, out=out, err=err)
    return await replay_command(
        url,
        session_id,
        fmt=args.format,
        check_only=args.check,
        follow=args.follow,
        at=args.at,
        causes=args.causes,
        inherited=not args.no_inherited,
        content=not args.no_content,
        color=sys.stdout.isatty(),
        out=out,
        err=err,
    )


def cmd_replay(args: argparse.Namespace) -> int:
    try:
        return trio.run(_replay, args)
    except KeyboardInterrupt:
        # Ctrl-C ends --follow; it is how a person stops watching.
        return 130


# -- fork ---------------------------------------------------------------------------


async def _fork(args: argparse.Namespace) -> int:
    # A missing or foreign file is refused before anything could create it.
    async with open_for_replay(journal_url(args.journal), write=True) as journal:
        plan = await plan_fork(
            journal,
            _checked_text(args.session, "session id"),
            args.at,
            None if args.new_session is None else _checked_text(args.new_session, "session id"),
        )
        await write_fork(journal, plan)
    print(plan.new_session_id)
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    return trio.run(_fork, args)


# -- resolve ------------------------------------------------------------------------


async def _resolve(args: argparse.Namespace) -> int:
    # A missing or foreign file is refused before anything could create it.
    async with open_for_replay(journal_url(args.journal), write=True) as journal:
        session_id = _checked_text(args.session, "session id")
        if not args.force:
            _refuse_live_owner(await journal.sessions(), session_id)
        await resolve_offline(
            journal,
            session_id,
            _checked_text(args.execution_id, "execution id"),
            _checked_text(args.result, "result"),
            is_error=args.error,
            principal=check_principal(args.principal),
        )
    print(f"resolved {args.execution_id}; the session continues when its host restores it")
    return 0


def _refuse_live_owner(infos: list[SessionInfo], session_id: str) -> None:
    """Resolving takes the session's lease and so fences its owner: refused
    while a host holds a live lease on it, unless ``--force``."""
    info = next((i for i in infos if i.session == session_id), None)
    if info is None or not info.live:
        return
    raise ValueError(
        f"session {session_id} is run by host {info.owner} (its lease is live); resolving "
        "here would fence that host: send the resolution through the inbox (--key KEY), "
        "or pass --force if that host is gone"
    )


def cmd_resolve(args: argparse.Namespace) -> int:
    if args.key is not None:
        return trio.run(submit_command, args, journal_url(args.journal))
    return trio.run(_resolve, args)


# -- journal ------------------------------------------------------------------------


async def _journal_init(args: argparse.Namespace) -> int:
    location = await init_journal(journal_url(args.url or args.journal, create=True))
    print(f"journal ready at {location.url}")
    return 0


def cmd_journal(args: argparse.Namespace) -> int:
    return trio.run(_journal_init, args)


# -- main ---------------------------------------------------------------------------


_JOURNAL_HELP = (
    "the journal: a SQLite path, sqlite:///relative.db, sqlite:////absolute.db, "
    "postgresql://user@host/db or memory: (default: $LOOPRUNTIME_JOURNAL, else "
    f"{DEFAULT_JOURNAL})"
)


class _OneLineParser(argparse.ArgumentParser):
    """Refuses a bad command line in one line, as every other refusal of the
    CLI is said: argparse's usage block would bury the reason under the
    options (``--help`` still shows them)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ('{self.prog} --help' lists the options)\n")


def _options() -> _OneLineParser:
    """The options every command takes, before or after its name.  Their
    defaults are suppressed here so that a value given before the command is
    not reset by the command's own parser."""
    common = _OneLineParser(add_help=False)
    common.add_argument(
        "--journal", metavar="URL_OR_PATH", default=argparse.SUPPRESS, help=_JOURNAL_HELP
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="log debug lines to stderr (and show a traceback for an unexpected error)",
    )
    common.add_argument(
        "--log-json", action="store_true", default=argparse.SUPPRESS, help="log as JSON lines"
    )
    return common


# One long table on purpose: every command and option in the order `--help`
# prints them, which the docs' command lines are checked against.
def parser() -> argparse.ArgumentParser:
    # Two instances: ``set_defaults`` on the top parser changes the defaults of
    # its actions, which ``parents`` shares with every parser built from them.
    common = _options()
    top = _OneLineParser(
        prog="loopruntime",
        description="Agent loops that never lie about what happened and never forget it.",
        epilog=f"Every command takes --journal; the default is $LOOPRUNTIME_JOURNAL, else "
        f"{DEFAULT_JOURNAL}.  'loopruntime COMMAND --help' describes a command.",
        parents=[_options()],
    )
    top.set_defaults(journal=None, verbose=False, log_json=False)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=description, parents=[common])

    command(
        "demo",
        "run the scripted demo: tools, a gate, a crash and a restore",
        "Run a scripted agent (no API key needed) on the journal: parallel tools, a "
        "permission gate, a child process killed mid-tool, the restore, the unknown effect "
        "resolved, and the journal check.",
    ).set_defaults(run=cmd_demo)
    chat = command(
        "chat",
        "chat interactively (Claude with ANTHROPIC_API_KEY, else a local echo)",
        "Chat with Claude when ANTHROPIC_API_KEY is set, else with a local echo model.  "
        "Ctrl-C stops a reply, Ctrl-D quits; every exchange is in the journal.",
    )
    chat.add_argument("--session", help="resume this session (its last exchanges are shown)")
    chat.add_argument(
        "--model",
        help="the model: a Claude model (needs ANTHROPIC_API_KEY; ignored without it), or "
        "openai:NAME for an OpenAI-compatible one (needs OPENAI_API_KEY or --base-url)",
    )
    chat.add_argument(
        "--base-url", help="the OpenAI-compatible server of --model openai:NAME, e.g. its /v1 URL"
    )
    chat.set_defaults(run=cmd_chat)
    command(
        "sessions",
        "list the sessions in the journal",
        "List every session in the journal with its loops, records, last activity and status.",
    ).set_defaults(run=cmd_sessions)
    replay = command(
        "replay",
        "show a session's journal, or check it",
        "Show a session as a transcript, a conversation tree or JSON, its state at a seq, or "
        "check every journal invariant.  Never writes to the journal.",
    )
    replay.add_argument("session", help="the session id ('loopruntime sessions' lists them)")
    replay.add_argument(
        "--format",
        choices=("transcript", "tree", "json", "unified", "otel-json"),
        default="transcript",
        help="transcript (default), the conversation tree, the tree as JSON, the unified "
        "conversation model as JSON (docs/replay.md), or the OpenTelemetry trace as "
        "OTLP/JSON (needs the otel extra)",
    )
    replay.add_argument(
        "--otlp",
        metavar="URL",
        help="export the session's trace to an OTLP/HTTP endpoint, e.g. "
        "http://localhost:4318/v1/traces (needs the otel extra)",
    )
    replay.add_argument(
        "--check", action="store_true", help="check every journal invariant (exit 1 if one fails)"
    )
    replay.add_argument("--follow", action="store_true", help="keep printing new records")
    replay.add_argument("--at", type=int, metavar="SEQ", help="show each loop's state at SEQ")
    replay.add_argument(
        "--causes", action="store_true", help="list each record with the record that caused it"
    )
    replay.add_argument(
        "--no-inherited",
        action="store_true",
        help="for a fork, leave out the conversation it inherited from its source (shown "
        "first by default, each line marked │)",
    )
    replay.add_argument(
        "--no-content",
        action="store_true",
        help="with --format unified, leave every payload out (content omitted, sizes kept)",
    )
    replay.set_defaults(run=cmd_replay)
    fork = command(
        "fork",
        "start a new session from a session's state at a seq",
        "Create a new session that starts where SESSION stood at seq SEQ, and print its id.  "
        "SESSION is never changed.  What was open at SEQ (a model call, a tool call) is "
        "settled as after a crash when the fork is first opened.",
    )
    fork.add_argument("session", help="the session to fork ('loopruntime sessions' lists them)")
    fork.add_argument(
        "--at", type=int, required=True, metavar="SEQ", help="the seq to fork at (1..head)"
    )
    fork.add_argument(
        "--new-session", metavar="ID", help="the fork's session id (default: a fresh one)"
    )
    fork.set_defaults(run=cmd_fork)
    resolve = command(
        "resolve",
        "settle a tool call whose outcome is unknown",
        "Settle a tool call that a crash left with an unknown outcome, with the result the "
        "model will see.  This takes the session's lease: a process still running the session "
        "is fenced (its next write fails), so it is refused while a host holds a live lease "
        "(--force to go ahead; --key sends it through the inbox instead); the session "
        "continues when a host restores it.",
    )
    resolve.add_argument("session", help="the session id")
    resolve.add_argument(
        "execution_id", help="the call's execution id ('loopruntime replay' shows it)"
    )
    resolve.add_argument("--result", required=True, help="the result the model will see")
    resolve.add_argument("--error", action="store_true", help="the call failed")
    resolve.add_argument(
        "--force",
        action="store_true",
        help="resolve even while a host holds a live lease on the session (that host is fenced)",
    )
    resolve.add_argument(
        "--key",
        help="send it through the session's inbox under this idempotency key instead (for a "
        "session a host runs: the host applies it)",
    )
    resolve.add_argument(
        "--wait",
        type=seconds,
        nargs="?",
        const=60.0,
        metavar="SECONDS",
        help="with --key: wait for the resolution's outcome (default 60 s)",
    )
    resolve.add_argument(
        "--principal",
        help="who resolves it (a user id, a service name), recorded on the resolution",
    )
    resolve.set_defaults(run=cmd_resolve)
    journal = command("journal", "journal administration", "Journal administration.")
    jsub = journal.add_subparsers(dest="journal_command", required=True, metavar="ACTION")
    init = jsub.add_parser(
        "init",
        help="create the journal and its schema",
        description="Create the journal (a SQLite file and its directories, or the PostgreSQL "
        "tables) and check its schema version.  Idempotent.",
        parents=[common],
    )
    init.add_argument(
        "url", nargs="?", metavar="URL_OR_PATH", help="the journal (the same as --journal)"
    )
    init.set_defaults(run=cmd_journal)
    add_commands(
        command,
        lambda args: journal_url(args.journal, create=True),
        lambda args: args.journal or os.environ.get("LOOPRUNTIME_JOURNAL") or DEFAULT_JOURNAL,
    )
    return top


def _checked_text(value: str, what: str) -> str:
    """``value`` when it is text; bytes that are not UTF-8 reach ``argv`` as lone
    surrogates, which no journal stores, so they are named here instead."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"the {what} {value!a} holds bytes that are not UTF-8 text; "
            "`loopruntime sessions` lists the session ids there are"
        ) from None
    return value


def _user_error(exc: BaseException) -> str | None:
    """What to tell a person about an error they can cause and mend (a bad path or
    URL, a journal that is not one, a key that cannot be sent); None for anything
    else, which is a bug and keeps its traceback."""
    while isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        if len(leaves) != 1:
            return None
        exc = leaves[0]
    if isinstance(
        exc, JournalError | LoopError | ReplayInputError | ValueError | CommandRefusedError
    ):
        return str(exc)
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    return None


def _tolerant_streams() -> None:
    """Text a terminal cannot show is replaced, never a crash; input that is not
    valid in the terminal's encoding is read with replacement characters."""
    for stream, errors in ((sys.stdout, "replace"), (sys.stderr, "backslashreplace")):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=errors)
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> int:
    _tolerant_streams()
    args = parser().parse_args(argv)
    _configure_logging(args.log_json, args.verbose, getattr(args, "info_logs", False))
    try:
        return int(args.run(args))
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep the
        # interpreter from failing again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        message = _user_error(exc)
        if message is None or args.verbose:
            raise
        print(f"loopruntime: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
