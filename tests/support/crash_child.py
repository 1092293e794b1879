"""The one child process of the crash tests: ``python -m tests.support.crash_child
SCENARIO ARG...`` runs one scenario until it is SIGKILLed (or ends).

Rules: a scenario is an async function of string arguments, listed in ``SCENARIOS``; it
reaches its kill point through ``tests.support.processes`` (``ready`` or ``kill_self``),
and the parent side of that protocol lives there too.  Logs go to stderr, warnings and
above only: stdout is the READY channel.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable

import structlog
import trio

from tests.support import (
    crash_budgets,
    crash_hosts,
    crash_pause,
    crash_points,
    crash_progress,
    crash_redaction,
    crash_scenarios,
    crash_traces,
    crash_wal,
    keyed,
    load_hosts,
)
from tests.support.processes import CHILD

SCENARIOS: dict[str, Callable[..., Awaitable[None]]] = {
    # URL SESSION_ID SIDE_FILE: one loop, killed with one kind of work in flight.
    "stream": crash_scenarios.stream,
    "permission": crash_scenarios.permission,
    "question": crash_scenarios.question,
    "effect": crash_scenarios.effect,
    "replay": crash_scenarios.replay,
    "survey": crash_scenarios.survey,
    "form": crash_scenarios.form,
    "steer": crash_scenarios.steer,
    "hooks": crash_scenarios.hooks,
    # URL SESSION_ID WORKDIR: killed while an MCP server runs a call
    "mcp": crash_scenarios.mcp,
    # URL SESSION_ID WORKDIR yes|no: killed while an MCP server's page to open
    # waits at its gate, the server resumable (yes) or not
    "mcp-url": crash_scenarios.mcp_url,
    # URL SESSION_ID SIDE_FILE: killed between the model calls of a turn under a budget
    "budget": crash_budgets.run,
    # URL SESSION_ID: paused while a tool ran, killed with the turn held
    "paused": crash_pause.paused_mid_turn,
    # URL SESSION_ID
    "delegation": crash_scenarios.delegation,
    "compaction": crash_scenarios.compaction,
    # COMMAND URL SESSION_ID WORKDIR: killed right after a keyed command is committed.
    "keyed": keyed.crash,
    "reconfigure": crash_scenarios.reconfigure,
    "inference": crash_scenarios.inference,
    "live-host": crash_scenarios.live_host,
    # URL SESSION_ID yes|no: killed once a tool's progress reports are durable,
    # the tool replay-safe (yes) or not
    "progress": crash_progress.progress,
    # WORKDIR [KILL_AFTER], then WORKDIR
    "deadline": crash_scenarios.deadline,
    "deadline-restore": crash_scenarios.deadline_restore,
    # WORKDIR [KILL_AFTER], then WORKDIR
    "crash-points": crash_points.run,
    "crash-points-restore": crash_points.restore,
    # WORKDIR KILL_AFTER, then WORKDIR: the same, with a trace exporter following
    "crash-traces": crash_traces.run,
    "crash-traces-restore": crash_traces.restore,
    # WORKDIR KILL_AFTER: a session on a FULL journal, its WAL written ahead
    "crash-wal": crash_wal.run,
    # URL SIDE_FILE ENTRY before|after: a host killed at the append consuming ENTRY
    "host-consume": crash_hosts.host_consume,
    # URL SIDE_FILE [TTL]: a host killed while a tool call runs
    "host-tool": crash_hosts.host_tool,
    # URL SIDE_FILE GO_FILE: a host paused while its tool waits for GO_FILE
    "host-pause": crash_hosts.host_pause,
    # URL SESSION_ID WORKDIR: a replay-safe tool that redacts its input, killed as it runs
    "redacted": crash_redaction.redacted,
    # URL SIDE_DIR HOST_ID: a host of the load test, until killed or stopped
    "load-host": load_hosts.load_host,
    # URL COUNT: the load test's client, driving COUNT sessions to the end
    "load-client": load_hosts.load_client,
}


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in SCENARIOS:
        raise SystemExit(f"usage: python -m {CHILD} {{{','.join(SCENARIOS)}}} ARG...")
    # The library never configures logging; this program keeps it to warnings, on stderr.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    trio.run(SCENARIOS[argv[0]], *argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
