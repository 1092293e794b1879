"""Model adapters: the scripted local model, Anthropic's Claude, any
OpenAI-compatible server, and recordings of any of them (docs/models.md)."""

from typing import Any

from .digest import request_digest as request_digest
from .errors import MissingExtraError as MissingExtraError
from .errors import RecordingError as RecordingError
from .errors import RecordingMismatchError as RecordingMismatchError
from .recording import RecordingModel as RecordingModel
from .recording import ReplayModel as ReplayModel
from .scripted import Reply as Reply
from .scripted import ScriptedModel as ScriptedModel
from .scripted import ToolCall as ToolCall

__all__ = [
    "AnthropicModel",
    "MissingExtraError",
    "OpenAIModel",
    "RecordingError",
    "RecordingMismatchError",
    "RecordingModel",
    "ReplayModel",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "request_digest",
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
