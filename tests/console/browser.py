"""What the browser tests share: a real console process and host processes on
a SQLite journal, and headless Chromium from the system's packages driven by
Playwright (never a browser Playwright downloads).

Rules: every process here is started by the test and ended by it (SIGTERM,
or SIGKILL where the test says so); a wait is for a state of the page or of
the journal, each with a generous bound that only guards against a hang.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio

from journal import Journal, init_journal, open_journal
from session import Client
from tests.support.processes import ROOT

__all__ = ["CHROMIUM", "HANG", "Stack", "browser_context", "in_journal"]

CHROMIUM = Path(os.environ.get("LOOPRUNTIME_CHROMIUM", "/usr/bin/chromium"))
HANG = 60_000
"""Milliseconds a page wait may take before the test fails as hung (never a
statement about speed)."""
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

T = TypeVar("T")


def in_journal(url: str, work: Callable[[Client, Journal], Awaitable[T]]) -> T:
    """Run ``work`` with a client of the journal and the journal itself, from a
    synchronous test."""

    async def run() -> T:
        async with open_journal(url) as journal:
            return await work(Client(journal), journal)

    return trio.run(run)


def _python(*args: str) -> list[str]:
    return [sys.executable, "-m", "session.cli.main", *args]


class Stack:
    """A journal with host processes and one console process on it."""

    def __init__(self, tmp: Path, *, read_only: bool = False, principal: str | None = None) -> None:
        self.path = tmp / "journal.db"
        # Cross-process tails poll the file: a short poll keeps the page close behind.
        self.url = f"sqlite:///{self.path}?poll=0.02"
        trio.run(init_journal, self.url)
        self.hosts: dict[str, subprocess.Popen[bytes]] = {}
        self.read_only = read_only
        self.principal = principal
        self.console: subprocess.Popen[bytes] | None = None
        self.address = ""
        self.token = ""

    def start_host(self, host_id: str) -> None:
        proc = subprocess.Popen(
            _python(
                "host",
                "--journal",
                self.url,
                "--definitions",
                "tests.console.scenario:definitions",
                "--host-id",
                host_id,
                "--lease-ttl",
                "1",
                "--poll",
                "0.05",
            ),
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        self.hosts[host_id] = proc
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert f"host {host_id} runs" in line, line

    def kill_host(self, host_id: str) -> None:
        proc = self.hosts.pop(host_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def start_console(self) -> None:
        args = ["console", "--journal", self.url, "--bind", "127.0.0.1:0"]
        if self.read_only:
            args.append("--read-only")
        if self.principal is not None:
            args += ["--principal", self.principal]
        self.console = subprocess.Popen(_python(*args), cwd=ROOT, stdout=subprocess.PIPE)
        assert self.console.stdout is not None
        said = ""
        while "open http" not in said:
            line = self.console.stdout.readline().decode()
            assert line, f"the console stopped before it listened: {said!r}"
            said += line
        found = re.search(r"open (http://[^/]+)/\?token=(\S+)", said)
        assert found, said
        self.address, self.token = found.group(1), found.group(2)

    @property
    def link(self) -> str:
        return f"{self.address}/?token={self.token}"

    def console_rss(self) -> int:
        """The console process's resident memory, in kB."""
        assert self.console is not None
        status = Path(f"/proc/{self.console.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]

    def stop(self) -> None:
        for proc in [*self.hosts.values(), *([self.console] if self.console else [])]:
            proc.send_signal(signal.SIGTERM)
        for proc in [*self.hosts.values(), *([self.console] if self.console else [])]:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.hosts.clear()
        self.console = None


@contextmanager
def stack(
    tmp: Path,
    *,
    hosts: tuple[str, ...] = ("a",),
    read_only: bool = False,
    principal: str | None = None,
) -> Iterator[Stack]:
    s = Stack(tmp, read_only=read_only, principal=principal)
    try:
        for h in hosts:
            s.start_host(h)
        s.start_console()
        yield s
    finally:
        s.stop()


def _browser_or_skip() -> None:
    if not CHROMIUM.exists():
        subprocess.run([str(ROOT / "scripts" / "ensure-chromium")], capture_output=True)
    if not CHROMIUM.exists():
        pytest.skip(
            f"no Chromium at {CHROMIUM} and scripts/ensure-chromium could not install it "
            "(it needs root and Debian's packages); the browser tests need a browser"
        )


class Browser:
    """The launched browser: ``new_page`` opens a page in a context of its
    own, so each page has its own connections (a browser keeps at most six
    HTTP/1.1 connections to one address, and a live page holds one)."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser

    def new_page(self) -> Any:
        context = self.browser.new_context(viewport={"width": 1100, "height": 760})
        context.set_default_timeout(HANG)
        return context.new_page()


@contextmanager
def browser_context() -> Iterator[Browser]:
    """The system's Chromium, headless, launched by Playwright with a fresh
    profile directory of its own (the network is closed: no component
    updates, no sync, no QUIC)."""
    _browser_or_skip()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (it is in the test extra)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield Browser(browser)
        finally:
            browser.close()
