"""Sakur4: a context-and-memory layer for coding agents on local inference servers."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sakur4")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
