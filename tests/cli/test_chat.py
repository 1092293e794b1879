"""`loopruntime chat` driven through a real pseudo-terminal."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pexpect
import pytest

pytestmark = pytest.mark.slow


def spawn_chat(tmp_path: Path, *extra: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return pexpect.spawn(
        sys.executable,
        ["-m", "session.cli.main", "chat", "--journal", str(tmp_path / "chat.db"), *extra],
        env=env,
        encoding="utf-8",
        timeout=60,  # a hung child must not hang CI; not a timing assertion
    )


def test_ctrl_c_interrupts_the_reply_and_the_chat_goes_on(tmp_path: Path) -> None:
    chat = spawn_chat(tmp_path)
    chat.expect("using the local scripted echo model")
    chat.expect(r"session (ses_\w+)")
    session_id = chat.match.group(1)
    chat.expect("you> ")
    chat.sendline("tell me a very long story " * 20)
    chat.expect(r"\(echo\) tell")  # the reply is streaming
    chat.sendintr()
    chat.expect(r"\[interrupted\]")
    chat.expect("you> ")
    chat.sendline("still there?")
    chat.expect(r"\(echo\) still there\?")
    chat.expect("you> ")
    chat.sendeof()
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0

    # The journal holds the interrupted reply and the next one.
    replay = pexpect.run(
        f"{sys.executable} -m session.cli.main replay {session_id}"
        f" --journal {tmp_path / 'chat.db'}",
        encoding="utf-8",
        env={**os.environ},
    )
    assert "[interrupted: this reply was stopped before it completed" in replay
    assert "turn 1 interrupted" in replay
    assert "(echo) still there?" in replay


def test_chat_resumes_a_session(tmp_path: Path) -> None:
    chat = spawn_chat(tmp_path)
    chat.expect(r"session (ses_\w+)")
    session_id = chat.match.group(1)
    chat.expect("you> ")
    chat.sendline("first")
    chat.expect(r"\(echo\) first")
    chat.expect("you> ")
    chat.sendeof()
    chat.expect(pexpect.EOF)
    chat.close()

    again = spawn_chat(tmp_path, "--session", session_id)
    again.expect(f"session {session_id}")
    again.expect("you> ")
    again.sendline("second")
    again.expect(r"\(echo\) second")
    again.expect("you> ")
    again.sendeof()
    again.expect(pexpect.EOF)
    again.close()
    assert again.exitstatus == 0


def test_chat_uses_claude_when_the_key_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from session.cli.chat import chat_definition

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    definition, said = chat_definition("claude-test-model")
    assert said == "using anthropic:claude-test-model"
    assert definition.model.name == "anthropic:claude-test-model"
    assert "sk-ant" not in said

    monkeypatch.delenv("ANTHROPIC_API_KEY")
    definition, said = chat_definition(None)
    assert "no ANTHROPIC_API_KEY" in said and definition.model.name == "scripted:echo"
