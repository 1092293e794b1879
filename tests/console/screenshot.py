"""Writes the README's picture of the console: a session with an open gate,
in the system's headless Chromium, against a real console and host process.

    .venv/bin/python -m tests.console.screenshot docs/console.png

(``scripts/console-screenshot`` runs it.)"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.console.browser import browser_context, in_journal, stack


def shoot(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="console-shot-") as tmp:
        with stack(Path(tmp)) as s, browser_context() as browser:

            async def work(client: Any, journal: Any) -> str:
                sid = await client.create("console", session_id="ses_7f3a9c2e41d8b605", key="c")
                for i, text in enumerate(
                    ["weather in Paris and Oslo?", "book a table at Chez Loop for two"]
                ):
                    await client.submit(sid, text, key=f"s{i}")
                    await client.wait(sid, f"s{i}", timeout=30)
                return sid

            sid = in_journal(s.url, work)
            page = browser.new_page()
            page.set_viewport_size({"width": 1000, "height": 640})
            page.goto(f"{s.address}/sessions/{sid}?token={s.token}")
            page.wait_for_selector("#session[data-ready=true]")
            page.locator(".gate.permission").wait_for()
            page.wait_for_function(
                "() => document.getElementById('lines').textContent.includes('Oslo: -3')"
            )
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(out))
    print(f"wrote {out}")


if __name__ == "__main__":
    shoot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console.png"))
