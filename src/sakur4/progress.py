"""Progress of a long run: a live bar on a terminal (rich), plain lines anywhere else.

A run that takes minutes (a demo strategy's replay, a benchmark run, an index of a
large tree) says it is alive. On a terminal, rich's bar is redrawn in place; into a
pipe or a log file, one plain line every few seconds, no escape codes. Both show the
same figures (:meth:`Meter.status`): how many of how many, what was processed, the
time so far, and the time left at the pace so far.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

# How often a plain line is written while a run goes on (the issue's "at least every
# 5 s"); a terminal's bar is redrawn several times a second.
PLAIN_EVERY = 5.0


def clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour)."""
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Meter:
    """One run's count: steps done of ``total``, and a running sum of what they
    processed (tokens, files) when ``processed`` names it. Safe to read from another
    thread while one thread advances it.

    The time left is the pace since the first step ended, applied to the steps left:
    the first one carries the start-up (a gateway's probe, the prefill of a harness's
    head) and would make every later estimate too long. ``waiting`` is shown until
    then (default: waiting for the first ``noun``).
    """

    def __init__(
        self,
        what: str,
        total: int,
        *,
        noun: str = "call",
        processed: str | None = None,
        waiting: str | None = None,
    ) -> None:
        self.what = what
        self.total = total
        self.noun = noun
        self.processed_name = processed
        self.waiting = waiting or f"waiting for the first {noun}"
        self.done = 0
        self.processed = 0
        self.started = time.monotonic()
        self.first_at: float | None = None  # when the first step ended
        self.first_steps = 0  # how many steps that was
        self._lock = threading.Lock()

    def advance(self, processed: int = 0, steps: int = 1) -> None:
        """``steps`` more done, which processed ``processed`` more."""
        with self._lock:
            self.done += steps
            self.processed += processed
            if self.first_at is None:
                self.first_at, self.first_steps = time.monotonic(), self.done

    def left(self) -> float | None:
        """Seconds left at the pace since the first step (None until a second one)."""
        with self._lock:
            done, total, first_at, first = self.done, self.total, self.first_at, self.first_steps
        if first_at is None or done <= first:
            return None
        return max(total - done, 0) * (time.monotonic() - first_at) / (done - first)

    def status(self) -> str:
        """e.g. ``call 12 of 40, 8,321 tokens processed, 0:42 so far, about 1:10 left``."""
        with self._lock:
            done, processed = self.done, self.processed
        parts = [f"{self.noun} {done:,} of {max(self.total, done):,}"]
        if self.processed_name:
            parts.append(f"{processed:,} {self.processed_name}")
        parts.append(f"{clock(time.monotonic() - self.started)} so far")
        left = self.left()
        if left is not None and done >= self.total:
            parts.append("finishing")  # the planned steps are done; a re-read may follow
        elif left is not None:
            parts.append(f"about {clock(left)} left")
        else:
            parts.append(self.waiting if done == 0 else "time left after the next")
        return ", ".join(parts)


class _Status(ProgressColumn):
    """The meter's own figures, read at every redraw (the time moves between steps)."""

    def __init__(self, meter: Meter) -> None:
        super().__init__()
        self.meter = meter

    def render(self, task: Task) -> Text:
        return Text(self.meter.status())


@contextmanager
def shown(
    meter: Meter, stream: TextIO | None = None, *, every: float | None = None
) -> Iterator[Meter]:
    """Show ``meter`` on ``stream`` (default stderr) while the block runs: a bar on a
    terminal (gone at the end), else ``what: status`` every ``every`` seconds (default
    :data:`PLAIN_EVERY`)."""
    out = sys.stderr if stream is None else stream
    interval = PLAIN_EVERY if every is None else every
    console = Console(file=out)
    # A dumb terminal (TERM=dumb, Emacs' shell) cannot redraw: rich would print nothing
    # until the end there, so it gets the plain lines.
    if console.is_terminal and not console.is_dumb_terminal:
        columns = (TextColumn("{task.description}"), BarColumn(bar_width=24), _Status(meter))
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(meter.what, total=meter.total)
            stop = threading.Event()

            def follow() -> None:  # the bar's length follows the meter's count
                while not stop.wait(0.25):
                    bar.update(task, completed=meter.done, total=max(meter.total, meter.done))

            follower = threading.Thread(target=follow, name="sakur4-progress", daemon=True)
            follower.start()
            try:
                yield meter
            finally:
                stop.set()
                follower.join()
        return
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(interval):
            out.write(f"{meter.what}: {meter.status()}\n")
            out.flush()

    ticker = threading.Thread(target=tick, name="sakur4-progress", daemon=True)
    ticker.start()
    try:
        yield meter
    finally:
        stop.set()
        ticker.join()
