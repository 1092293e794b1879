"""PostgreSQL journal (``postgresql://user@host:port/db``), on psycopg 3.

``journal.py`` is the facade, ``schema.py`` the tables, connections and
error translation, ``writer.py`` the group commit (``arrays.py`` its binary
parameters), ``reading.py`` the pool, paged reads and LISTEN/NOTIFY tails.
"""

from .journal import PostgresJournal as PostgresJournal
from .schema import init_schema as init_schema

__all__ = ["PostgresJournal", "init_schema"]
