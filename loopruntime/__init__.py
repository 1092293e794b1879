"""loopruntime: one agent loop — the actor, turns, tools, gates, compaction.

Built on ``journal`` (it never imports ``session``).
"""

from .actor import Loop as Loop
from .actor import LoopHost as LoopHost
from .classifiers import Classifier as Classifier
from .classifiers import PermissionRequest as PermissionRequest
from .classifiers import Review as Review
from .classifiers import classifier as classifier
from .definition import Delegate as Delegate
from .definition import Limits as Limits
from .definition import LoopDefinition as LoopDefinition
from .definition import Mode as Mode
from .errors import BudgetExhaustedError as BudgetExhaustedError
from .errors import ChildRejectedError as ChildRejectedError
from .errors import CommandError as CommandError
from .errors import DefinitionError as DefinitionError
from .errors import GateMismatchError as GateMismatchError
from .errors import IdempotencyKeyError as IdempotencyKeyError
from .errors import InvalidAnswerError as InvalidAnswerError
from .errors import LeaseLostError as LeaseLostError
from .errors import LifecycleError as LifecycleError
from .errors import LoopClosedError as LoopClosedError
from .errors import LoopError as LoopError
from .errors import LoopStoppedError as LoopStoppedError
from .errors import ModelError as ModelError
from .errors import ModeNotFoundError as ModeNotFoundError
from .errors import NameClashError as NameClashError
from .errors import NotQueuedError as NotQueuedError
from .errors import NotRegisteredError as NotRegisteredError
from .errors import NotUnknownEffectError as NotUnknownEffectError
from .errors import OutsideToolCallError as OutsideToolCallError
from .errors import PayloadTooLargeError as PayloadTooLargeError
from .errors import ProgressTooLargeError as ProgressTooLargeError
from .errors import QueueFullError as QueueFullError
from .errors import UnknownLoopError as UnknownLoopError
from .hooks import AddContext as AddContext
from .hooks import AfterTool as AfterTool
from .hooks import BeforeModel as BeforeModel
from .hooks import BeforeTool as BeforeTool
from .hooks import Deny as Deny
from .hooks import Hook as Hook
from .hooks import ReplaceResult as ReplaceResult
from .hooks import Rewrite as Rewrite
from .hooks import StopTurn as StopTurn
from .hooks import TurnEnd as TurnEnd
from .hooks import hook as hook
from .lifecycle import Phase as Phase
from .model import Model as Model
from .model import ModelRequest as ModelRequest
from .notices import INTERRUPTED_NOTICE as INTERRUPTED_NOTICE
from .notices import TRUNCATED_NOTICE as TRUNCATED_NOTICE
from .permits import limit_working_loops as limit_working_loops
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
    "AddContext",
    "AfterTool",
    "BeforeModel",
    "BeforeTool",
    "BudgetExhaustedError",
    "ChildRejectedError",
    "Classifier",
    "CommandError",
    "Compactor",
    "DefinitionError",
    "Delegate",
    "Deny",
    "GateMismatchError",
    "Hook",
    "IdempotencyKeyError",
    "InvalidAnswerError",
    "LifecycleError",
    "Limits",
    "Loop",
    "LeaseLostError",
    "LoopClosedError",
    "LoopDefinition",
    "LoopError",
    "LoopHost",
    "LoopState",
    "LoopStatus",
    "LoopStoppedError",
    "Mode",
    "ModeNotFoundError",
    "Model",
    "ModelCompactor",
    "ModelError",
    "ModelRequest",
    "NameClashError",
    "NotQueuedError",
    "NotRegisteredError",
    "NotUnknownEffectError",
    "OutsideToolCallError",
    "ProgressTooLargeError",
    "PermissionRequest",
    "PayloadTooLargeError",
    "Phase",
    "QueueFullError",
    "ReplaceResult",
    "Review",
    "Rewrite",
    "StopTurn",
    "Tool",
    "ToolContext",
    "TurnEnd",
    "UnknownLoopError",
    "ask_user",
    "ask_user_tool",
    "classifier",
    "fold",
    "hook",
    "limit_working_loops",
    "tool",
]
