"""The second public tier: what a host of loops (``session``) builds on.

``loopruntime`` exports what an application writes (definitions, tools,
models, errors).  This module adds what a runtime that hosts loops needs
beyond that: the actor's commands, the fold's helpers, the pieces restore and
replay reuse.  ``session`` imports from ``loopruntime`` and from here only; a
test pins both lists, so a name moving between modules never breaks a host.
"""

from .budgets import tokens_spent as tokens_spent
from .commands import AnswerGate as AnswerGate
from .commands import CancelQueuedInput as CancelQueuedInput
from .commands import ChangeInference as ChangeInference
from .commands import ChangeMode as ChangeMode
from .commands import Command as Command
from .commands import Compact as Compact
from .commands import DecideGate as DecideGate
from .commands import Interrupt as Interrupt
from .commands import Pause as Pause
from .commands import ReplaceTools as ReplaceTools
from .commands import Reply as Reply
from .commands import ResolveToolCall as ResolveToolCall
from .commands import Resume as Resume
from .commands import Shutdown as Shutdown
from .commands import Snapshot as Snapshot
from .commands import Steer as Steer
from .commands import SubagentResult as SubagentResult
from .commands import UserInput as UserInput
from .configuration import change_text as change_text
from .configuration import changes as changes
from .configuration import describe as describe
from .configuration import digest as digest
from .configuration import prompts_of as prompts_of
from .configuration import restore_config as restore_config
from .configuration import server_of as server_of
from .context import merged as merged
from .context import unanswered_tool_uses as unanswered_tool_uses
from .definition import find_definition as find_definition
from .delegation import child_outcome as child_outcome
from .empties import NO_LIST as NO_LIST
from .empties import own_list as own_list
from .errors import GuardFailedError as GuardFailedError
from .ids import new_id as new_id
from .keys import MAX_KEY_LENGTH as MAX_KEY_LENGTH
from .keys import check_key as check_key
from .keys import command_digest as command_digest
from .keys import command_name as command_name
from .keys import repeat_of as repeat_of
from .model import Accumulator as Accumulator
from .model import Delta as Delta
from .ownership import OwnerCheck as OwnerCheck
from .ownership import owning as owning
from .ports import CommitOptions as CommitOptions
from .principals import MAX_PRINCIPAL_LENGTH as MAX_PRINCIPAL_LENGTH
from .principals import check_principal as check_principal
from .settling import reply_cut_short as reply_cut_short
from .settling import settle_turn_events as settle_turn_events
from .state import KEYS_KEPT as KEYS_KEPT
from .state import FoldError as FoldError
from .state import KeyUse as KeyUse
from .state import copy_state as copy_state
from .state import image_bytes as image_bytes
from .state import image_missing as image_missing
from .state import image_state as image_state
from .timers import RunTimer as RunTimer
from .timers import Ticket as Ticket
from .tools import ToolInputError as ToolInputError

__all__ = [
    "KEYS_KEPT",
    "MAX_KEY_LENGTH",
    "MAX_PRINCIPAL_LENGTH",
    "NO_LIST",
    "Accumulator",
    "AnswerGate",
    "CancelQueuedInput",
    "ChangeInference",
    "ChangeMode",
    "Command",
    "CommitOptions",
    "Compact",
    "DecideGate",
    "Delta",
    "FoldError",
    "GuardFailedError",
    "Interrupt",
    "KeyUse",
    "Pause",
    "ReplaceTools",
    "Reply",
    "ResolveToolCall",
    "Resume",
    "Shutdown",
    "Snapshot",
    "Steer",
    "SubagentResult",
    "ToolInputError",
    "UserInput",
    "check_key",
    "check_principal",
    "change_text",
    "changes",
    "child_outcome",
    "command_digest",
    "command_name",
    "copy_state",
    "describe",
    "digest",
    "find_definition",
    "image_bytes",
    "image_missing",
    "image_state",
    "merged",
    "new_id",
    "repeat_of",
    "prompts_of",
    "reply_cut_short",
    "restore_config",
    "server_of",
    "settle_turn_events",
    "unanswered_tool_uses",
    "own_list",
    "OwnerCheck",
    "owning",
    "RunTimer",
    "Ticket",
    "tokens_spent",
]
