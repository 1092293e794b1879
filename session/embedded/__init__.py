"""The embedded runtime: a session in your process over its journal.

The bottom part of ``session``: every other part stands on this one, and nothing here
imports them.
"""
