"""The ``loopruntime`` command: demo, chat, sessions, replay, resolve, journal.

Every command takes ``--journal URL_OR_PATH`` (default
``$LOOPRUNTIME_JOURNAL``, else ``./.loopruntime/journal.db``).  Logging is
configured here and only here: human-readable on a terminal, JSON with
``--log-json``; API keys never reach a log.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog
import trio

from journal import (
    JournalError,
    init_journal,
    make_journal_directory,
    open_journal,
    parse_location,
)
from journal.content import TextDelta
from loopruntime import LoopDefinition, LoopError
from loopruntime.models import ScriptedModel

from .replay import open_for_replay, replay_command
from .restore import read_states, resolve_offline
from .runtime import Session, StreamDelta

__all__ = ["main"]

DEFAULT_JOURNAL = "./.loopruntime/journal.db"


def journal_url(value: str | None, *, create: bool = False) -> str:
    """A journal URL from ``--journal``, the environment, or the default path.
    Only commands that start sessions (``create``) make the directory; the
    others must not conjure an empty journal out of a mistyped path."""
    location = parse_location(value or os.environ.get("LOOPRUNTIME_JOURNAL") or DEFAULT_JOURNAL)
    if create:
        make_journal_directory(location)
    return location.url


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


def _configure_logging(json_logs: bool, verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.WARNING
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


# -- chat ---------------------------------------------------------------------------


def chat_definition(model_name: str | None) -> tuple[LoopDefinition, str]:
    """Claude when ANTHROPIC_API_KEY is set, else the local echo brain."""
    from loopruntime.models.anthropic import AnthropicModel

    model: Any = AnthropicModel.from_env(model=model_name)
    if model is None:
        model = ScriptedModel.echo()
        said = "no ANTHROPIC_API_KEY: using the local scripted echo model"
    else:
        said = f"using {model.name}"
    return LoopDefinition(name="chat", model=model, system="You are a helpful assistant."), said


async def _chat(args: argparse.Namespace) -> int:
    definition, said = chat_definition(args.model)
    print(f"loopruntime chat — {said}. Ctrl-C stops a reply, Ctrl-D quits.", flush=True)
    async with open_journal(journal_url(args.journal, create=True)) as journal:
        opener = (
            Session.restore(journal, args.session, definition)
            if args.session
            else Session.create(journal, definition)
        )
        async with opener as s:
            print(f"session {s.id}", flush=True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_print_stream, s)
                nursery.start_soon(_interrupt_on_sigint, s)
                while True:
                    line = await trio.to_thread.run_sync(_read_line, abandon_on_cancel=True)
                    if line is None:
                        break
                    if not line.strip():
                        continue
                    await s.submit(line)
                    await s.wait_idle()
                    print(flush=True)
                nursery.cancel_scope.cancel()
    return 0


def _read_line() -> str | None:
    try:
        return input("you> ")
    except EOFError:
        return None


async def _print_stream(s: Session) -> None:
    """Print reply text as it streams (live deltas, not the journal)."""
    async for item in s.subscribe(after=await s.journal.head(s.id), deltas=True):
        if isinstance(item, StreamDelta) and isinstance(item.delta, TextDelta):
            print(item.delta.text, end="", flush=True)


async def _interrupt_on_sigint(s: Session) -> None:
    # Ctrl-C stops the reply, never the program: the chat keeps going.
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            if await s.interrupt():
                print("\n[interrupted]", flush=True)
            else:
                print("\n(nothing to interrupt; Ctrl-D quits)", flush=True)


def cmd_chat(args: argparse.Namespace) -> int:
    return trio.run(_chat, args)


# -- sessions -----------------------------------------------------------------------


async def _sessions(args: argparse.Namespace) -> int:
    # Opened like replay: a missing or foreign file is refused, never created.
    async with open_for_replay(journal_url(args.journal)) as journal:
        infos = await journal.sessions()
        if not infos:
            print("no sessions")
            return 0
        print(f"{'session':<24} {'loops':>5} {'records':>8}  {'last activity':<19}  status")
        damaged: list[str] = []
        for info in sorted(infos, key=lambda i: i.updated_at):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.updated_at / 1e9))
            try:
                states = await read_states(journal, info.session)
            except JournalError as exc:
                # One damaged session must not hide the others from the list.
                damaged.append(f"loopruntime sessions: {exc}")
                seq = getattr(exc, "seq", None)
                status = "damaged" + (f" at seq {seq}" if seq is not None else "")
                print(f"{info.session:<24} {'?':>5} {info.head:>8}  {when:<19}  {status}")
                continue
            statuses = ",".join(sorted({st.status.value for st in states.values()})) or "empty"
            print(f"{info.session:<24} {len(states):>5} {info.head:>8}  {when:<19}  {statuses}")
        for line in damaged:
            print(line, file=sys.stderr)
        if damaged:
            print(
                "loopruntime sessions: `loopruntime replay SESSION --check` names the first "
                "bad seq of a damaged session",
                file=sys.stderr,
            )
            return 1
    return 0


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

    return await replay_command(
        url,
        args.session,
        fmt=args.format,
        check_only=args.check,
        follow=args.follow,
        at=args.at,
        causes=args.causes,
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


# -- resolve ------------------------------------------------------------------------


async def _resolve(args: argparse.Namespace) -> int:
    # A missing or foreign file is refused before anything could create it.
    async with open_for_replay(journal_url(args.journal)) as journal:
        await resolve_offline(
            journal, args.session, args.execution_id, args.result, is_error=args.error
        )
    print(f"resolved {args.execution_id}; the session continues when its host restores it")
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    return trio.run(_resolve, args)


# -- journal ------------------------------------------------------------------------


async def _journal_init(args: argparse.Namespace) -> int:
    location = await init_journal(args.url)
    print(f"journal ready at {location.url}")
    return 0


def cmd_journal(args: argparse.Namespace) -> int:
    return trio.run(_journal_init, args)


# -- main ---------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="loopruntime", description=__doc__.splitlines()[0])
    top.add_argument("--log-json", action="store_true", help="log as JSON lines")
    top.add_argument("-v", "--verbose", action="store_true", help="log debug lines to stderr")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("--journal", help="journal URL or SQLite path")
        return p

    command("demo", "run the scripted demo: tools, a gate, a crash and a restore").set_defaults(
        run=cmd_demo
    )
    chat = command("chat", "chat interactively (Claude with ANTHROPIC_API_KEY, else echo)")
    chat.add_argument("--session", help="resume this session")
    chat.add_argument("--model", help="Claude model name (with ANTHROPIC_API_KEY)")
    chat.set_defaults(run=cmd_chat)
    command("sessions", "list the sessions in the journal").set_defaults(run=cmd_sessions)
    replay = command("replay", "show a session's journal, or check it")
    replay.add_argument("session")
    replay.add_argument(
        "--format",
        choices=("transcript", "tree", "json"),
        default="transcript",
        help="transcript (default), the conversation tree, or the tree as JSON",
    )
    replay.add_argument("--check", action="store_true", help="check every journal invariant")
    replay.add_argument("--follow", action="store_true", help="keep printing new records")
    replay.add_argument("--at", type=int, metavar="SEQ", help="show each loop's state at SEQ")
    replay.add_argument(
        "--causes", action="store_true", help="list each record with the record that caused it"
    )
    replay.set_defaults(run=cmd_replay)
    resolve = command("resolve", "settle a tool call whose outcome is unknown")
    resolve.add_argument("session")
    resolve.add_argument("execution_id")
    resolve.add_argument("--result", required=True, help="the result the model will see")
    resolve.add_argument("--error", action="store_true", help="the call failed")
    resolve.set_defaults(run=cmd_resolve)
    journal = sub.add_parser("journal", help="journal administration")
    jsub = journal.add_subparsers(dest="journal_command", required=True)
    init = jsub.add_parser("init", help="create the journal schema")
    init.add_argument("url")
    init.set_defaults(run=cmd_journal)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    _configure_logging(args.log_json, args.verbose)
    try:
        return int(args.run(args))
    except (JournalError, LoopError) as exc:
        print(f"loopruntime: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
