"""Ids of the loop's records, calls, gates and inputs."""

import os


def new_id(prefix: str) -> str:
    """A fresh random id (``prefix`` + 16 hex digits)."""
    return prefix + os.urandom(8).hex()
