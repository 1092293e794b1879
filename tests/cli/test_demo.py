"""The demo, run whole: a real child process killed with SIGKILL, the
restore, and a deploy under a changed system prompt, ending with the check."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from session.cli.demo import DEPLOYED_SYSTEM, run_demo

pytestmark = pytest.mark.slow


async def test_the_demo_restores_under_a_changed_system_prompt(tmp_path: Path) -> None:
    out = io.StringIO()
    code = await run_demo(f"sqlite:///{tmp_path / 'journal.db'}", tmp_path, out)
    text = out.getvalue()
    assert code == 0, text
    assert "⟳ definition changed: system prompt " in text
    assert DEPLOYED_SYSTEM in text
    assert text.strip().splitlines()[-1].startswith("== journal check: ok")
