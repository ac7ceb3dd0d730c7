"""LlamaServer: starts on loopback with a free port, waits on /health, stops by its pid,
and leaves nothing running when start-up fails or is interrupted."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.backends.launcher import LlamaServer, ServerFlags, find_llama_server
from sakur4.errors import BackendUnavailable, SettingsError
from sakur4.settings import Settings


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def binary_and_model(request: pytest.FixtureRequest) -> tuple[Path, Path]:
    return locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )


def test_flags_become_arguments() -> None:
    flags = ServerFlags(
        ctx=4096, swa_full=True, checkpoint_min_step=256, slot_save_path=Path("/s"), verbosity=4
    )
    args = flags.args()
    assert args[:6] == ["-c", "4096", "-np", "1", "-t", "2"]
    for expected in (["--swa-full"], ["-cms", "256"], ["--slot-save-path", "/s"], ["-lv", "4"]):
        i = args.index(expected[0])
        assert args[i : i + len(expected)] == expected
    assert "--metrics" in args
    assert flags.rules().n_swa == 0  # --swa-full: exact prefixes, no checkpoints
    assert ServerFlags(checkpoint_min_step=256).rules().min_step == 256


@pytest.mark.backend
def test_start_health_stop(binary_and_model: tuple[Path, Path]) -> None:
    server = LlamaServer(*binary_and_model)
    with server:
        pid, port = server.pid, server.port
        assert pid is not None
        assert port is not None
        assert server.url == f"http://127.0.0.1:{port}"
        assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
        log = server.log_path
        assert log is not None
        assert log.exists()
        leaving = time.monotonic()
    # SIGTERM did it, well inside the 10 s grace before the SIGKILL fallback.
    assert time.monotonic() - leaving < 5
    assert gone(pid)
    assert port_free(port)
    assert not server.running
    assert not log.exists()  # its own temporary log is cleaned up


@pytest.mark.backend
def test_a_server_that_cannot_start_leaves_nothing_behind(
    binary_and_model: tuple[Path, Path], tmp_path: Path
) -> None:
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGUF but not really")
    server = LlamaServer(binary_and_model[0], bad)
    with pytest.raises(BackendUnavailable, match=r"exited with code \d+ during start-up") as e:
        server.start()
    assert server.url in str(e.value)
    assert not server.running
    assert server.pid is None


@pytest.mark.backend
@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_while_waiting_stops_the_server(binary_and_model: tuple[Path, Path]) -> None:
    # The interrupt lands while the health check runs; its HTTP stack imported lazily
    # there, a KeyboardInterrupt mid-import left a .pyc open (a ResourceWarning, an
    # error under -W error). Import it first so the test sees only what it tests.
    importlib.import_module("h11")
    server = LlamaServer(*binary_and_model)
    started: list[int] = []

    def interrupt_once_running() -> None:
        for _ in range(1000):
            if server.pid is not None:
                started.append(server.pid)
                os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does
                return
            threading.Event().wait(0.01)

    threading.Thread(target=interrupt_once_running, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert started
    assert gone(started[0])
    assert not server.running


@pytest.mark.backend
def test_a_killed_parent_takes_the_server_with_it(binary_and_model: tuple[Path, Path]) -> None:
    binary, model = binary_and_model
    script = (
        "import time\n"
        "from pathlib import Path\n"
        "from sakur4.backends.launcher import LlamaServer\n"
        f"s = LlamaServer(Path({str(binary)!r}), Path({str(model)!r}), die_with_parent=True)\n"
        "print(s.start().pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None
        pid = int(p.stdout.readline())
        p.kill()  # SIGKILL: no atexit, no finally, nothing of ours runs
    try:
        deadline = time.monotonic() + 10
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(pid)
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)  # the server this test started


def test_missing_binary_is_a_clear_settings_error(tmp_path: Path) -> None:
    s = Settings.load(cache_dir=tmp_path)
    with pytest.raises(SettingsError, match=r"no llama-server built under .*scripts/setup"):
        find_llama_server(s)


def test_missing_backend_skips_or_fails_when_required(tmp_path: Path) -> None:
    s = Settings.load(cache_dir=tmp_path)
    outcomes = []
    for require in (False, True):
        try:
            locate_backend(s, require=require)
        except BaseException as e:  # skip and fail are BaseExceptions: catch both alike
            outcomes.append((type(e), str(e)))
    (skipped, why_skip), (failed, why_fail) = outcomes
    assert skipped is pytest.skip.Exception
    assert "real llama-server unavailable" in why_skip
    assert failed is pytest.fail.Exception
    assert "--require-backend" in why_fail
