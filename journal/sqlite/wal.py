"""Room written ahead in the WAL file, so a commit at ``synchronous=FULL`` syncs only its frames.

At ``FULL`` every commit ends with an ``fdatasync`` of the WAL.  When the
commit's frames extend the file, that sync must also make the file's new size
and block allocation durable: one more write, in series before the flush (the
inode's block, or a journal commit where the file system keeps a journal).  A
commit whose frames overwrite blocks the file already holds needs only its
data written, which is the faster sync (``benchmarks/README.md`` has the
figures).  So the
writer thread keeps zeros written past the WAL's end, in the transaction
before the frames need them.  SQLite never reads them as frames: a frame is
valid only with the salt of the WAL's header and a checksum that continues the
frames before it, and WAL recovery stops at the first invalid frame (how a
restarted WAL leaves the older frames after its end unread).

Rules: the zeros are written only beyond the file's end, and only by the
writer thread inside its write transaction (``BEGIN IMMEDIATE`` holds SQLite's
WAL write lock, so no connection of any process appends frames meanwhile);
only once SQLite has written the WAL's header; and a write that fails (a full
disk) is given up without failing the commit, which then extends the file as
it would have anyway.
"""

from __future__ import annotations

import os

__all__ = ["RESERVE", "WalReserve", "reserve_for"]

RESERVE = 1024 * 1024
"""Bytes written ahead at a time: in the WAL's second commit after the journal
opens (the first writes SQLite's header; both are a session's creation, as a
rule), then each time the frames run past the room.  The commit that writes a
room syncs its zeros too: 1 MiB is paid back by the commits that then
overwrite instead of extending, while a larger room would be a pause worth
avoiding.  The whole 1 MiB comes at once rather than growing with the WAL,
since a room grown by doubling from a small one makes a short turn's steps
pay for a room every few steps (the figures: ``benchmarks/README.md``)."""
_HEADER = 32
"""Bytes of the WAL header: until SQLite writes it, nothing is written ahead."""


def reserve_for(database: str, synchronous: str) -> WalReserve | None:
    """The room a writer of ``database`` keeps: only at ``FULL`` (at ``NORMAL`` a
    commit does not sync, so its growth costs it nothing), and only where the
    platform writes at an offset (``os.pwrite``: not on Windows)."""
    if synchronous != "FULL" or not hasattr(os, "pwrite"):
        return None
    return WalReserve(database)


class WalReserve:
    """The zeros ahead of one journal's WAL; used by its writer thread only."""

    __slots__ = ("_end", "_fd", "path")

    def __init__(self, database: str) -> None:
        self.path = database + "-wal"
        self._fd = -1
        self._end = -1
        """The file's size when zeros were last written (-1: none yet)."""

    def extend(self) -> None:
        """Write zeros past the WAL's end if SQLite's frames reached it.

        Call inside a write transaction.  While the file is as large as it was
        left, the frames still fall inside what was written ahead: nothing to
        do, at the cost of one ``fstat``.
        """
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
            except OSError:
                return  # no WAL yet: SQLite makes it with its first commit
        try:
            size = os.fstat(self._fd).st_size
            if size == self._end or size < _HEADER:
                return
            written = os.pwrite(self._fd, bytes(RESERVE), size)
        except OSError:
            # A full disk: the commit extends the file as it always could.
            return
        self._end = size + written

    def close(self) -> None:
        """Close the file (after the writer's connection, whose WAL it is)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
