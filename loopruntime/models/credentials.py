"""Keeping a provider's credentials out of errors, for every adapter.

Rules: a credential never appears in a ``ModelError``'s message, nor in an
exception chained to it; the forms looked for are the text itself and the
``repr`` forms the HTTP stack uses when it names a header value it refuses.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopruntime.errors import ModelError

__all__ = ["chainable", "redacted", "secret_forms"]


def secret_forms(*held: object) -> tuple[str, ...]:
    """Every form of the credentials ``held`` (non-strings and empty ones are
    skipped) to cut from a message: the text, and the ``repr`` of its text
    and of its bytes (``b'Bearer sk-...\\n...'``), longest first so no shorter
    form replaces part of a longer one."""
    forms: list[str] = []
    for secret in (s for s in held if isinstance(s, str) and s):
        shown = (secret, repr(secret)[1:-1], repr(secret.encode(errors="replace"))[2:-1])
        forms.extend(f for f in shown if f not in forms)
    return tuple(sorted(forms, key=len, reverse=True))


def _redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return text


def redacted(error: ModelError, secrets: Sequence[str]) -> ModelError:
    """``error`` itself when its message shows no secret, else the same error
    with each secret replaced by ``[redacted]``."""
    message = str(error)
    cut = _redact(message, secrets)
    if cut == message:
        return error
    return ModelError(
        cut,
        kind=error.error_kind,
        code=error.code,
        retryable=error.retryable,
        retry_after=error.retry_after,
        status=error.status,
    )


def chainable(exc: BaseException, secrets: Sequence[str]) -> BaseException | None:
    """``exc`` to chain a ``ModelError`` to, or None when its text (or that of
    an exception chained to it) shows a credential, so no traceback prints it."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:  # a chain may loop
        if any(secret in str(current) for secret in secrets):
            return None
        seen.append(current)
        current = current.__cause__ or current.__context__
    return exc
