"""Child processes for crash tests: run one until it says READY, then SIGKILL it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[2]


async def kill_when_ready(module: str, *args: str) -> None:
    """Run ``python -m module args...`` from the repository root; once it
    prints READY, kill it with SIGKILL (no cleanup of any kind runs)."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", module, *args], stdout=subprocess.PIPE, cwd=ROOT
    )
    assert proc.stdout is not None
    said = b""
    with trio.fail_after(120):  # a hung child must not hang CI; not a timing assertion
        while b"READY" not in said:
            chunk = await proc.stdout.receive_some()
            if not chunk:
                break
            said += chunk
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    assert b"READY" in said, f"{module} never reached its kill point: {said!r}"
    assert proc.returncode == -signal.SIGKILL
