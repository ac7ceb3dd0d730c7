"""The benchmark's server modes beyond the two ``sakur4 demo`` runs (its ring and
``--swa-full``, :mod:`sakur4.demo.compare`): the server's default flags and KV
shifting, and the ``--modes`` key of each."""

from __future__ import annotations

from sakur4.backends.launcher import ServerFlags
from sakur4.demo.compare import Mode, ring, swa_full


def default_flags(window: int) -> Mode:
    """The server's defaults (no ``-cms``: b11434's ``--help`` gives 8192, and 32
    checkpoints): what a user who skips the probe's advice runs."""
    return Mode("default", "default flags (-cms 8192, 32 checkpoints)", ServerFlags(ctx=window))


def cache_reuse(window: int, chunk: int = 256) -> Mode:
    """``--swa-full --cache-reuse N``: also shifts the KV of cached chunks of at least
    N tokens that reappear later in the prompt (text removed before them is free)."""
    return Mode(
        "cache-reuse",
        f"swa-full cache-reuse {chunk}",
        ServerFlags(ctx=window, swa_full=True, cache_reuse=chunk),
    )


MODES = {
    "default": default_flags,
    "ring": ring,
    "swa-full": swa_full,
    "cache-reuse": cache_reuse,
}


def mode(key: str, window: int) -> Mode:
    try:
        return MODES[key](window)
    except KeyError:
        raise ValueError(f"unknown server mode {key!r} (one of {', '.join(MODES)})") from None
