"""The ``loopruntime host``, ``submit`` and ``console`` commands.

``host`` runs a ``Host`` for the definitions a module names until SIGTERM or
SIGINT, then stops cleanly (its sessions handed over at once); it logs its
claims, failovers and passivations.  ``submit`` writes a command into a
session's inbox under ``--key`` and, with ``--wait``, prints its outcome.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import signal
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import trio

from journal import InboxKeyError, Journal, SessionNotFoundError, open_journal, parse_location
from journal import inbox as ib
from loopruntime import LoopDefinition
from loopruntime.models import RateLimit

from ..clients.client import Client, check_key
from ..clients.client import submit_command as submit_input
from ..clients.client_checks import with_principal
from ..hosting.host import Host
from ..hosting.metrics_endpoint import bind_metrics, metrics_address, serving_metrics

__all__ = [
    "add_commands",
    "count",
    "load_definitions",
    "positive_seconds",
    "rate_limit_of",
    "seconds",
    "submit_command",
]


def seconds(text: str) -> float:
    """An option's number of seconds, 0 or more (``inf``: no bound); argparse
    names the option and exits 2 before the command writes anything."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, not {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """``seconds``, above 0 and finite (a lease, a poll: a period)."""
    value = seconds(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, not {text!r}")
    return value


def count(text: str) -> int:
    """A whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, not {text!r}")
    return value


def load_definitions(spec: str) -> dict[str, LoopDefinition]:
    """``module:NAME``: a ``LoopDefinition``, a sequence or mapping of them, or a
    function returning one; keyed by each definition's name."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(
            f"--definitions takes module:NAME (for example myapp.agents:DEFINITIONS), not {spec!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--definitions: cannot import {module_name!r} ({exc})") from exc
    except Exception as exc:
        # The module's own code failed while it was imported: a person's
        # mistake in their module, told in one line (-v shows the traceback).
        raise ValueError(
            f"--definitions: importing {module_name} failed: {_one_line(exc)}"
        ) from exc
    try:
        found: Any = getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"--definitions: module {module_name} has no {attribute!r}") from None
    if callable(found) and not isinstance(found, LoopDefinition):
        try:
            found = found()
        except Exception as exc:
            raise ValueError(
                f"--definitions {spec}: calling {attribute}() failed: {_one_line(exc)}; name a "
                "LoopDefinition, a list or mapping of them, or a function that returns one "
                "when called with no arguments"
            ) from exc
    if isinstance(found, LoopDefinition):
        found = [found]
    if isinstance(found, Mapping):
        found = list(found.values())
    definitions = list(found) if isinstance(found, list | tuple) else None
    if not definitions or not all(isinstance(d, LoopDefinition) for d in definitions):
        raise ValueError(
            f"--definitions {spec}: expected a LoopDefinition, a list or mapping of them, or a "
            f"function returning one, not {type(found).__name__}"
        )
    return {d.name: d for d in definitions}


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}".rstrip(": ")


def reachable_journal(url: str, who: str) -> str:
    """``url``, unless it names a memory journal: that one lives inside this
    process, so no client, host or console elsewhere could ever reach it."""
    if parse_location(url).scheme == "memory":
        raise ValueError(
            f"{who} needs a journal other processes can reach, and memory: lives inside "
            "this process only (no client could send it anything): give --journal a SQLite "
            "path or a postgresql:// URL"
        )
    return url


def rate_limit_of(args: argparse.Namespace) -> RateLimit | None:
    """The run's default rate limit that ``--requests-per-minute`` and
    ``--tokens-per-minute`` give, or None when neither is set."""
    rpm, tpm = args.requests_per_minute, args.tokens_per_minute
    if rpm is None and tpm is None:
        return None
    return RateLimit(requests_per_minute=rpm, tokens_per_minute=tpm)


async def _host(args: argparse.Namespace, url: str) -> int:
    definitions = load_definitions(args.definitions)
    listeners = await bind_metrics(args.metrics)
    async with open_journal(url) as journal:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with (
                Host.open(
                    journal,
                    definitions,
                    host_id=args.host_id,
                    idle_after=args.idle_after,
                    lease_ttl=args.lease_ttl,
                    max_sessions=args.max_sessions,
                    poll=args.poll,
                    principals=args.known_principals,
                    # The run's default: every model the definitions use that sets none.
                    rate_limit=rate_limit_of(args),
                ) as host,
                serving_metrics(host, listeners) as served,
            ):
                print(
                    f"host {host.id} runs {', '.join(sorted(definitions))} on {url}; "
                    "SIGTERM or Ctrl-C stops it cleanly",
                    flush=True,
                )
                if served is not None:
                    print(f"metrics at {served} (and /healthz, /readyz)", flush=True)
                async for _ in signals:
                    break
    return 0


async def submit_command(args: argparse.Namespace, url: str) -> int:
    async with open_journal(url) as journal:
        client = Client(journal)
        session, key, who = args.session, args.key, args.principal
        match args.command:
            case "submit":
                if args.create is not None:
                    # Two writes: the input, and its key against the inbox, are
                    # checked before the first, so a refused one leaves no
                    # session behind.
                    await _check_key_free(journal, session, check_key(key), args.text, who)
                    # The same key makes the pair safe to resend: each entry once.
                    await client.create(
                        args.create, session_id=session, key=f"{key}/create", principal=who
                    )
                entry = await client.submit(session, args.text, key=key, principal=who)
            case "answer":
                entry = await client.answer(
                    session, args.gate_id, args.text, key=key, principal=who
                )
            case "decide":
                entry = await client.decide(
                    session, args.gate_id, args.allow == "allow", args.scope, key=key, principal=who
                )
            case _:
                entry = await client.resolve(
                    session, args.execution_id, args.result, args.error, key=key, principal=who
                )
        print(f"inbox entry {entry.number} of session {session} (key {key})", flush=True)
        if args.wait is not None:
            outcome = await client.wait(session, key, timeout=args.wait)
            print(
                "applied"
                + (f": {outcome.value}" if outcome.value is not None else "")
                + (f" (record {outcome.record})" if outcome.record else "")
            )
    return 0


async def pause_command(args: argparse.Namespace, url: str) -> int:
    """``pause`` / ``resume``: the command through the session's inbox, under
    ``--key`` or a fresh one (both are idempotent: a second pause records
    nothing), and its outcome with ``--wait``."""
    async with open_journal(url) as journal:
        client = Client(journal)
        session, who = args.session, args.principal
        key = args.key if args.key is not None else f"{args.command}-{uuid.uuid4().hex}"
        send = client.pause if args.command == "pause" else client.resume
        entry = await send(session, key=key, loop=args.loop, principal=who)
        print(f"inbox entry {entry.number} of session {session} (key {key})", flush=True)
        if args.wait is not None:
            outcome = await client.wait(session, key, timeout=args.wait)
            pausing = args.command == "pause"
            if outcome.value:
                print("paused" if pausing else "resumed")
            else:
                print("applied: it was already paused" if pausing else "applied: it was not paused")
    return 0


async def _check_key_free(
    journal: Journal, session: str, key: str, text: str, principal: str | None
) -> None:
    """Refuse, before anything is written, a submit whose key the session's
    inbox already holds for another command (``InboxKeyError``, as the put
    itself would, but only after the create went in).  The same command under
    its key is a resend, which goes on."""
    command = with_principal(submit_input(text, None), principal)
    try:
        earlier = await journal.entry(session, key)
    except SessionNotFoundError:
        return  # a session not there yet holds no key
    if earlier is None:
        return
    if earlier.command is None or ib.encode_command(earlier.command) != ib.encode_command(command):
        raise InboxKeyError(session, key, earlier.number)


# One long table on purpose: each command's options read top to bottom as
# `loopruntime host --help` prints them; split, the table would be scattered.
def add_commands(
    command: Callable[[str, str, str], argparse.ArgumentParser],
    url: Callable[[argparse.Namespace], str],
    console_url: Callable[[argparse.Namespace], str],
) -> None:
    """Add ``host``, ``submit``, the inbox forms of ``answer`` and ``decide``, and
    ``console`` (whose journal must exist: ``console_url`` creates nothing)."""
    host = command(
        "host",
        "run sessions from the inbox until SIGTERM",
        "Run a host: take sessions that have inbox entries and no live owner, or whose "
        "owner's lease expired, and run them with the definitions named by --definitions; "
        "stop cleanly on SIGTERM or Ctrl-C (sessions with work are handed over at once).",
    )
    host.add_argument(
        "--definitions",
        required=True,
        metavar="MODULE:NAME",
        help="the loop definitions to run: a LoopDefinition, a list or mapping of them, or "
        "a function returning one",
    )
    host.add_argument("--host-id", help="this host's id (default: a fresh one)")
    host.add_argument(
        "--lease-ttl", type=positive_seconds, default=30.0, help="lease seconds (default 30)"
    )
    host.add_argument(
        "--idle-after", type=positive_seconds, default=300.0, help="passivate after idle seconds"
    )
    host.add_argument("--max-sessions", type=count, default=1000, help="sessions loaded at most")
    host.add_argument(
        "--poll", type=positive_seconds, default=1.0, help="seconds between looks for work"
    )
    host.add_argument(
        "--known-principal",
        dest="known_principals",
        action="append",
        metavar="PRINCIPAL",
        help="take commands only from this principal (repeat for each); commands from "
        "others, or naming none, are refused with UnknownPrincipalError (default: anyone)",
    )

    host.add_argument(
        "--requests-per-minute",
        type=count,
        metavar="N",
        help="model requests per minute shared by every loop of this host, for each model "
        "its definitions use that sets no rate_limit (default: no limit)",
    )
    host.add_argument(
        "--tokens-per-minute",
        type=count,
        metavar="N",
        help="model tokens (input plus output) per minute shared the same way (default: no limit)",
    )

    host.add_argument(
        "--metrics",
        type=metrics_address,
        metavar="HOST:PORT",
        help="serve Prometheus metrics at /metrics, and /healthz and /readyz, there (a bare "
        "port: loopback only; needs the metrics extra; default: not served)",
    )

    def run_host(args: argparse.Namespace) -> int:
        return trio.run(_host, args, reachable_journal(url(args), "a host"))

    # Its claims, failovers and passivations are what a person runs it to see.
    host.set_defaults(run=run_host, info_logs=True)

    def run_submit(args: argparse.Namespace) -> int:
        return trio.run(submit_command, args, url(args))

    def sender_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--principal",
            help="who sends the command (a user id, a service name), recorded on what it makes",
        )
        parser.add_argument(
            "--wait",
            type=seconds,
            nargs="?",
            const=60.0,
            metavar="SECONDS",
            help="wait for the command's outcome (default 60 s; inf: until it comes)",
        )

    def inbox_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--key", required=True, help="idempotency key: resending is safe")
        sender_options(parser)
        parser.set_defaults(run=run_submit)

    submit = command(
        "submit",
        "send input to a session through its inbox",
        "Write input for SESSION into its inbox; the host that owns it applies it once.",
    )
    submit.add_argument("session")
    submit.add_argument("text")
    submit.add_argument(
        "--create",
        metavar="DEFINITION",
        help="start the session first (when new) with this definition; a host running it "
        "takes the session",
    )
    inbox_options(submit)
    answer = command(
        "answer",
        "answer a question through the inbox",
        "Answer an open question gate: text; for a form, JSON that fits its schema; for a "
        "URL gate, the confirmation (and the value it asks for).",
    )
    answer.add_argument("session")
    answer.add_argument("gate_id")
    answer.add_argument("text")
    inbox_options(answer)
    decide = command(
        "decide", "allow or deny a permission through the inbox", "Decide a permission gate."
    )
    decide.add_argument("session")
    decide.add_argument("gate_id")
    decide.add_argument("allow", choices=("allow", "deny"))
    decide.add_argument("--scope", choices=("once", "session"), default="once")
    inbox_options(decide)

    def run_pause(args: argparse.Namespace) -> int:
        return trio.run(pause_command, args, url(args))

    for name, brief, long in (
        (
            "pause",
            "pause a loop through the inbox",
            "Pause a loop of SESSION through its inbox: it starts no model call, tool, child or "
            "turn until resumed (a step already running finishes); input and answers wait.",
        ),
        (
            "resume",
            "resume a paused loop through the inbox",
            "End a loop's pause through the inbox; what waited goes on.",
        ),
    ):
        pausing = command(name, brief, long)
        pausing.add_argument("session")
        pausing.add_argument("--loop", help="the loop (default: the session's root loop)")
        pausing.add_argument(
            "--key", help="idempotency key (default: a fresh one; resending is safe either way)"
        )
        sender_options(pausing)
        pausing.set_defaults(run=run_pause)
    console = command(
        "console",
        "a web page to watch sessions live and answer what waits on a person",
        "Serve the console: the sessions, each one's transcript live, its conversation tree, "
        "its state at any seq, and forms to answer gates and resolve unknown effects (sent "
        "through the inbox).  It prints an address holding a token; every request needs it.",
    )
    console.add_argument(
        "--bind",
        default="127.0.0.1:8740",
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:8740, loopback only; port 0 picks a free one)",
    )
    console.add_argument(
        "--read-only", action="store_true", help="show sessions only: no action is offered"
    )
    console.add_argument(
        "--principal",
        metavar="NAME",
        help="who the console's commands are from (a user id, a service name): recorded on "
        "every answer, decision and resolution it sends; no authorization is implied",
    )

    def run_console(args: argparse.Namespace) -> int:
        journal = reachable_journal(console_url(args), "the console")
        from ..console import serve_console

        def out(text: str) -> None:
            print(text, flush=True)

        return trio.run(
            functools.partial(
                serve_console, read_only=args.read_only, principal=args.principal, out=out
            ),
            journal,
            args.bind,
        )

    console.set_defaults(run=run_console)
