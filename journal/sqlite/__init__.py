"""SQLite journal: the embedded default backend (``sqlite:///path/to/file.db``).

``journal.py`` is the facade, ``schema.py`` the file and its schema,
``writer.py`` the writer thread, ``reading.py`` the readers and ``tail``.
"""

from .journal import SQLiteJournal as SQLiteJournal
from .writer import SQLiteStatistics as SQLiteStatistics

__all__ = ["SQLiteJournal", "SQLiteStatistics"]
