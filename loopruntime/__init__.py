"""loopruntime: one agent loop — the actor, turns, tools, gates, compaction.

Built on ``journal`` (it never imports ``session``).
"""

from .actor import Loop as Loop
from .actor import LoopHost as LoopHost
from .definition import Delegate as Delegate
from .definition import Limits as Limits
from .definition import LoopDefinition as LoopDefinition
from .definition import Mode as Mode
from .errors import CommandError as CommandError
from .errors import GateMismatchError as GateMismatchError
from .errors import IdempotencyKeyError as IdempotencyKeyError
from .errors import InvalidAnswerError as InvalidAnswerError
from .errors import LoopClosedError as LoopClosedError
from .errors import LoopError as LoopError
from .errors import ModelError as ModelError
from .errors import ModeNotFoundError as ModeNotFoundError
from .errors import NotQueuedError as NotQueuedError
from .errors import NotRegisteredError as NotRegisteredError
from .errors import NotUnknownEffectError as NotUnknownEffectError
from .errors import OutsideToolCallError as OutsideToolCallError
from .errors import QueueFullError as QueueFullError
from .model import Model as Model
from .model import ModelRequest as ModelRequest
from .notices import INTERRUPTED_NOTICE as INTERRUPTED_NOTICE
from .notices import TRUNCATED_NOTICE as TRUNCATED_NOTICE
from .state import LoopState as LoopState
from .state import LoopStatus as LoopStatus
from .state import fold as fold
from .summary import Compactor as Compactor
from .summary import ModelCompactor as ModelCompactor
from .tools import Tool as Tool
from .tools import ToolContext as ToolContext
from .tools import ask_user as ask_user
from .tools import ask_user_tool as ask_user_tool
from .tools import tool as tool

__all__ = [
    "INTERRUPTED_NOTICE",
    "TRUNCATED_NOTICE",
    "CommandError",
    "Compactor",
    "Delegate",
    "GateMismatchError",
    "IdempotencyKeyError",
    "InvalidAnswerError",
    "Limits",
    "Loop",
    "LoopClosedError",
    "LoopDefinition",
    "LoopError",
    "LoopHost",
    "LoopState",
    "LoopStatus",
    "Mode",
    "ModeNotFoundError",
    "Model",
    "ModelCompactor",
    "ModelError",
    "ModelRequest",
    "NotQueuedError",
    "NotRegisteredError",
    "NotUnknownEffectError",
    "OutsideToolCallError",
    "QueueFullError",
    "Tool",
    "ToolContext",
    "ask_user",
    "ask_user_tool",
    "fold",
    "tool",
]
