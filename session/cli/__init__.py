"""The ``loopruntime`` command line, on top of every other part of ``session``."""
