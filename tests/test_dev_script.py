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


def test_dev_test_prints_only_what_pytest_prints() -> None:
    # scripts/ensure-postgres prints the directory it found; ./dev keeps it for itself.
    done = subprocess.run(
        [
            ROOT / "dev",
            "test",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{__file__}::test_dev_refuses_an_unknown_command",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0].startswith("."), done.stdout
