"""Claude through the official ``anthropic`` SDK: ``AnthropicModel``.

``client`` holds the model (the SDK client, attempts and retries), ``request``
maps a ``ModelRequest`` to the API's body, ``stream`` translates the API's
events into deltas, ``errors`` turns SDK failures into ``ModelError`` and
decides retries.  How it runs under trio, its error kinds, retry and prompt
caching rules: docs/anthropic.md.
"""

from .client import DEFAULT_CONTEXT_WINDOW as DEFAULT_CONTEXT_WINDOW
from .client import DEFAULT_MODEL as DEFAULT_MODEL
from .client import AnthropicModel as AnthropicModel
from .request import ThinkingOption as ThinkingOption
from .request import api_messages as api_messages
from .request import request_params as request_params
from .stream import StreamTranslator as StreamTranslator

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MODEL",
    "AnthropicModel",
    "StreamTranslator",
    "ThinkingOption",
    "api_messages",
    "request_params",
]
