"""Errors of the model adapters' own making (not a provider's answer).

Each is a ``LoopError``, so the ``loopruntime`` command says it in one line.
A recording's errors are ``ModelError``s: a loop replaying one ends its turn
with the error as its failure, like any failed model call.
"""

from __future__ import annotations

from loopruntime.errors import LoopError, ModelError

__all__ = ["MissingExtraError", "RecordingError", "RecordingMismatchError"]


class MissingExtraError(LoopError, ImportError):
    """An adapter needs an optional package that is not installed.

    Also an ``ImportError``, so code that guards an import the usual way
    keeps working.  ``extra`` is the extra of loopruntime that installs it.
    """

    kind = "model"
    code = "model.extra_missing"

    def __init__(self, what: str, *, extra: str, package: str) -> None:
        super().__init__(
            f"{what} needs the {package!r} package, which is not installed; "
            f"install the extra: pip install 'loopruntime[{extra}]'"
        )
        self.extra = extra
        self.package = package


class RecordingError(ModelError):
    """A recording could not be read or written (``path`` names it)."""

    def __init__(self, message: str, *, path: str, code: str = "model.recording") -> None:
        super().__init__(message, kind="script", code=code)
        self.path = path


class RecordingMismatchError(RecordingError):
    """A replayed call whose request is not one the recording holds.

    ``call`` counts the replay's calls from 1; ``message_index`` is the first
    message (from 0) that differs from the nearest recorded request, or None
    when the difference is outside the messages (the system prompt, the
    tools, the settings) or no recorded request is left to compare with.
    """

    def __init__(self, message: str, *, path: str, call: int, message_index: int | None) -> None:
        super().__init__(message, path=path, code="model.recording_mismatch")
        self.call = call
        self.message_index = message_index
