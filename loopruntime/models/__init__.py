"""Model adapters: the scripted local model and Anthropic's Claude."""

from typing import Any

from .scripted import Reply as Reply
from .scripted import ScriptedModel as ScriptedModel
from .scripted import ToolCall as ToolCall

__all__ = ["AnthropicModel", "Reply", "ScriptedModel", "ToolCall"]


def __getattr__(name: str) -> Any:
    # Imported lazily: the anthropic SDK is heavy and most loops never use it.
    if name == "AnthropicModel":
        from .anthropic import AnthropicModel

        return AnthropicModel
    raise AttributeError(name)
