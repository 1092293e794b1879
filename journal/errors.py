"""Journal errors: one base, named by cause, carrying structured fields."""

from __future__ import annotations

import math

__all__ = [
    "ConflictError",
    "DuplicateEventError",
    "FencedError",
    "InboxConsumedError",
    "InboxEntryTooLargeError",
    "InboxError",
    "InboxKeyError",
    "InboxUnavailableError",
    "InvalidEventError",
    "JournalClosedError",
    "JournalCorruptError",
    "JournalError",
    "JournalReadOnlyError",
    "JournalSchemaError",
    "JournalUnavailableError",
    "LeaseHeldError",
    "NotAJournalError",
    "SessionNotFoundError",
]


class JournalError(Exception):
    """Base of every error the journal raises."""

    retryable: bool = False
    """Whether the same call may succeed if made again unchanged (the journal
    was unreachable), rather than failing the same way (a refusal)."""


class ConflictError(JournalError):
    """An append's ``expected_seq`` is not the session's head: someone else wrote."""

    def __init__(self, session: str, expected: int, actual: int) -> None:
        self.session, self.expected, self.actual = session, expected, actual
        super().__init__(
            f"session {session}: append expected head seq {expected} but the head is "
            f"{actual}; re-read the session before appending again"
        )


class FencedError(JournalError):
    """A newer writer opened the session; this writer must stop."""

    def __init__(self, session: str, incarnation: int, current: int) -> None:
        self.session, self.incarnation, self.current = session, incarnation, current
        super().__init__(
            f"session {session} was opened by a newer writer (incarnation {current} > "
            f"{incarnation}); this writer must stop"
        )


class DuplicateEventError(JournalError):
    """An event id is already stored with different content."""

    def __init__(self, session: str, event_id: str) -> None:
        self.session, self.event_id = session, event_id
        super().__init__(
            f"session {session}: event id {event_id} is already stored with other "
            "content; event ids must be unique"
        )


class InvalidEventError(JournalError, ValueError):
    """An event that could not be stored and read back (a field holding a value
    its type does not allow, or one msgpack cannot encode); nothing was appended."""

    def __init__(self, event: object, reason: str) -> None:
        self.event_type, self.reason = type(event).__name__, reason
        super().__init__(
            f"{self.event_type} cannot be stored: {reason}; nothing was appended. "
            "Build the event with values of the types its fields declare"
        )


class SessionNotFoundError(JournalError):
    def __init__(self, session: str) -> None:
        self.session = session
        super().__init__(f"session {session} does not exist in this journal")


class JournalReadOnlyError(JournalError):
    """A write to a journal opened read-only (``open_journal(url, readonly=True)``)."""


class JournalSchemaError(JournalError):
    """The journal (or a record) was written by a schema this code cannot read."""


class NotAJournalError(JournalError):
    """The file or database is not a loopruntime journal."""


class JournalCorruptError(JournalError):
    """A stored record is damaged: undecodable, truncated, off the digest chain
    (any of its columns edited), or on a storage page that cannot be read.

    ``seq`` is None when the damage is in no one record (a damaged page of an
    index that restore can do without)."""

    def __init__(self, session: str, seq: int | None, reason: str) -> None:
        self.session, self.seq, self.reason = session, seq, reason
        if seq is None:
            super().__init__(f"session {session} is damaged: {reason}")
        else:
            super().__init__(
                f"session {session} record seq {seq} is corrupt: {reason}; records before it "
                "are intact"
            )


class JournalClosedError(JournalError):
    """The journal was closed; nothing more can be read or written through it."""


class JournalUnavailableError(JournalError):
    """The storage could not be reached (connection refused, lost, ...)."""

    retryable = True


class LeaseHeldError(JournalError):
    """Another owner holds a live lease on the session."""

    def __init__(self, session: str, owner: str, expires_at: int) -> None:
        self.session, self.owner, self.expires_at = session, owner, expires_at
        super().__init__(
            f"session {session} is owned by {owner!r} until its lease expires; send it "
            "commands through the inbox (`loopruntime submit`), or stop that host first"
        )


class HostIdInUseError(JournalError):
    """A host registered under this id is still live (another process)."""

    def __init__(self, host: str, left: float) -> None:
        self.host, self.left = host, left
        # Rounded up: a registration with 0.4 s left is not one that "runs 0s more".
        shown = max(math.ceil(left * 10) / 10, 0.1)
        super().__init__(
            f"host id {host!r} is in use by a live host (its registration runs "
            f"{shown:.1f}s more unless that host renews it); give this host another id, "
            "or stop that host first"
        )


class InboxError(JournalError):
    """An inbox entry cannot be used as asked (it does not exist, ...)."""


class InboxKeyError(InboxError):
    """The idempotency key is already in the session's inbox with another command."""

    def __init__(self, session: str, key: str, number: int) -> None:
        self.session, self.key, self.number = session, key, number
        super().__init__(
            f"session {session}: key {key!r} was already used for another command (inbox "
            f"entry {number}); a key names one command: use a new key for a new command"
        )


class InboxConsumedError(InboxError):
    """An append would apply an inbox entry that another append already applied."""

    def __init__(self, session: str, number: int) -> None:
        self.session, self.number = session, number
        super().__init__(
            f"session {session}: inbox entry {number} was already applied with another "
            "outcome; nothing was appended (an entry is applied exactly once)"
        )


class InboxEntryTooLargeError(InboxError):
    """A command's stored bytes are more than the journal takes in one inbox
    entry (``journal.inbox.MAX_ENTRY_BYTES`` unless the journal's URL sets
    ``max_entry_bytes``); nothing was stored.  ``what`` names the command,
    ``size`` and ``limit`` are bytes."""

    def __init__(self, session: str, what: str, size: int, limit: int) -> None:
        self.session, self.what, self.size, self.limit = session, what, size, limit
        super().__init__(
            f"session {session}: the {what} command is {size:,} bytes, over the inbox's "
            f"limit of {limit:,} bytes per entry; nothing was stored: send less"
        )


class InboxUnavailableError(JournalUnavailableError):
    """A put into a session's inbox could not reach the journal: retryable.

    Whether the command was stored is unknown; putting it again under the
    same key is safe (a key's command is stored, and applied, once)."""

    def __init__(self, session: str, key: str, reason: str) -> None:
        self.session, self.key = session, key
        super().__init__(
            f"session {session}: the command with key {key!r} may not have reached the "
            f"inbox ({reason}); send it again with the same key once the journal is back "
            "(it is applied once however often it is sent)"
        )
