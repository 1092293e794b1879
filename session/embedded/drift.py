"""Deploys: a restore meets a definition that changed since the journal
recorded the loop's configuration.

Everything here is decided from the restored states and the definitions,
before the session's lease is taken, so a refused deploy never fences the
process still running the session.  ``drift="record"`` commits
``loop.reconfigured`` with every change and goes on; ``drift="refuse"``
raises ``DefinitionDriftError`` listing them.  Either way, a model or tool
that a loop chose by command must still be registered.  docs/restore.md
("Deploys") tells the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, Protocol

from journal.events import ConfigChange, Event, LoopConfigured, LoopReconfigured
from loopruntime import LoopDefinition, LoopState, NotRegisteredError
from loopruntime.host import change_text, changes, describe, prompts_of, restore_config

from .errors import DefinitionDriftError
from .restore import settle_restored

__all__ = [
    "DRIFT_CHOICES",
    "Drift",
    "PromptLedger",
    "check_choice",
    "check_drift",
    "configuration_events",
    "reopening",
]

Drift = Literal["record", "refuse"]
DRIFT_CHOICES: tuple[Drift, ...] = ("record", "refuse")


def check_choice(drift: object) -> None:
    """Refuse a ``drift=`` that is neither choice (before any I/O)."""
    if drift not in DRIFT_CHOICES:
        raise ValueError(
            f"Session.restore(drift={drift!r}) is not a choice: use drift='record' (commit "
            "loop.reconfigured and go on) or drift='refuse' (raise DefinitionDriftError)"
        )


def check_drift(
    session_id: str,
    states: Mapping[str, LoopState],
    definition_of: Callable[[str, LoopState], LoopDefinition],
    drift: Drift,
) -> None:
    """Raise when a loop's journal names a model or tool its definition does
    not register (whatever ``drift``), or, under ``refuse``, when any loop's
    recorded configuration differs from its definition."""
    found: list[tuple[str, ConfigChange]] = []
    for loop_id, state in states.items():
        if state.stopped:
            continue
        definition = definition_of(loop_id, state)
        _check_registered(session_id, loop_id, state, definition)
        if drift == "refuse" and state.configured is not None:
            now = restore_config(state.configured, definition)
            found += [(loop_id, c) for c in changes(state.configured, now)]
    if found:
        listed = "; ".join(f"loop {loop}: {change_text(c)}" for loop, c in found)
        raise DefinitionDriftError(
            f"session {session_id} ran under another definition than the one given "
            f"({listed}); nothing was written and the session's lease was not taken. "
            "Restore with drift='record' to accept the changes (each is recorded as "
            "loop.reconfigured), or deploy the definition the session ran under",
            differences=found,
        )


def _check_registered(
    session_id: str, loop_id: str, state: LoopState, definition: LoopDefinition
) -> None:
    where = f"cannot restore loop {loop_id} of session {session_id}: its journal"
    try:
        if state.chosen_model is not None:
            definition.registered_model(state.chosen_model)
        for name in state.chosen_tools or ():
            definition.registered_tool(name)
    except NotRegisteredError as exc:
        raise NotRegisteredError(f"{where} names a choice made by command, but {exc}") from exc


def configuration_events(
    state: LoopState,
    definition: LoopDefinition,
    new_prompts: Callable[[dict[str, str]], dict[str, str]],
) -> list[Event]:
    """What a restore records about the loop's configuration: nothing when
    it is unchanged, ``loop.configured`` for a journal that never recorded
    one, else ``loop.reconfigured`` with every change."""
    if state.stopped:
        return []
    if state.configured is None:
        config = describe(definition)
        return [LoopConfigured(config=config, prompts=new_prompts(prompts_of(definition)))]
    # The servers' tools are compared once the loop lists them again
    # (``loopruntime.relisting``): until then, what the journal recorded.
    config = restore_config(state.configured, definition)
    if config == state.configured:
        # The common restore (a takeover of many sessions of one definition):
        # one comparison in C instead of a walk over every field.
        return []
    found = changes(state.configured, config)
    if not found:
        return []
    return [
        LoopReconfigured(config=config, changes=found, prompts=new_prompts(prompts_of(definition)))
    ]


class PromptLedger(Protocol):
    def new_prompts(self, prompts: dict[str, str]) -> dict[str, str]:
        """Of ``prompts``, those the session has not recorded yet (now counted)."""
        ...


def reopening(state: LoopState, definition: LoopDefinition, ledger: PromptLedger) -> list[Event]:
    """What a restore commits for one loop before it runs: what it runs under
    now first (the settlement and the turns after it run under that), then the
    settlement of what a crash left open."""
    configured = configuration_events(state, definition, ledger.new_prompts)
    return configured + settle_restored(state, definition)
