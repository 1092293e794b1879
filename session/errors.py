"""Session errors (the ``LoopError`` family, so callers catch one base)."""

from __future__ import annotations

from loopruntime.errors import LoopError

__all__ = ["SessionExistsError", "SessionLagError", "UnknownSessionError", "VerifyError"]


class UnknownSessionError(LoopError):
    """Restore named a session the journal does not hold."""

    code = "session.unknown"


class SessionExistsError(LoopError):
    """Create named a session that already has records."""

    code = "session.exists"


class VerifyError(LoopError):
    """A live loop's state differs from the fold of its journal."""

    code = "session.verify_failed"


class SessionLagError(LoopError):
    """A subscriber fell too far behind; resume with ``subscribe(after=last_seq)``."""

    code = "session.subscriber_lagged"

    def __init__(self, session: str, last_seq: int) -> None:
        self.last_seq = last_seq
        super().__init__(
            f"subscriber of session {session} fell behind and missed durable records; "
            f"resume with subscribe(after={last_seq})"
        )
