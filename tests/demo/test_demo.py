"""`sakur4 demo` against the real llama-server: the README's first command.

Small (the published script's 4 turns on a 1,024-token window) so it takes
seconds, not minutes; it still crosses the trigger, so Sakur4's receipts show a
management event.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.backends.launcher import LlamaServer
from sakur4.demo.compare import Strategy, run_strategy, swa_full
from sakur4.demo.run import SUMMARY_TOKENS, run_demo
from sakur4.demo.script import PRESETS, generate
from sakur4.settings import Settings

SMALL = ["--size", "small", "--turns", "4", "--window", "1024"]
# The default's two and OpenCode's prune-then-compact, which generates summaries.
PEERS = "drop-oldest,mask-lag1,opencode"
PID = re.compile(r"llama-server pid (\d+)")
DASHBOARD = re.compile(
    r"dashboard[^:]*: (http://127\.0\.0\.1:\d+/sakur4/projects/\d+/sessions/\S+)"
)


def _backend(request: pytest.FixtureRequest) -> tuple[Path, Path]:
    return locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )


def _env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    binary, model = _backend(request)
    return {
        **os.environ,
        "SAKUR4_LLAMA_SERVER": str(binary),
        "SAKUR4_MODEL": str(model),
        "SAKUR4_STORE": str(tmp_path / "store" / "sakur4.db"),
    }


def _wait_gone(pids: list[int], seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists()]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


@contextlib.contextmanager
def _demo(
    request: pytest.FixtureRequest, tmp_path: Path, *args: str, until: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`sakur4 demo ARGS` running, and what it said on stderr up to the line starting
    with ``until``; killed at the end if it is still running, its pipes closed."""
    with subprocess.Popen(
        [sys.executable, "-m", "sakur4", "demo", *args],
        env=_env(request, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stderr is not None
            seen = []
            for line in proc.stderr:
                seen.append(line)
                if line.startswith(until):
                    break
            yield proc, "".join(seen)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.backend
def test_demo_replays_a_session_and_compares(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "sakur4", "demo", *SMALL, "--out", str(out), "--compare", PEERS],
        env=_env(request, tmp_path),
        capture_output=True,
        text=True,
        timeout=1800,  # four servers; OpenCode compacts with no cache (minutes under load)
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "\x1b" not in done.stderr  # not a terminal: the progress is plain lines
    pids = [int(p) for p in PID.findall(done.stderr)]
    # Sakur4's server, drop-oldest's, rolling masking's, OpenCode's policy's.
    assert len(pids) == 4, done.stderr
    assert _wait_gone(pids) == []
    # The mainstream setup by default: full attention, any prefix resumes.
    assert done.stderr.count("--swa-full (any prefix)") == 4, done.stderr
    receipts, _, totals = done.stdout.partition("Side by side")
    assert "verdict" in receipts
    assert "reused of prompt" in receipts
    # The script crosses the trigger: at least one receipt records a step.
    assert re.search(r"\b(stepping|reclaimed)\b", receipts), receipts
    rows = {line.split("  ")[0].strip() for line in totals.splitlines()[1:] if line.strip()}
    assert any(r.startswith("baseline") for r in rows), totals
    assert any(r.startswith("sakur4") for r in rows), totals
    assert "drop-oldest" in rows, totals
    assert "mask-lag1" in rows, totals
    assert "opencode" in rows, totals
    assert (out / "demo.md").read_text().count("| drop-oldest |") == 1
    # OpenCode compacted: the table shows its summaries and says they were capped.
    assert "summary tokens" in totals
    assert f"capped at {SUMMARY_TOKENS} generated tokens" in totals
    assert f"capped at {SUMMARY_TOKENS} generated tokens" in (out / "demo.md").read_text()
    # The dashboard's address was printed while Sakur4's gateway ran.
    assert DASHBOARD.search(done.stderr), done.stderr


@pytest.mark.backend
@pytest.mark.usefixtures("ctrl_c_raises")
def test_open_keeps_the_dashboard_up_until_ctrl_c(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Sakur4's run alone, two turns: enough receipts to show; on the ring (the flag kept).
    args = (*SMALL, "--turns", "2", "--compare", "", "--ring", "--open")
    with _demo(request, tmp_path, *args, until="dashboard kept up") as (proc, seen):
        assert "checkpoint ring (-cms 256)" in seen, seen
        printed = DASHBOARD.findall(seen)
        assert len(printed) == 2, seen  # during the run, and kept up after
        assert printed[0] == printed[1]  # the same address
        assert _wait_gone([int(p) for p in PID.findall(seen)]) == []  # servers gone
        page = httpx.get(printed[1], timeout=30)
        assert page.status_code == 200, page.text
        api = httpx.get(printed[1].replace("/sakur4/", "/sakur4/api/", 1), timeout=30).json()
        assert page.text.count('class="point"') == len(api["turns"]) > 0
        workdir = Path(api["project"]["root"]).parent
        assert workdir.is_dir()
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert "dashboard stopped" in rest
    assert "Traceback" not in rest
    assert not workdir.exists()  # the kept store goes with the dashboard


@pytest.mark.backend
@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_stops_the_server_without_a_traceback(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    # Wait until the server runs and the replay started.
    with _demo(request, tmp_path, *SMALL, "--out", out, until="replaying") as (proc, seen):
        pids = [int(p) for p in PID.findall(seen)]
        assert pids, seen
        proc.send_signal(signal.SIGINT)  # what a Ctrl-C in the terminal sends it
        # The gateway finishes the call in flight first (up to its 30 s join).
        _, rest = proc.communicate(timeout=180)
    assert proc.returncode == 130, rest
    assert "Traceback" not in rest
    assert _wait_gone(pids) == []


@pytest.mark.backend
@pytest.mark.parametrize("swa_full", [False, True])
def test_an_error_during_the_demo_stops_the_server(
    request: pytest.FixtureRequest, tmp_path: Path, swa_full: bool
) -> None:
    binary, model = _backend(request)
    s = Settings.load(llama_server=binary, model=model, store=tmp_path / "sakur4.db")
    started: list[LlamaServer] = []

    def fail(server: LlamaServer) -> None:
        started.append(server)
        assert server.running
        # --swa-full (the default) asks for the server that reuses any prefix; --ring,
        # the checkpoint ring.
        assert server.flags.swa_full is swa_full
        assert server.flags.checkpoint_min_step == (None if swa_full else 256)
        raise RuntimeError("injected")

    with pytest.raises(RuntimeError, match="injected"):
        asyncio.run(
            run_demo(
                s,
                params=replace(PRESETS["small"], turns=2, window=1024),
                cms=256,
                echo=lambda _: None,
                swa_full=swa_full,
                on_server=fail,
            )
        )
    assert len(started) == 1
    assert not started[0].running
    assert started[0].pid is None  # stopped and forgotten: the process was reaped


@pytest.mark.backend
@pytest.mark.parametrize("kind", ["sakur4", "summarise"])
def test_the_progress_is_told_every_call_and_every_token_processed(
    llama_swa_full: LlamaServer, tmp_path: Path, kind: str
) -> None:
    """What the demo's and the bench's meters count: one step per call of the replay,
    and the server's processed tokens, a summary's before its call included."""
    session = generate(replace(PRESETS["small"], turns=3, window=1024))
    told: list[int] = []
    run = asyncio.run(
        run_strategy(
            Strategy(kind, kind),
            llama_swa_full.url,
            session,
            settings=Settings.load(store=tmp_path / "sakur4.db"),
            mode=swa_full(1024),
            summary_tokens=16,
            workdir=tmp_path,
            on_call=told.append,
        )
    )
    assert len(told) == len(run.records) > 3
    assert sum(told) == run.processed > 0
    if kind == "summarise":
        assert run.summaries  # the 1,024 window was crossed: their tokens are counted
