"""`loopruntime chat --model PROVIDER:NAME`: an OpenAI-compatible server end
to end through a real pseudo-terminal, and the bad inputs refused in one line
before anything is opened."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect
import pytest
import trio

from session.cli.main import main
from tests.models.test_openai import text_reply
from tests.support.sse_server import Reply, open_sse_server


@contextmanager
def server_thread(replies: list[Reply]) -> Iterator[str]:
    """The local Chat Completions server in a trio run of its own thread, for
    a child process to talk to; yields its URL."""
    started = threading.Event()
    found: dict[str, object] = {}

    async def run() -> None:
        finished = trio.Event()
        found["token"], found["stop"] = trio.lowlevel.current_trio_token(), finished
        async with open_sse_server(replies) as server:
            found["url"] = server.url
            started.set()
            await finished.wait()

    thread = threading.Thread(target=trio.run, args=(run,))
    thread.start()
    try:
        # A guard so a broken build fails instead of hanging, not a timing assertion.
        assert started.wait(60), "the server thread did not start"
        yield str(found["url"])
    finally:
        stop = found["stop"]
        assert isinstance(stop, trio.Event)
        token = found["token"]
        assert isinstance(token, trio.lowlevel.TrioToken)
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join()


def run_cli(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(list(argv))
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.slow
def test_chat_talks_to_an_openai_compatible_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    with server_thread([text_reply("Hello from ", "the server.")]) as url:
        chat = pexpect.spawn(
            sys.executable,
            [
                "-m",
                "session.cli.main",
                "chat",
                "--journal",
                str(tmp_path / "chat.db"),
                "--model",
                "openai:gpt-test-1",
                "--base-url",
                url,
            ],
            env=env,
            encoding="utf-8",
            timeout=60,  # a hung child must not hang CI; not a timing assertion
        )
        chat.expect("using openai:gpt-test-1")
        chat.expect("you> ")
        chat.sendline("hi")
        chat.expect("Hello from the server.")
        chat.expect("you> ")
        chat.sendeof()
        chat.expect(pexpect.EOF)
        chat.close()
    assert chat.exitstatus == 0


def test_an_unknown_provider_is_one_line_and_nothing_is_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "not-made"
    code, err = run_cli(
        "chat", "--journal", str(where / "chat.db"), "--model", "gemini:pro", capsys=capsys
    )
    assert code == 2
    assert err == [
        "loopruntime: --model gemini:pro: unknown provider 'gemini'; name one of "
        "anthropic:NAME, openai:NAME, or a Claude model alone"
    ]
    assert not where.exists()


def test_openai_without_a_key_or_a_server_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    where = tmp_path / "not-made"
    code, err = run_cli(
        "chat", "--journal", str(where / "chat.db"), "--model", "openai:gpt-x", capsys=capsys
    )
    assert code == 2 and len(err) == 1
    assert "needs OPENAI_API_KEY" in err[0] and "--base-url" in err[0]
    assert not where.exists()


def test_a_base_url_for_claude_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_cli(
        "chat",
        "--journal",
        str(tmp_path / "x" / "chat.db"),
        "--base-url",
        "http://127.0.0.1:1/v1",
        capsys=capsys,
    )
    assert code == 2 and len(err) == 1 and "openai:NAME" in err[0]


def test_the_openai_extra_missing_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    # As if the SDK were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "openai", None)
    for name in [m for m in sys.modules if m.startswith("loopruntime.models.openai")]:
        monkeypatch.delitem(sys.modules, name)
    where = tmp_path / "not-made"
    code, err = run_cli(
        "chat", "--journal", str(where / "chat.db"), "--model", "openai:gpt-x", capsys=capsys
    )
    assert code == 2
    assert err == [
        "loopruntime: the OpenAI-compatible model (OpenAIModel) needs the 'openai' package, "
        "which is not installed; install the extra: pip install 'loopruntime[openai]'"
    ]
    assert not where.exists()


def test_chat_definition_chooses_by_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    from session.cli.chat import chat_definition

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-test")
    definition, said = chat_definition("openai:gpt-x")
    assert definition.model.name == "openai:gpt-x" and said == "using openai:gpt-x"
    # An Ollama model's own colon stays in its name.
    definition, _ = chat_definition("openai:llama3.2:3b", "http://127.0.0.1:11434/v1")
    assert definition.model.name == "openai:llama3.2:3b"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    definition, said = chat_definition("anthropic:claude-test")
    assert definition.model.name == "anthropic:claude-test"
    with pytest.raises(ValueError, match="name is missing"):
        chat_definition("openai:")
