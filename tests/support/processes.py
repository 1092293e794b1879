"""The crash tests' protocol between a test and the child process it SIGKILLs.

Rules: every child is ``python -m tests.support.crash_child SCENARIO ARG...`` started
from the repository root; a scenario reaches its kill point either by calling ``ready``
(the parent then SIGKILLs it) or by calling ``kill_self``; the child's stdout carries
READY and nothing else; a killed child runs no cleanup of any kind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[2]
CHILD = "tests.support.crash_child"
READY = b"READY"


# -- child side -----------------------------------------------------------------------


def ready() -> None:
    """Tell the parent this child reached its kill point (it may say so more than once)."""
    print(READY.decode(), flush=True)


def kill_self() -> None:
    """SIGKILL this process now: for a kill point only the child can time."""
    os.kill(os.getpid(), signal.SIGKILL)


# -- parent side ----------------------------------------------------------------------


def _command(scenario: str, args: tuple[str, ...]) -> list[str]:
    return [sys.executable, "-m", CHILD, scenario, *args]


async def kill_when_ready(scenario: str, *args: str) -> None:
    """Run the scenario in a child process; once it says READY, SIGKILL it."""
    proc = await trio.lowlevel.open_process(
        _command(scenario, args), stdout=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None
    said = b""
    with trio.fail_after(120):  # a hung child must not hang CI; not a timing assertion
        while READY not in said:
            chunk = await proc.stdout.receive_some()
            if not chunk:
                break
            said += chunk
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    assert READY in said, f"scenario {scenario} never reached its kill point: {said!r}"
    assert proc.returncode == -signal.SIGKILL


async def run_child(scenario: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run the scenario in a child process until it ends or kills itself; its exit status
    and output, for the caller to judge."""
    return await trio.run_process(
        _command(scenario, args),
        cwd=ROOT,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
