"""What the figures depend on: the machine and the versions a run measured.

Rules: read-only probes of this host, nothing timed; a value that cannot be read is
``None``, never guessed.
"""

from __future__ import annotations

import os
import platform
import sqlite3
from importlib import metadata
from typing import Any


def probe() -> dict[str, Any]:
    """CPU, cores, memory, OS, Python, SQLite and the runtime's own versions."""
    cpu = platform.processor() or platform.machine()
    memory = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                cpu,
            )
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
            memory = kib * 1024
    except (OSError, StopIteration, ValueError):
        pass
    try:
        version = metadata.version("loopruntime")
    except metadata.PackageNotFoundError:
        version = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "msgspec": metadata.version("msgspec"),
        "trio": metadata.version("trio"),
        "loopruntime": version,
    }
