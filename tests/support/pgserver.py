"""A throwaway PostgreSQL server for the tests and the benchmarks.

``temporary_server()`` runs ``initdb`` and then ``postgres`` itself (as a
child process, so it cannot outlive this one) in a fresh temporary directory,
on a free loopback port, and removes everything on exit.  The
binaries are found by ``scripts/ensure-postgres --find`` (the one place that
knows where distributions put them).  PostgreSQL refuses to run as root, so
when this process is root (CI containers) the server runs as the ``postgres``
system user (created by the distribution package), or ``nobody`` when that
user is absent, and owns its directory.

``isolated_schema()`` gives one test (or one benchmark run) its own Postgres
schema on any server, including a shared one named by
``LOOPRUNTIME_TEST_PG_DSN``: the journal's tables are created in the first
schema of ``search_path``, which the returned URL sets.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Literal
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg

__all__ = [
    "ENSURE_SCRIPT",
    "RestartableServer",
    "ServerUnavailable",
    "ShutdownMode",
    "find_bindir",
    "isolated_schema",
    "restartable_server",
    "temporary_server",
    "with_search_path",
]

ENSURE_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure-postgres"

_SUPERUSER = "loopruntime"


class ServerUnavailable(Exception):
    """No PostgreSQL server binaries here, or the server would not start."""


def find_bindir() -> Path | None:
    """The directory holding initdb, pg_ctl and postgres, or None (never installs)."""
    try:
        done = subprocess.run(
            [str(ENSURE_SCRIPT), "--find"], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return Path(done.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    # The port may be taken again before postgres binds it; start() retries.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _server_user() -> pwd.struct_passwd | None:
    """Who the server runs as: None means 'this process's user'."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ServerUnavailable(
        "running as root, and PostgreSQL refuses to run as root, but there is no "
        "'postgres' or 'nobody' user to run it as; create one (useradd postgres)"
    )


class _Cluster:
    def __init__(self, bindir: Path, root: Path, settings: dict[str, str]) -> None:
        self.bindir, self.root, self.settings = bindir, root, settings
        self.data = root / "data"
        self.log = root / "server.log"
        self.user = _server_user()
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        if self.user is not None:
            env["HOME"] = str(self.root)
        return env

    def _identity(self) -> tuple[int | None, int | None, list[int] | None]:
        """uid, gid and supplementary groups to switch to (Nones: stay who we are)."""
        if self.user is None:
            return None, None, None
        return self.user.pw_uid, self.user.pw_gid, []

    def _run(self, *args: str) -> None:
        uid, gid, groups = self._identity()
        done = subprocess.run(
            args,
            cwd=self.root,
            env=self._env(),
            capture_output=True,
            text=True,
            check=False,
            user=uid,
            group=gid,
            extra_groups=groups,
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise ServerUnavailable(
                f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}{log}"
            )

    def init(self) -> None:
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            _SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )

    def _server_command(self) -> tuple[list[str], bool]:
        """The command that runs ``postgres`` as our child; True when it switches user itself.

        With util-linux ``setpriv`` the server gets ``--pdeathsig QUIT``: if
        this process dies without cleaning up (killed by a CI timeout, say),
        the kernel sends the postmaster SIGQUIT -- an immediate shutdown --
        instead of leaving a stray server behind.  The parent-death signal
        follows the thread that started the server, so start it from the
        main thread.
        """
        command = [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        command += [
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.root}",
        ]
        for key, value in self.settings.items():
            command += ["-c", f"{key}={value}"]
        setpriv = shutil.which("setpriv")
        if setpriv is not None:
            prefix = [setpriv, "--pdeathsig", "QUIT"]
            if self.user is not None:
                prefix += [f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}"]
                prefix += ["--clear-groups"]
            return prefix + command, True
        return command, False

    def start(self) -> None:
        last = ""
        for _ in range(5):
            self.port = _free_port()
            if self._launch():
                return
            # Most likely another process took the port first: try another.
            last = self.log.read_text(errors="replace")
        raise ServerUnavailable(f"postgres did not start:\n{last}")

    def _launch(self) -> bool:
        """Run the server on ``self.port``; True once it accepts connections."""
        command, switches_user = self._server_command()
        uid, gid, groups = (None, None, None) if switches_user else self._identity()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        return self._wait_ready()

    def shut_down(self, mode: ShutdownMode) -> None:
        """Stop the server as ``pg_ctl stop -m MODE`` does: ``fast`` (SIGINT:
        sessions ended, a checkpoint written) or ``immediate`` (SIGQUIT: no
        checkpoint, crash recovery at the next start)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT if mode == "fast" else signal.SIGQUIT)
        self.process.wait(timeout=60)
        self.process = None

    def restart(self, mode: ShutdownMode) -> None:
        """``shut_down``, then start again on the same port (``pg_ctl restart -m MODE``)."""
        self.shut_down(mode)
        self.start_again()

    def start_again(self) -> None:
        """Start a server that was shut down, on the port it had."""
        if not self._launch():
            raise ServerUnavailable(
                f"postgres did not start again:\n{self.log.read_text(errors='replace')}"
            )

    def _wait_ready(self) -> bool:
        """True once the server accepts connections; False if it exited."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        self.stop()
        return False

    def stop(self) -> None:
        if self.process is None:
            return
        # Fast shutdown; the cluster is thrown away, so there is nothing to keep.
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    @property
    def dsn(self) -> str:
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/postgres"


ShutdownMode = Literal["fast", "immediate"]


class RestartableServer:
    """A throwaway server of one test module's own, which it may stop and start.

    Start it again (``start_again``, ``restart``) from the main thread, never
    from a worker thread: the parent-death signal the server gets follows the
    thread that started it, so a server started by a worker thread is shut
    down when that thread ends (trio ends idle ones after a few seconds)."""

    def __init__(self, cluster: _Cluster) -> None:
        self._cluster = cluster
        self.dsn = cluster.dsn

    def shut_down(self, mode: ShutdownMode) -> None:
        self._cluster.shut_down(mode)

    def start_again(self) -> None:
        self._cluster.start_again()

    def restart(self, mode: ShutdownMode) -> None:
        self._cluster.restart(mode)


@contextlib.contextmanager
def restartable_server() -> Iterator[RestartableServer]:
    """Like ``temporary_server``, yielding the server itself (not only its URL),
    for tests of what a restart does; never a shared server."""
    # A process crash (``immediate``) keeps what the OS was handed, so fsync
    # may stay off; but commits must reach the WAL before they return.
    with _cluster(durable=False, settings={"synchronous_commit": "on"}) as cluster:
        yield RestartableServer(cluster)


@contextlib.contextmanager
def temporary_server(*, durable: bool = False) -> Iterator[str]:
    """Run a throwaway PostgreSQL server; yield its URL; stop and delete it on exit.

    ``durable=False`` turns fsync off (tests only need a server that stays
    up, not one that survives power loss); benchmarks pass ``durable=True``
    so the journal and the raw psycopg peer pay the same real commit costs.
    Raises ``ServerUnavailable`` when the binaries are missing or the server
    does not start (the message includes the server log).
    """
    with _cluster(durable=durable) as cluster:
        yield cluster.dsn


@contextlib.contextmanager
def _cluster(*, durable: bool, settings: dict[str, str] | None = None) -> Iterator[_Cluster]:
    bindir = find_bindir()
    if bindir is None:
        raise ServerUnavailable(
            "PostgreSQL server binaries (initdb, pg_ctl, postgres) are not installed; run "
            "scripts/ensure-postgres (as root it installs them), install the 'postgresql' "
            "package, or set LOOPRUNTIME_TEST_PG_DSN=postgresql://user@host:port/db"
        )
    chosen = {"max_connections": "200"}
    if not durable:
        chosen |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
    chosen |= settings or {}
    root = Path(tempfile.mkdtemp(prefix="loopruntime-pg-"))
    cluster = _Cluster(bindir, root, chosen)
    try:
        cluster.init()
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def with_search_path(url: str, schema: str) -> str:
    """``url`` with libpq ``options`` setting ``search_path`` to ``schema``."""
    parts = urlsplit(url)
    option = "options=" + quote(f"-csearch_path={schema}", safe="")
    query = f"{parts.query}&{option}" if parts.query else option
    return urlunsplit(parts._replace(query=query))


@contextlib.contextmanager
def isolated_schema(dsn: str, *, prefix: str = "t") -> Iterator[str]:
    """Create a fresh schema on the server at ``dsn``; yield a URL that uses it; drop it."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield with_search_path(dsn, schema)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
