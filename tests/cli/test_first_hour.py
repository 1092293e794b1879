"""What a new user meets first: every command given what a user can get wrong answers
with one line saying what to do, exit status 2 (1 for a failed check), never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from journal import open_journal
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel
from session import Session

ROOT = Path(__file__).resolve().parents[2]
SESSION = "ses_first_hour"


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPRUNTIME_")}
    full_env.pop("ANTHROPIC_API_KEY", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "session.cli.main", *args],
        cwd=cwd,
        env=full_env,
        input=stdin,
        capture_output=True,
        check=False,
        timeout=120,
    )


def one_line_error(done: subprocess.CompletedProcess[bytes], *, status: int = 2) -> str:
    """The command's error: exactly one line on stderr, the given exit status."""
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    assert done.returncode == status, (done.returncode, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def journal_with_a_session(tmp_path: Path) -> Path:
    """A SQLite journal holding one session whose transcript has text beyond Latin-1."""
    db = tmp_path / "j.db"
    reply = "Done → 14°C in Paris, ☂ in Oslo.\n" * 40
    definition = LoopDefinition(name="chat", model=ScriptedModel(lambda _r: Reply(text=reply)))

    async def build() -> None:
        async with open_journal(f"sqlite:///{db}") as journal:
            async with Session.create(journal, definition, session_id=SESSION) as s:
                await s.submit("weather?")
                await s.wait_idle()

    trio.run(build)
    return db


def test_sessions_where_there_is_no_journal(tmp_path: Path) -> None:
    line = one_line_error(run("sessions", cwd=tmp_path))
    assert "no journal" in line
    assert "--journal" in line or "LOOPRUNTIME_JOURNAL" in line


def test_sessions_on_a_file_that_is_not_a_journal(tmp_path: Path) -> None:
    (tmp_path / "plain.txt").write_text("hello\n")
    line = one_line_error(run("sessions", "--journal", "plain.txt", cwd=tmp_path))
    assert "plain.txt" in line and "not a loopruntime journal" in line


def test_resolve_on_a_journal_that_does_not_exist(tmp_path: Path) -> None:
    line = one_line_error(
        run("resolve", "S", "E", "--result", "r", "--journal", "/nope.db", cwd=tmp_path)
    )
    assert "/nope.db" in line


def test_demo_with_an_unknown_url_scheme(tmp_path: Path) -> None:
    line = one_line_error(run("demo", "--journal", "foo://bar", cwd=tmp_path))
    assert "foo://bar" in line


def test_journal_init_with_a_bad_option(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/x.db?synchronous=OFF"
    line = one_line_error(run("journal", "init", url, cwd=tmp_path))
    assert "synchronous" in line
    assert not (tmp_path / "x.db").exists()


def test_demo_where_the_journal_cannot_be_created(tmp_path: Path) -> None:
    # A path under a regular file cannot be created whoever runs the test (root too).
    (tmp_path / "plain.txt").write_text("hello\n")
    line = one_line_error(run("demo", "--journal", "plain.txt/j.db", cwd=tmp_path))
    assert "plain.txt/j.db" in line


def test_chat_with_an_api_key_holding_a_control_character(tmp_path: Path) -> None:
    done = run("chat", "--journal", "c.db", cwd=tmp_path, env={"ANTHROPIC_API_KEY": "k\x01"})
    line = one_line_error(done)
    assert "ANTHROPIC_API_KEY" in line
    assert "k\x01" not in line


def test_global_options_work_before_the_subcommand(
    journal_with_a_session: Path, tmp_path: Path
) -> None:
    done = run("--journal", str(journal_with_a_session), "sessions", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert SESSION.encode() in done.stdout


def test_replay_into_a_closed_pipe(journal_with_a_session: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "session.cli.main", "replay", SESSION]
    command += ["--journal", str(journal_with_a_session)]
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    writer = subprocess.run(command, stdout=reader.stdin, stderr=subprocess.PIPE, check=False)
    assert reader.stdin is not None
    reader.stdin.close()
    reader.wait()
    assert b"Traceback" not in writer.stderr, writer.stderr.decode()
    assert b"BrokenPipe" not in writer.stderr


def test_replay_to_a_terminal_that_cannot_show_every_character(
    journal_with_a_session: Path, tmp_path: Path
) -> None:
    done = run(
        "replay", SESSION, "--journal", str(journal_with_a_session),
        cwd=tmp_path, env={"PYTHONIOENCODING": "latin-1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert "14°C".encode("latin-1") in done.stdout


def test_a_session_id_that_is_not_unicode(journal_with_a_session: Path, tmp_path: Path) -> None:
    # Bytes that are not UTF-8 reach Python's argv as lone surrogates.
    bad = os.fsdecode(b"ses_\xed\xa0\x80")
    line = one_line_error(
        run("replay", bad, "--journal", str(journal_with_a_session), cwd=tmp_path)
    )
    assert "session" in line


# -- chat -------------------------------------------------------------------------------


@pytest.mark.parametrize("attempt", range(3))
def test_chat_reads_piped_input(tmp_path: Path, attempt: int) -> None:
    # The printer subscribes from the session's own head: a head read from the
    # journal may be past it, and the subscription would then fail with
    # SeqOutOfRangeError; several runs give such a race its chance to show.
    done = run("chat", "--journal", "j.db", cwd=tmp_path, stdin=b"hello\nmore\n")
    assert done.returncode == 0, done.stderr.decode()
    assert b"Traceback" not in done.stderr
    assert b"(echo) hello" in done.stdout and b"(echo) more" in done.stdout


def test_chat_reads_input_that_is_not_utf8(tmp_path: Path) -> None:
    done = run("chat", "--journal", "j.db", cwd=tmp_path, stdin=b"caf\xe9\n")
    assert done.returncode == 0, done.stderr.decode()
    assert "(echo) caf\ufffd".encode() in done.stdout


def test_chat_says_that_model_needs_a_key(tmp_path: Path) -> None:
    done = run("chat", "--model", "claude-x", "--journal", "j.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert b"--model claude-x needs the key" in done.stdout


async def test_chat_shows_a_failed_reply_in_the_conversation(tmp_path: Path) -> None:
    from tests.support.sse_server import Status, open_sse_server

    refusal = Status(400, "invalid_request_error", "prompt is too long for this model")
    async with open_sse_server([refusal]) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPRUNTIME_")}
        env.update(ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL=server.url)
        done = await trio.run_process(
            [sys.executable, "-m", "session.cli.main", "chat", "--journal", "j.db"],
            cwd=tmp_path,
            env=env,
            stdin=b"hello\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert b"[the reply failed:" in done.stdout
    assert b"prompt is too long for this model" in done.stdout


def test_chat_shows_the_last_exchanges_of_a_resumed_session(
    journal_with_a_session: Path, tmp_path: Path
) -> None:
    done = run(
        "chat", "--session", SESSION, "--journal", str(journal_with_a_session),
        cwd=tmp_path, stdin=b"",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert b"you> weather?" in done.stdout
    assert "14°C in Paris".encode() in done.stdout


# -- journals ---------------------------------------------------------------------------


def test_journal_init_takes_journal_like_every_command(tmp_path: Path) -> None:
    done = run("journal", "init", "--journal", "sub/dir/j.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "sub" / "dir" / "j.db").is_file()
    again = run("--journal", str(tmp_path / "url" / "j.db"), "journal", "init", cwd=tmp_path)
    assert again.returncode == 0, again.stderr.decode()
    assert (tmp_path / "url" / "j.db").is_file()


def test_help_is_plain_text_naming_the_default_journal(tmp_path: Path) -> None:
    for args in (["--help"], ["replay", "--help"], ["journal", "init", "--help"]):
        done = run(*args, cwd=tmp_path)
        assert done.returncode == 0
        out = done.stdout.decode()
        assert "`" not in out, out
        assert "LOOPRUNTIME_JOURNAL" in out and ".loopruntime/journal.db" in out


def test_a_relative_sqlite_url_that_meant_an_absolute_path_gets_a_hint(tmp_path: Path) -> None:
    done = run("journal", "init", "sqlite:///tmp/first-hour-hint.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert b"four slashes" in done.stderr
    assert b"sqlite:////tmp/first-hour-hint.db" in done.stderr
    assert (tmp_path / "tmp" / "first-hour-hint.db").is_file()


async def test_sessions_does_not_call_a_crashed_session_running(tmp_path: Path) -> None:
    from tests.support.loops import crashed_copy

    db = tmp_path / "j.db"
    definition = LoopDefinition(name="chat", model=ScriptedModel(lambda _r: Reply(text="hi")))
    async with open_journal(f"sqlite:///{db}") as journal:
        async with Session.create(journal, definition, session_id="ses_ok") as s:
            await s.submit("hello")
            await s.wait_idle()
        # The same records cut right after the turn started: what a crash leaves.
        started = [
            r.seq
            async for r in journal.read("ses_ok")
            if r.event.__struct_config__.tag == "turn.started"
        ]  # type: ignore[attr-defined]
        await crashed_copy(journal, "ses_ok", started[0])
    done = run("sessions", "--journal", str(db), cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "running" not in out.split("open*:")[0]
    [crashed] = [line for line in out.splitlines() if line.startswith("ses_ok_crashed")]
    assert crashed.endswith("open*")
    assert "left by a crash" in out


# -- file systems a user may hand the journal ------------------------------------------


def _namespaces_work() -> bool:
    """Whether this machine lets a test make a private mount namespace."""
    try:
        done = subprocess.run(["unshare", "-rm", "true"], capture_output=True, check=False)
    except FileNotFoundError:
        return False
    return done.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not _namespaces_work(), reason="unshare cannot make a mount namespace on this machine"
)


def in_private_mounts(script: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """Run ``script`` (sh) in a new user and mount namespace: its mounts are seen by
    it alone and vanish with it.  ``$LR`` runs the command line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPRUNTIME_")}
    env["LR"] = f"{sys.executable} -m session.cli.main"
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        check=False,
        timeout=300,
    )


@needs_namespaces
def test_replay_and_sessions_read_a_journal_on_a_read_only_file_system(
    journal_with_a_session: Path,
) -> None:
    where = journal_with_a_session.parent
    done = in_private_mounts(
        f"mount --bind {where} {where} && mount -o remount,bind,ro {where} && "
        f"$LR replay {SESSION} --journal {journal_with_a_session} && "
        f"$LR replay {SESSION} --check --journal {journal_with_a_session} && "
        f"$LR sessions --journal {journal_with_a_session}",
        cwd=where,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "14°C in Paris".encode() in done.stdout
    assert b"every invariant holds" in done.stdout
    assert SESSION.encode() in done.stdout


@needs_namespaces
def test_a_full_disk_at_creation_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    done = in_private_mounts(
        f"mount -t tmpfs -o size=16k tmpfs {disk} && cd {disk} && "
        f"$LR journal init --journal {disk}/j.db; status=$?; ls -A {disk}; exit $status",
        cwd=tmp_path,
    )
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "Traceback" not in err
    assert "disk is full" in err and "j.db" in err
    assert done.stdout.decode().split() == []  # nothing half made was left


async def test_resolve_refuses_while_a_host_holds_a_live_lease(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    async with open_journal(f"sqlite:///{db}") as journal:
        lease = await journal.acquire("ses_hosted", "host-a", ttl=3600, create=True)
    done = await trio.to_thread.run_sync(
        lambda: run(
            "resolve", "ses_hosted", "exe_x", "--result", "r", "--journal", str(db), cwd=tmp_path
        )
    )
    line = one_line_error(done)
    assert "run by host host-a" in line and "--force" in line
    async with open_journal(f"sqlite:///{db}") as journal:
        [info] = await journal.sessions()
    assert info.incarnation == lease.incarnation  # not fenced
    forced = await trio.to_thread.run_sync(
        lambda: run(
            "resolve",
            "ses_hosted",
            "exe_x",
            "--result",
            "r",
            "--force",
            "--journal",
            str(db),
            cwd=tmp_path,
        )
    )
    # Past the refusal: now it is the call that is not there.
    assert "run by host" not in one_line_error(forced)
