"""``loopruntime console``: serve the console on Hypercorn's trio worker.

Binds to loopback unless told otherwise, prints the address with its token
once it listens (as Jupyter does), and stops on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import functools
import ipaddress
import secrets
import signal
from collections.abc import Callable
from typing import Any, cast

import trio

from loopruntime.host import check_principal

from ..replay import open_for_replay

__all__ = ["parse_bind", "serve_console"]


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); a clear ``ValueError`` else."""
    host, sep, port = bind.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--bind takes HOST:PORT (for example 127.0.0.1:8740), not {bind!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve_console(
    url: str,
    bind: str,
    *,
    read_only: bool,
    out: Callable[[str], None] = print,
    token: str | None = None,
    principal: str | None = None,
) -> int:
    """Open the journal (refusing one that does not exist), serve the console
    until SIGTERM or SIGINT, then close it.  ``principal`` is stamped on
    every command the console sends."""
    try:
        from hypercorn.config import Config
        from hypercorn.trio import serve

        from .app import create_app
    except ImportError as exc:
        raise ValueError(
            f"the console needs its web packages ({exc.name} is not installed): "
            "pip install 'loopruntime[console]'"
        ) from exc
    host, port = parse_bind(bind)
    principal = check_principal(principal)
    if principal is not None and read_only:
        raise ValueError("--principal names who acts, and a --read-only console sends nothing")
    token = token or secrets.token_urlsafe(24)
    async with open_for_replay(url, write=not read_only) as journal:
        app = create_app(journal, token=token, read_only=read_only, principal=principal)
        config = Config()
        config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
        config.accesslog = None
        config.loglevel = "WARNING"
        # Live pages hold their stream open: on shutdown they are cut, not awaited.
        config.graceful_timeout = 0.5
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:

            async def stop() -> None:
                async for _ in signals:
                    return

            async with trio.open_nursery() as nursery:
                # Starlette's ASGI signature is looser than Hypercorn's types.
                asgi = cast("Any", app)
                binds = await nursery.start(
                    functools.partial(serve, asgi, config, shutdown_trigger=stop)
                )
                where = binds[0] if binds else f"http://{host}:{port}"
                mode = " (read-only)" if read_only else ""
                mode += f" acting as {principal}" if principal is not None else ""
                out(f"console{mode} on {url}")
                out(f"open {where}/?token={token}")
                if not is_loopback(host):
                    out(
                        f"warning: {host} is not loopback: anyone who can reach it and has the "
                        "token can act on sessions; put TLS in front of it"
                    )
    return 0
