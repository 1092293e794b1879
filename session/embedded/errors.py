"""Session errors (the ``LoopError`` family, so callers catch one base)."""

from __future__ import annotations

from collections.abc import Sequence

from journal.events import ConfigChange
from loopruntime import CommandError, LoopError

__all__ = [
    "DefinitionDriftError",
    "EmptyInputError",
    "ForkError",
    "InvalidContentError",
    "NoResultError",
    "SeqOutOfRangeError",
    "SessionExistsError",
    "SessionLagError",
    "UnknownSessionError",
    "VerifyError",
]


class UnknownSessionError(LoopError):
    """Restore named a session the journal does not hold."""

    code = "session.unknown"


class DefinitionDriftError(LoopError):
    """``Session.restore(..., drift="refuse")`` found loops whose recorded
    configuration differs from the definition given; ``differences`` lists
    each (loop id, change).  Nothing was written, no lease was taken."""

    code = "session.definition_drift"

    def __init__(self, message: str, *, differences: Sequence[tuple[str, ConfigChange]]) -> None:
        super().__init__(message)
        self.differences = list(differences)


class SessionExistsError(LoopError):
    """Create named a session that already exists: one with records, or (from
    a client) one of another definition.  ``session``, ``definition`` (the
    existing session's) and ``requested`` are set when known."""

    code = "session.exists"

    def __init__(
        self,
        message: str,
        *,
        session: str | None = None,
        definition: str | None = None,
        requested: str | None = None,
    ) -> None:
        super().__init__(message)
        self.session, self.definition, self.requested = session, definition, requested


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


class InvalidContentError(CommandError):
    """Input the journal could not record and read back (a block that is not a
    content block, text that is not Unicode, a flag that is not a bool); it
    was refused before anything was committed."""

    code = "command.invalid_content"


class EmptyInputError(InvalidContentError):
    """Input with nothing to say: no content block, or a text block that is
    empty or only whitespace.  The model API refuses such a message, so a
    turn would only fail; it was refused before anything was committed.
    ``what`` names the argument ("the input", "the steering")."""

    code = "command.empty_input"

    def __init__(self, what: str, detail: str) -> None:
        self.what = what
        super().__init__(f"{what} is empty ({detail}): give it some text; nothing was committed")


class SeqOutOfRangeError(LoopError):
    """``subscribe(after=)`` named a seq below 0 or beyond the session's head."""

    code = "session.seq_out_of_range"

    def __init__(self, session: str, after: int, head: int) -> None:
        self.after, self.head = after, head
        super().__init__(
            f"subscribe(after={after}) is outside session {session}, whose records are "
            f"seq 1..{head}; pass 0 for everything, or the last seq you have seen"
        )


class ForkError(LoopError):
    """A fork was refused (a seq outside the source, a source that fails its
    check or cannot be forked); nothing was written."""

    code = "session.fork_refused"


class NoResultError(LoopError):
    """``Session.result`` asked for a turn that did not complete (or never
    ended): it has no answer to give."""

    code = "session.no_result"
