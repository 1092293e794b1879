"""The ./dev entry point speaks to people: help without shell internals, a named error."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_dev_without_arguments_prints_its_usage() -> None:
    done = subprocess.run([ROOT / "dev"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    assert "./dev demo" in done.stdout
    assert "set -" not in done.stdout
    assert not any(line.startswith("#") for line in done.stdout.splitlines())


def test_dev_refuses_an_unknown_command() -> None:
    done = subprocess.run([ROOT / "dev", "frobnicate"], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "unknown command 'frobnicate'" in done.stderr
