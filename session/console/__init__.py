"""The console: a web page over the journal to watch sessions live, travel
through their history and answer what waits on a person (docs/console.md).

It needs the ``console`` extra (Starlette, Hypercorn); ``views`` and
``overview`` need neither and hold its logic.
"""

from .serve import parse_bind as parse_bind
from .serve import serve_console as serve_console

__all__ = ["parse_bind", "serve_console"]
