"""A PostgreSQL server of its own that a test may restart under running hosts.

``restartable_server()`` starts a throwaway cluster as ``pgserver`` does (the
same binaries, settings and clean-up) and yields a ``Restartable``: its URL,
and ``restart("fast")`` (SIGINT to the postmaster: sessions ended, a clean
stop) or ``restart("immediate")`` (SIGQUIT: no clean stop, crash recovery on
the next start), started again on the same port.  A server of its own, so no
other test's server goes away.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from .pgserver import ServerUnavailable, _Cluster, find_bindir

__all__ = ["Restartable", "restartable_server"]

_STOP = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT}


class Restartable:
    """A running throwaway server: ``dsn``, and ``restart`` (blocking)."""

    def __init__(self, cluster: _Cluster) -> None:
        self._cluster = cluster

    @property
    def dsn(self) -> str:
        return self._cluster.dsn

    def restart(self, mode: Literal["fast", "immediate"]) -> None:
        """Stop the server as ``pg_ctl restart -m MODE`` would, then start it
        again on the same port; returns once it accepts connections."""
        cluster = self._cluster
        assert cluster.process is not None
        cluster.process.send_signal(_STOP[mode])
        cluster.process.wait(timeout=60)
        command, switches_user = cluster._server_command()
        uid, gid, groups = (None, None, None) if switches_user else cluster._identity()
        with open(cluster.log, "ab") as log:
            cluster.process = subprocess.Popen(
                command,
                cwd=cluster.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=cluster._env(),
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        if not cluster._wait_ready():
            raise ServerUnavailable(f"postgres did not start again:\n{cluster.log.read_text()}")


@contextlib.contextmanager
def restartable_server() -> Iterator[Restartable]:
    """Run a throwaway server of this test's own; stop and delete it on exit.
    ``ServerUnavailable`` when the binaries are missing."""
    bindir = find_bindir()
    if bindir is None:
        raise ServerUnavailable("PostgreSQL server binaries are not installed")
    # Commits reach the operating system before they return (synchronous_commit
    # stays on): an immediate stop loses nothing, the machine does not crash.
    settings = {"fsync": "off", "full_page_writes": "off"}
    root = Path(tempfile.mkdtemp(prefix="loopruntime-pg-restart-"))
    cluster = _Cluster(bindir, root, settings)
    try:
        cluster.init()
        cluster.start()
        try:
            yield Restartable(cluster)
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
