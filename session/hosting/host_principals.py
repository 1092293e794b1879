"""Which principals a host takes inbox commands from, and the outcome that
refuses a command from any other (``Host(principals=...)``)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from journal import inbox as ib
from loopruntime.host import check_principal

__all__ = ["Principals", "checked_principals", "refusal"]

Principals = Collection[str] | Callable[[str | None], bool]
"""The principals a host takes commands from: a collection of them, or a
predicate on the command's principal (None when it names none)."""


def checked_principals(principals: Principals | None) -> Principals | None:
    """``principals`` checked: a predicate, or a collection of principals."""
    if principals is None or callable(principals):
        return principals
    if isinstance(principals, str) or not isinstance(principals, Collection):
        raise TypeError(
            f"Host principals takes a collection of principals or a predicate, not {principals!r}"
        )
    for p in principals:
        check_principal(p)
    return frozenset(principals)


def refusal(
    known: Principals | None, host_id: str, command: ib.InboxCommand, log: Any
) -> ib.InboxOutcome | None:
    """The outcome refusing ``command`` for its principal on host ``host_id``
    (None: taken); ``log`` is the host's logger."""
    principal = command.principal
    if known is None:
        return None
    try:
        taken = known(principal) if callable(known) else principal in known
    except Exception as exc:
        # The host's own predicate failing must refuse, not apply.
        log.warning("principal_check_failed", principal=principal, error=repr(exc))
        taken = False
    if taken is True:
        return None
    who = "a command naming no principal"
    if principal is not None:
        who = f"principal {principal!r}"
    message = (
        f"{who} is not one host {host_id} takes commands from; nothing was applied: send "
        "it with principal= set to a principal the host knows (Host(principals=...))"
    )
    log.info("command_refused", principal=principal, command=ib.command_name(command))
    return ib.InboxOutcome(error="UnknownPrincipalError", message=message)
