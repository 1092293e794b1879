"""``loopruntime console``: bad input is a sentence and exit 2, never a
traceback; a real console process prints its address with the token,
answers on loopback, and stops cleanly on SIGTERM."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from journal import init_journal
from session.cli.main import main
from session.console import parse_bind
from tests.support.processes import ROOT


def test_a_journal_that_does_not_exist_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "journal.db"
    assert main(["console", "--journal", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loopruntime: ") and "Traceback" not in err
    assert not missing.exists()  # nothing was created


def test_a_file_that_is_not_a_journal_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("not a journal")
    assert main(["console", "--journal", str(other)]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("bind", ["8740", "localhost:", "host:99999", ":80"])
def test_a_bad_bind_is_named(bind: str) -> None:
    with pytest.raises(ValueError, match="--bind takes HOST:PORT"):
        parse_bind(bind)


def test_binds_that_parse() -> None:
    assert parse_bind("127.0.0.1:8740") == ("127.0.0.1", 8740)
    assert parse_bind("[::1]:0") == ("::1", 0)


def test_a_port_in_use_is_a_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    trio.run(init_journal, url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["console", "--journal", url, "--bind", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "in use" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--principal", ""], "principal must not be empty"),
        (["--principal", "x" * 201], "200"),
        (["--principal", "alice", "--read-only"], "--read-only console sends nothing"),
    ],
)
def test_a_bad_principal_is_a_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    trio.run(init_journal, url)
    assert main(["console", "--journal", url, "--bind", "127.0.0.1:0", *extra]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


@pytest.mark.slow
def test_a_console_process_serves_loopback_with_its_token_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    trio.run(init_journal, url)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "session.cli.main",
            "console",
            "--journal",
            url,
            "--bind",
            "127.0.0.1:0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        said = proc.stdout.readline().decode() + proc.stdout.readline().decode()
        found = re.search(r"open (http://127\.0\.0\.1:\d+)/\?token=(\S+)", said)
        assert found, said
        base, token = found.groups()
        assert httpx.get(f"{base}/api/sessions").status_code == 401
        r = httpx.get(f"{base}/api/sessions", headers={"x-console-token": token})
        assert r.status_code == 200 and r.json() == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None and b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
