"""sakur4.progress: the figures a long run shows, as plain lines into a log and as a bar on
a terminal."""

from __future__ import annotations

import io
import re
import time

import pytest

from sakur4 import progress
from sakur4.progress import Meter, clock, shown


class _Terminal(io.StringIO):
    """A stream that says it is a terminal, as a person's stderr does."""

    def isatty(self) -> bool:
        return True


def _wait_for(stream: io.StringIO, pattern: str, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = stream.getvalue()
        if re.search(pattern, text):
            return text
        time.sleep(0.01)
    raise AssertionError(f"{pattern!r} never shown; shown: {stream.getvalue()!r}")


def test_clock_reads_minutes_and_seconds() -> None:
    assert clock(0) == "0:00"
    assert clock(75.4) == "1:15"
    assert clock(3725) == "1:02:05"


def test_the_status_says_how_far_what_was_processed_and_the_time_left() -> None:
    m = Meter("sakur4", 40, processed="tokens processed", waiting="the gateway probes")
    assert m.left() is None
    assert m.status() == "call 0 of 40, 0 tokens processed, 0:00 so far, the gateway probes"
    m.advance(1200)  # the first call: start-up included, not the pace
    assert m.left() is None
    assert m.status().endswith(", time left after the next")
    assert m.first_at is not None
    m.first_at -= 27  # 27 s for the 9 calls after it: 3 s a call, 30 calls left
    m.started -= 60
    m.advance(3000, steps=9)
    left = m.left()
    assert left is not None
    assert 89 <= left <= 91
    assert re.fullmatch(
        r"call 10 of 40, 4,200 tokens processed, 1:0\d so far, about 1:[23]\d left", m.status()
    )


def test_more_steps_than_planned_raise_the_total_and_leave_no_time() -> None:
    m = Meter("opencode", 2)
    m.advance()
    m.advance(steps=2)  # a re-read: one call beyond the script's
    assert m.status().startswith("call 3 of 3,")
    assert m.status().endswith(", finishing")  # not "about 0:00 left" while it goes on
    assert m.left() == 0


def test_into_a_log_plain_lines_follow_the_count_without_escape_codes() -> None:
    log = io.StringIO()
    with shown(Meter("  drop-oldest", 5, processed="tokens processed"), log, every=0.01) as m:
        _wait_for(log, r"call 0 of 5")
        m.advance(700, steps=2)
        text = _wait_for(log, r"call 2 of 5, 700 tokens processed")
    lines = text.splitlines()
    assert all(line.startswith("  drop-oldest: call ") for line in lines)
    assert "\x1b" not in text
    after = log.getvalue()
    time.sleep(0.05)
    assert log.getvalue() == after  # the lines stop with the run


def test_plain_lines_come_at_least_every_5_s_by_default() -> None:
    assert progress.PLAIN_EVERY == 5.0  # the "at least every 5 s"


def test_on_a_terminal_a_bar_shows_the_same_figures_and_goes_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm")
    tty = _Terminal()
    with shown(Meter("indexing", 10, noun="file"), tty) as m:
        m.advance()
        m.advance(steps=3)
        _wait_for(tty, r"indexing .*file 4 of 10, .* so far, about \d+:\d\d left")
    assert "\x1b" in tty.getvalue()  # drawn in place, then cleared (transient)


def test_a_dumb_terminal_gets_the_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")  # cannot redraw a line: a bar would show nothing
    tty = _Terminal()
    with shown(Meter("sakur4", 3), tty, every=0.01) as m:
        m.advance(10)
        text = _wait_for(tty, r"sakur4: call 1 of 3, ")
    assert "\x1b" not in text
