"""Sakur4: a context-and-memory layer for coding agents on local inference servers."""

# The one place the version is written: the build reads it from here (pyproject's
# [tool.hatch.version]), and reading it costs nothing at start-up, where
# importlib.metadata took 40 ms of every `sakur4` call (issue 18).
__version__ = "0.1.0"

__all__ = ["__version__"]
