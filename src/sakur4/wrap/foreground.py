"""The harness in the foreground: its own process group, given the terminal as a shell
gives it to a job, so that a signal meant for it reaches all of it.

- A Ctrl-C (or Ctrl-\\, Ctrl-Z) typed at the terminal goes to the harness's group only,
  once, as it would without wrap: an interactive harness counts its Ctrl-Cs.
- A SIGINT, SIGTERM or SIGHUP sent to the wrap itself (``kill -INT PID``) is forwarded
  to the harness's whole group, its children too (issue 41: ``kill -INT`` on wrap did
  not stop ``opencode run``: it went to the wrap alone while the wrap was the terminal's
  foreground, since nothing told a Ctrl-C from a kill). If the harness is still
  running :data:`ESCALATE_AFTER` seconds after a forwarded signal, it gets SIGTERM,
  then SIGKILL: a harness that only cancels its current request on SIGINT still ends.
- Ctrl-Z stops the harness; the wrap stops too, so the shell gets the terminal back, and
  ``fg`` resumes both.

The harness's exit code is returned (128 + N when a signal N ended it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Seconds a harness has to end after a forwarded signal before it gets the next one.
ESCALATE_AFTER = 10.0


def _terminal() -> int | None:
    """The controlling terminal's descriptor when this process's group is its
    foreground (the harness is then given the terminal), else None."""
    try:
        fd = sys.stdin.fileno()
        return fd if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp() else None
    except (OSError, ValueError):
        return None


def _give_terminal(fd: int, group: int) -> None:
    # A background process that sets the foreground group gets SIGTTOU: ignored here.
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, group)
    finally:
        signal.signal(signal.SIGTTOU, previous)


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


class Foreground:
    """One harness process run to its end with the terminal."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> None:
        self.tty = _terminal()
        self.group = 0  # the harness's process group, once it runs
        self.forwarded: list[int] = []  # signals sent on, in order
        self.last_forward = 0.0
        # Forwarding is in place before the harness starts: a signal in between (a
        # loaded machine can leave the wrap unscheduled while the harness is up and
        # printing) would otherwise end the wrap alone and leave the harness running.
        self.previous = {sig: signal.signal(sig, self._forward) for sig in FORWARDED}
        try:
            # The user's own command, as they typed it: running it is the point.
            self.child = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, process_group=0)  # noqa: S603
        except BaseException:
            self._restore()
            raise
        self.group = self.child.pid
        for signum in self.forwarded:  # what came while it started, sent on now
            _signal_group(self.group, signum)
        if self.tty is not None:
            _give_terminal(self.tty, self.group)
            # It may have touched the terminal before it was its own (SIGTTIN stops it).
            _signal_group(self.group, signal.SIGCONT)

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.forwarded.append(signum)
        self.last_forward = time.monotonic()
        if self.group:
            _signal_group(self.group, signum)

    def _restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _escalate(self) -> None:
        """The next signal, if the harness outlived a forwarded one by ESCALATE_AFTER."""
        if not self.forwarded or time.monotonic() - self.last_forward < ESCALATE_AFTER:
            return
        nxt = signal.SIGKILL if self.forwarded[-1] == signal.SIGTERM else signal.SIGTERM
        self.forwarded.append(nxt)
        self.last_forward = time.monotonic()
        _signal_group(self.group, nxt)

    def _stopped(self) -> None:
        """The harness stopped (Ctrl-Z): stop too, so the shell takes the terminal back;
        on ``fg`` give it to the harness again and let it go on."""
        if self.tty is not None:
            _give_terminal(self.tty, os.getpgrp())
        os.kill(os.getpid(), signal.SIGSTOP)
        if self.tty is not None:
            _give_terminal(self.tty, self.group)
        _signal_group(self.group, signal.SIGCONT)

    def wait(self) -> int:
        try:
            while True:
                try:
                    pid, status = os.waitpid(self.child.pid, os.WUNTRACED | os.WNOHANG)
                except ChildProcessError:
                    status, pid = 0, self.child.pid
                    break
                if pid == 0:
                    self._escalate()
                    time.sleep(0.05)
                    continue
                if os.WIFSTOPPED(status):
                    self._stopped()
                    continue
                break
        finally:
            self._restore()
            if self.tty is not None:
                _give_terminal(self.tty, os.getpgrp())
        self.child.returncode = os.waitstatus_to_exitcode(status)
        code = self.child.returncode
        return code if code >= 0 else 128 - code


def run_foreground(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> int:
    """Run ``argv`` with this terminal until it exits; its exit code (128 + N on signal N)."""
    return Foreground(argv, env, cwd).wait()
