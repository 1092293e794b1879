"""Any model served through the Chat Completions API: ``OpenAIModel``.

``client`` holds the model (the SDK client, attempts), ``request`` maps a
``ModelRequest`` to the API's body, ``stream`` translates the stream's chunks
into deltas, ``errors`` turns SDK failures into ``ModelError``.  Importing
this package needs the ``openai`` extra; without it, ``MissingExtraError``
says how to install it.  The story: docs/models.md.
"""

try:
    import openai as _sdk  # noqa: F401  (checked here, used by the modules below)
except ImportError as exc:
    from ..errors import MissingExtraError

    raise MissingExtraError(
        "the OpenAI-compatible model (OpenAIModel)", extra="openai", package="openai"
    ) from exc

from .client import DEFAULT_CONTEXT_WINDOW as DEFAULT_CONTEXT_WINDOW
from .client import OpenAIModel as OpenAIModel
from .request import MaxTokensField as MaxTokensField
from .request import api_messages as api_messages
from .request import request_params as request_params
from .stream import STOP_REASONS as STOP_REASONS
from .stream import ChunkTranslator as ChunkTranslator

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "STOP_REASONS",
    "ChunkTranslator",
    "MaxTokensField",
    "OpenAIModel",
    "api_messages",
    "request_params",
]
