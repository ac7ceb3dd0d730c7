"""What the server holds: the last prompt's layout, and where it can resume from.

Changing the prompt at token position p invalidates the server's cache from p
on; a server resumes from the latest position it can restore at or before p.
For a full-attention model that is p itself (every boundary); for sliding-window
and hybrid models it is the latest context checkpoint (BACKEND-FACTS.md); with no
checkpoint source it is the head (0) — nothing reused.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from sakur4.errors import InputError


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """Token positions the server can resume from. Use :meth:`every`, :meth:`at`, :meth:`none`."""

    positions: tuple[int, ...] = ()
    every_boundary: bool = False

    @classmethod
    def every(cls) -> Checkpoints:
        """A full-attention server: any prefix of the cached prompt is reusable."""
        return cls((), True)

    @classmethod
    def at(cls, positions: Iterable[int]) -> Checkpoints:
        """A checkpoint ring: only these positions (include the cached prompt's end)."""
        ps = sorted(set(positions))
        if ps and ps[0] < 0:
            raise InputError("checkpoint positions must not be negative")
        return cls(tuple(ps), False)

    @classmethod
    def none(cls) -> Checkpoints:
        """No checkpoint source: every change re-processes from the head."""
        return cls((), False)

    def latest_at_or_before(self, position: int) -> int:
        """The resume point for a prompt that first differs from the cache at ``position``."""
        if position <= 0:
            return 0
        if self.every_boundary:
            return position
        i = bisect_right(self.positions, position)
        return self.positions[i - 1] if i else 0


@dataclass(frozen=True, slots=True)
class Span:
    """One rendered message of the cached prompt: its identity and token span [start, end)."""

    key: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Layout:
    """The last prompt the server received for this session, message by message."""

    spans: tuple[Span, ...]

    def __post_init__(self) -> None:
        prev = 0
        for s in self.spans:
            if not prev <= s.start <= s.end:
                raise InputError(f"layout spans must be in order with start <= end: {s}")
            prev = s.end

    @property
    def end(self) -> int:
        """The cached prompt's length in tokens."""
        return self.spans[-1].end if self.spans else 0
