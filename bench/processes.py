"""What the benchmark's scripts share about processes: a run that unwinds on a signal,
and a helper process (a peer's proxy) waited for until it answers, then stopped."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def stoppable() -> None:
    """Ctrl-C and SIGTERM unwind the run, so every server it started is stopped (a run
    started in the background inherits SIGINT ignored, and SIGTERM's default skips
    the clean-up); the runs already kept stay kept."""
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, term)


@contextmanager
def answering(
    proc: subprocess.Popen[bytes], log: Path, ready: str, name: str, wait_s: float, poll_s: float
) -> Iterator[None]:
    """``proc`` (its output in ``log``) once ``ready`` answers 200; terminated on exit
    (killed after 10 s). Its exit or ``wait_s`` without an answer is a RuntimeError."""
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}: {log.read_text()[-800:]}")
            try:
                if httpx.get(ready, timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not answering after {wait_s:.0f} s")
            time.sleep(poll_s)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
