"""Model adapters: the scripted local model, Anthropic's Claude, any
OpenAI-compatible server, recordings of any of them, and the rate limits
the providers' models share in a process (docs/models.md)."""

from typing import Any

from .digest import request_digest as request_digest
from .errors import MissingExtraError as MissingExtraError
from .errors import RecordingError as RecordingError
from .errors import RecordingMismatchError as RecordingMismatchError
from .limiter import LimiterStatistics as LimiterStatistics
from .limiter import RateLimit as RateLimit
from .limiter import RateLimiter as RateLimiter
from .limiter import RateLimitError as RateLimitError
from .limiter import Waiting as Waiting
from .limiter import limiters as limiters
from .limiter import use_default_rate_limit as use_default_rate_limit
from .limiter import waiting_of as waiting_of
from .recording import RecordingModel as RecordingModel
from .recording import ReplayModel as ReplayModel
from .scripted import Reply as Reply
from .scripted import ScriptedModel as ScriptedModel
from .scripted import ToolCall as ToolCall

__all__ = [
    "AnthropicModel",
    "LimiterStatistics",
    "MissingExtraError",
    "OpenAIModel",
    "RateLimit",
    "RateLimitError",
    "RateLimiter",
    "RecordingError",
    "RecordingMismatchError",
    "RecordingModel",
    "ReplayModel",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "Waiting",
    "limiters",
    "request_digest",
    "use_default_rate_limit",
    "waiting_of",
]


def __getattr__(name: str) -> Any:
    # Imported lazily: the SDKs are heavy and most loops use one or none;
    # the openai SDK is an extra, and importing OpenAIModel without it raises
    # MissingExtraError.
    if name == "AnthropicModel":
        from .anthropic import AnthropicModel

        return AnthropicModel
    if name == "OpenAIModel":
        from .openai import OpenAIModel

        return OpenAIModel
    raise AttributeError(name)
