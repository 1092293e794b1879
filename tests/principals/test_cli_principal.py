"""``--principal`` on the inbox commands of the ``loopruntime`` command."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import trio

from journal import inbox as ib
from journal import open_journal
from tests.cli.test_host_cli import cli
from tests.support.processes import ROOT


async def run(*args: str) -> trio.CompletedProcess[bytes]:
    return await trio.run_process(
        cli(*args), cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False
    )


async def test_inbox_commands_carry_the_principal_given(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    sent = await run(
        "submit", "s1", "hello", "--key", "k1", "--create", "agent", "--principal", "ann",
        "--journal", url,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr.decode()
    answered = await run(
        "answer", "s1", "gate_1", '{"city": "Oslo", "zip": 150}', "--key", "k2",
        "--principal", "bob", "--journal", url,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr.decode()
    long = await run(
        "submit", "s1", "hi", "--key", "k3", "--principal", "x" * 201, "--journal", url
    )
    assert long.returncode == 2 and "a principal holds at most 200" in long.stderr.decode()
    async with open_journal(url) as journal:
        entries = await journal.inbox("s1")
    commands = [e.command for e in entries]
    assert isinstance(commands[0], ib.Create) and commands[0].principal == "ann"
    assert isinstance(commands[1], ib.Submit) and commands[1].principal == "ann"
    assert isinstance(commands[2], ib.Answer) and commands[2].principal == "bob"
    assert commands[2].text == '{"city": "Oslo", "zip": 150}'
    assert len(commands) == 3


async def test_a_host_process_takes_only_its_known_principals(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    host = await trio.lowlevel.open_process(
        cli(
            "host", "--journal", url, "--definitions",
            "tests.support.crash_hosts:cli_definitions", "--host-id", "h1", "--poll", "0.05",
            "--known-principal", "ann", "--known-principal", "ops",
        ),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        ok = await run(
            "submit", "s1", "fetch it", "--key", "k1", "--create", "fetcher", "--principal",
            "ann", "--wait", "--journal", url,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr.decode()
        refused = await run(
            "submit", "s1", "fetch more", "--key", "k2", "--principal", "bob", "--wait",
            "--journal", url,
        )  # fmt: skip
        assert refused.returncode == 2
        said = refused.stderr.decode()
        assert "UnknownPrincipalError" in said and "principal 'bob' is not one host h1" in said
    finally:
        os.kill(host.pid, signal.SIGTERM)
        await host.wait()
    assert host.returncode == 0
