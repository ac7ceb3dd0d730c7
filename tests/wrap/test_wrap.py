"""``sakur4 wrap`` end to end, as a user runs it: a separate process in front of the real
llama-server, with the real Claude Code, OpenCode and aider (non-interactive runs),
and an OpenAI-compatible script on the real ``openai`` SDK.

Each run is checked for the plumbing, not the answers (Gemma 3 270M's are junk): the
requests reached the gateway (receipts in the store), the exit code passed through,
the MCP server was registered where the harness takes one, and nothing the run started
is left running (no process that names the test's directory, the gateway's port free).
The output cap is kept small so each run takes seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from sakur4.backends.launcher import LlamaServer, free_port
from sakur4.demo.via_gateway import running_gateway
from sakur4.errors import BackendUnavailable, SettingsError
from sakur4.harnesses.find import find_backend
from sakur4.receipts import Receipt, list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project
from sakur4.wrap.leases import Leases
from wrapped import INSTALL, leftovers, run_wrap, wrap_env

# One chat call on the openai SDK, told where to go only by wrap's variables; exits 3.
SCRIPT = """
import os, sys
from openai import OpenAI
with OpenAI() as client:
    answer = client.chat.completions.create(
        model=os.environ["OPENAI_MODEL"],
        messages=[{"role": "user", "content": "Say hi"}],
        max_tokens=8,
    )
print("answered:", answer.choices[0].finish_reason, flush=True)
sys.exit(3)
"""


def installed(name: str) -> Path:
    where, how = INSTALL[name]
    if not where.is_dir():
        pytest.skip(f"{name} not installed: {how}")
    return where


def receipts(store: Path, project: Path) -> list[Receipt]:
    s = open_store(store)
    try:
        return list_receipts(s, ensure_project(s, project).id, limit=1000)
    finally:
        s.close()


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def stopped_cleanly(tmp_path: Path, port: int) -> None:
    assert leftovers(str(tmp_path)) == []
    assert port_free(port), f"the gateway still listens on {port}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# demo\n\nA project for the wrap test.\n")
    return root


@pytest.mark.backend
def test_wrap_claude_print_mode(llama_swa_full: LlamaServer, project: Path, tmp_path: Path) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db", installed("claude"))
    port = free_port()
    done = run_wrap(
        project,
        env,
        *("--backend", llama_swa_full.url, "--port", str(port), "--max-output", "8"),
        *("claude", "--", "-p", "Say hi", "--output-format", "stream-json", "--verbose"),
    )
    events = [e for e in map(_json, done.stdout.splitlines()) if e is not None]
    assert events, done.stderr[-2000:] + done.stdout[-1000:]
    init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
    # sakur4 serve registered through --mcp-config, and Claude Code connected to it.
    servers = {s["name"]: s["status"] for s in init["mcp_servers"]}
    assert servers.get("sakur4") == "connected", init["mcp_servers"]
    result = events[-1]
    assert result["type"] == "result", result
    # Claude Code's own verdict is wrap's exit code. The 270M model rarely stops within
    # a small cap, and Claude Code calls an answer cut at the cap an error (after asking
    # it to resume): that is the only error allowed here, never a failed request.
    assert done.returncode == (1 if result["is_error"] else 0), done.stderr[-2000:]
    if result["is_error"]:
        assert "output token maximum" in str(result["result"]), result
    assert result.get("api_error_status") is None, result
    # Told a window, Claude Code no longer guesses one for an unknown model.
    assert "doesn't recognize the model" not in done.stderr + done.stdout
    got = receipts(tmp_path / "store.db", project)
    assert got
    assert all(r.detail["upstream"] == "messages" for r in got)
    assert not any(r.detail.get("failed") for r in got)
    stopped_cleanly(tmp_path, port)


@pytest.mark.backend
def test_wrap_opencode_run(llama_swa_full: LlamaServer, project: Path, tmp_path: Path) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db", installed("opencode"))
    port = free_port()
    common = ("--backend", llama_swa_full.url, "--port", str(port), "--max-output", "16")
    listed = run_wrap(project, env, *common, "opencode", "--", "mcp", "list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "sakur4" in listed.stdout + listed.stderr
    assert "connected" in (listed.stdout + listed.stderr).lower()
    done = run_wrap(project, env, *common, "opencode", "--", "run", "Say hi")
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-1000:]
    assert "window told 1,000,000: measured" in done.stderr  # the choice, and why
    got = receipts(tmp_path / "store.db", project)
    assert got
    assert all("upstream" not in r.detail for r in got)  # Chat Completions, not Messages
    assert not any(r.detail.get("failed") for r in got)
    stopped_cleanly(tmp_path, port)


@pytest.mark.backend
def test_wrap_aider_message(llama_swa_full: LlamaServer, project: Path, tmp_path: Path) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db", installed("aider"))
    port = free_port()
    done = run_wrap(
        project,
        env,
        *("--backend", llama_swa_full.url, "--port", str(port), "--max-output", "16"),
        *("aider", "--", "--message", "Say hi", "--no-git", "--yes-always", "--no-pretty"),
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-1000:]
    # With the metadata file aider knows the window (without it: "of 0").
    assert "of 0 -- possibly exhausted" not in done.stdout
    got = receipts(tmp_path / "store.db", project)
    assert got
    assert not any(r.detail.get("failed") for r in got)
    stopped_cleanly(tmp_path, port)


@pytest.mark.backend
def test_wrap_an_openai_command_passes_its_exit_code(
    llama_swa_full: LlamaServer, project: Path, tmp_path: Path
) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db")
    port = free_port()
    done = run_wrap(
        project,
        env,
        *("--backend", llama_swa_full.url, "--port", str(port), "--openai"),
        *("--", sys.executable, "-c", SCRIPT),
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert "answered:" in done.stdout
    assert len(receipts(tmp_path / "store.db", project)) == 1
    stopped_cleanly(tmp_path, port)


@pytest.mark.backend
def test_sigterm_reaches_the_harness_and_stops_the_gateway(
    llama_swa_full: LlamaServer, project: Path, tmp_path: Path
) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db")
    port = free_port()
    waiting = "import time; print('ready', flush=True); time.sleep(120)"
    wrap = subprocess.Popen(
        [
            *(sys.executable, "-m", "sakur4", "wrap", "--backend", llama_swa_full.url),
            *("--port", str(port), "--openai", "--", sys.executable, "-c", waiting),
        ],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wrap.stdout is not None
        assert wrap.stdout.readline().strip() == "ready"
        started = time.monotonic()
        wrap.send_signal(signal.SIGTERM)
        code = wrap.wait(timeout=60)
    finally:
        if wrap.poll() is None:
            wrap.kill()
        wrap.communicate()
    assert code == 128 + signal.SIGTERM  # the harness ended by the forwarded signal
    assert time.monotonic() - started < 30
    stopped_cleanly(tmp_path, port)


@pytest.mark.backend
def test_a_running_sakur4_gateway_is_reused_and_left_running(
    llama_swa_full: LlamaServer, project: Path, tmp_path: Path
) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db")
    settings = Settings.load(
        store=tmp_path / "store.db",
        project=project,
        backend=llama_swa_full.url,
        gateway_port=free_port(),
    )
    with running_gateway(settings) as gateway:
        port = str(settings.gateway_port)
        done = run_wrap(
            project, env, "--port", port, "--openai", "--", sys.executable, "-c", SCRIPT
        )
        assert done.returncode == 3, done.stderr[-2000:]
        assert f"using the gateway already running at {gateway.url}" in done.stderr
        assert "not started by a wrap: it keeps running" in done.stderr
        assert httpx.get(f"{gateway.url}/health", timeout=30).status_code == 200
        assert len(receipts(tmp_path / "store.db", project)) == 1
        # Another backend than the running gateway's is refused, not silently ignored.
        other = run_wrap(project, env, "--port", port, "--backend", "http://127.0.0.1:1", "claude")
        assert other.returncode == 1
        assert "--port another" in other.stderr


@pytest.mark.backend
def test_a_port_held_by_another_server_is_refused(
    llama_swa_full: LlamaServer, project: Path, tmp_path: Path
) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db")
    port = llama_swa_full.url.rsplit(":", 1)[1]
    done = run_wrap(project, env, "--port", port, "--openai", "--", "true")
    assert done.returncode == 1
    assert "not a Sakur4 gateway" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.backend
def test_the_server_is_found_on_the_usual_ports(llama_swa_full: LlamaServer) -> None:
    nobody = free_port()
    llama_port = int(llama_swa_full.url.rsplit(":", 1)[1])
    found = asyncio.run(find_backend(None, ports=(nobody, llama_port)))
    assert found.url == llama_swa_full.url
    assert found.identity.kind == "llama.cpp"
    with pytest.raises(SettingsError, match=f"ports {nobody}: start llama-server"):
        asyncio.run(find_backend(None, ports=(nobody,)))


# wrap A's harness: ready, then waits for the test's word to exit.
FIRST = """
import os, pathlib, sys, time
print("ready", flush=True)
flag = pathlib.Path(os.environ["WRAP_TEST_DIR"]) / "a-may-exit"
while not flag.exists():
    time.sleep(0.1)
"""

# wrap B's harness: one answer, then a streamed one it is reading when wrap A exits, then
# one more after; each must be served. Exits 3 with the count.
SECOND = """
import os, pathlib, sys, time
from openai import OpenAI
where = pathlib.Path(os.environ["WRAP_TEST_DIR"])
model = os.environ["OPENAI_MODEL"]
def ask(text, **kw):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=48, **kw
    )
def wait_for(name):
    while not (where / name).exists():
        time.sleep(0.1)
with OpenAI(max_retries=0) as client:
    served = 0
    ask("Say hi")
    served += 1
    stream = ask("Count from one to twenty in words.", stream=True)
    (where / "b-streaming").touch()
    wait_for("a-gone")
    for chunk in stream:
        pass
    served += 1
    ask("Say bye")
    served += 1
print("served", served, flush=True)
sys.exit(3)
"""


def _wrap_process(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sakur4", "wrap", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, process: subprocess.Popen[str], limit: float = 600) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no {path.name} in {limit:g} s"
        time.sleep(0.1)


@pytest.mark.backend
def test_two_wraps_share_a_gateway_and_the_last_out_stops_it(
    llama_swa_full: LlamaServer, project: Path, tmp_path: Path
) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db") | {"WRAP_TEST_DIR": str(tmp_path)}
    port = free_port()
    common = ("--backend", llama_swa_full.url, "--port", str(port), "--openai", "--")
    first = _wrap_process(project, env, *common, sys.executable, "-c", FIRST)
    second: subprocess.Popen[str] | None = None
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == "ready", first.communicate()
        second = _wrap_process(project, env, *common, sys.executable, "-c", SECOND)
        _wait_for(tmp_path / "b-streaming", second)
        (tmp_path / "a-may-exit").touch()
        _, err_a = first.communicate(timeout=120)
        assert first.returncode == 0, err_a
        # The first wrap out leaves the gateway to the second, and says so.
        assert f"stays up for wrap pid {second.pid}" in err_a
        assert not port_free(port)
        (tmp_path / "a-gone").touch()
        out_b, err_b = second.communicate(timeout=600)
    finally:
        # A failed check leaves the harnesses waiting (in their own process groups, a
        # killed wrap's harness runs on): let them end before the pipes are read.
        (tmp_path / "a-may-exit").touch()
        (tmp_path / "a-gone").touch()
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
    assert f"using the gateway already running at http://127.0.0.1:{port}" in err_b
    assert f"started by wrap pid {first.pid}" in err_b
    assert second.returncode == 3, err_b[-2000:]
    assert "served 3" in out_b
    assert "gone away" not in err_b
    got = receipts(tmp_path / "store.db", project)
    assert len(got) == 3
    assert not any(r.detail.get("failed") for r in got)
    stopped_cleanly(tmp_path, port)  # the last wrap out stopped the gateway


@pytest.mark.backend
def test_a_killed_wrap_s_gateway_stops_and_a_wrap_says_when_its_gateway_goes_away(
    llama_swa_full: LlamaServer, project: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"  # the wraps' runtime directory: the leases are read there
    env = wrap_env(tmp_path / "home", tmp_path / "store.db")
    env |= {"WRAP_TEST_DIR": str(tmp_path), "XDG_RUNTIME_DIR": str(run_dir)}
    port = free_port()
    common = ("--backend", llama_swa_full.url, "--port", str(port), "--openai", "--")
    wraps = [_wrap_process(project, env, *common, sys.executable, "-c", FIRST) for _ in "ab"]
    try:
        for w in wraps:
            assert w.stdout is not None
            assert w.stdout.readline().strip() == "ready", w.communicate()
        # Both wraps killed outright give no lease back: the gateway, in its own session,
        # stops by itself once it sees no live lease.
        for w in wraps:
            w.kill()
            w.wait()  # not communicate(): its harness, still running, holds the pipes
        deadline = time.monotonic() + 60
        while not port_free(port):
            assert time.monotonic() < deadline, "the gateway outlived every wrap"
            time.sleep(0.5)
        (tmp_path / "a-may-exit").touch()  # their harnesses, in their own groups
        for w in wraps:
            w.communicate()
        stopped_cleanly(tmp_path, port)

        # A wrap whose gateway is killed under it says so, once.
        (tmp_path / "a-may-exit").unlink()
        said = tmp_path / "third.err"
        with said.open("w") as err:
            third = subprocess.Popen(
                [sys.executable, "-m", "sakur4", "wrap", *common, sys.executable, "-c", FIRST],
                cwd=project,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        wraps.append(third)
        assert third.stdout is not None
        assert third.stdout.readline().strip() == "ready", said.read_text()
        leases = Leases("127.0.0.1", port, root=run_dir / f"sakur4-{os.getuid()}")
        hosted = leases.hosted()
        assert hosted is not None
        assert hosted.wrap_pid == third.pid
        os.kill(hosted.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "has gone away" not in said.read_text():
            assert time.monotonic() < deadline, said.read_text()
            time.sleep(0.2)
        (tmp_path / "a-may-exit").touch()
        assert third.wait(timeout=60) == 0
        assert said.read_text().count("has gone away") == 1, said.read_text()
    finally:
        (tmp_path / "a-may-exit").touch()
        for w in wraps:
            if w.poll() is None:
                w.kill()
            w.wait()
            for pipe in (w.stdout, w.stderr):
                if pipe is not None:
                    pipe.close()
    stopped_cleanly(tmp_path, port)


# A harness with a child of its own: both must end when wrap is sent SIGINT.
# SIGINT restored in both: one started in the background by a shell inherits it ignored.
PARENT = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
sleeper = "import signal as s, time; s.signal(s.SIGINT, s.default_int_handler); time.sleep(300)"
child = subprocess.Popen([sys.executable, "-c", sleeper])
print("ready", child.pid, os.getpid(), flush=True)
time.sleep(300)
"""

# A harness that takes a SIGINT as "cancel the request" and runs on (as a harness may).
# Its handler writes with os.write: a print there could land inside the "ready" print
# the signal interrupted (RuntimeError: reentrant call), which failed this test in CI.
STUBBORN = """
import os, signal, time
signal.signal(signal.SIGINT, lambda *a: os.write(1, b"cancelled\\n"))
print("ready", os.getpid(), flush=True)
time.sleep(300)
time.sleep(300)
"""


@pytest.mark.backend
def test_kill_int_on_wrap_ends_the_harness_and_its_children(
    llama_swa_full: LlamaServer, project: Path, tmp_path: Path
) -> None:
    env = wrap_env(tmp_path / "home", tmp_path / "store.db")
    port = free_port()
    common = ("--backend", llama_swa_full.url, "--port", str(port), "--openai", "--")
    wrap = _wrap_process(project, env, *common, sys.executable, "-c", PARENT)
    harness = 0
    try:
        assert wrap.stdout is not None
        ready, grandchild, pid = wrap.stdout.readline().split()
        assert ready == "ready"
        harness = int(pid)
        wrap.send_signal(signal.SIGINT)
        code = wrap.wait(timeout=60)
    finally:
        _end(wrap, harness)
    assert code == 128 + signal.SIGINT
    assert not Path(f"/proc/{grandchild}").exists() or _zombie(grandchild)
    stopped_cleanly(tmp_path, port)

    # A harness that outlives the SIGINT gets SIGTERM after a grace, and wrap ends.
    wrap = _wrap_process(project, env, *common, sys.executable, "-c", STUBBORN)
    try:
        assert wrap.stdout is not None
        ready, pid = wrap.stdout.readline().split()
        assert ready == "ready"
        harness = int(pid)
        wrap.send_signal(signal.SIGINT)
        code = wrap.wait(timeout=120)
    finally:
        out = _end(wrap, harness)
    assert "cancelled" in out  # the SIGINT reached it first
    assert code == 128 + signal.SIGTERM
    stopped_cleanly(tmp_path, port)


def _end(wrap: subprocess.Popen[str], harness: int) -> str:
    """Whatever is left of a wrap and its harness's group ended (a failed check leaves
    them running); what the wrap printed."""
    if wrap.poll() is None:
        wrap.kill()
    if harness:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(harness, signal.SIGKILL)
    out, _ = wrap.communicate()
    return out


def _zombie(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# What llama-server answers on every route while it loads its model (seen on the real
# server started by hand, 2026-12-06).
LOADING = b'{"error":{"message":"Loading model","type":"unavailable_error","code":503}}'


class _LoadingFront(ThreadingHTTPServer):
    """A fake of a llama-server still loading: 503 ``Loading model`` until ``loaded`` is
    set, then the real server's answers (GET only: what identification asks)."""

    def __init__(self, real: str) -> None:
        self.real = real
        self.loaded = threading.Event()
        self.asked = 0
        super().__init__(("127.0.0.1", 0), _LoadingHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _LoadingHandler(BaseHTTPRequestHandler):
    server: _LoadingFront

    def do_GET(self) -> None:
        self.server.asked += 1
        if self.server.loaded.is_set():
            answer = httpx.get(self.server.real + self.path, timeout=30)
            status, body = answer.status_code, answer.content
        else:
            status, body = 503, LOADING
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.backend
def test_a_server_still_loading_is_waited_for_fake_loading_phase(
    llama_swa_full: LlamaServer,
) -> None:
    said: list[str] = []
    with _LoadingFront(llama_swa_full.url) as front:
        threading.Thread(target=front.serve_forever, daemon=True).start()
        try:
            # Still loading when the bound passes: a one-line error naming why.
            with pytest.raises(BackendUnavailable, match=r"still not ready after 2 s: .*Loading"):
                asyncio.run(find_backend(front.url, within=2, waiting=said.append))
            assert said == [f"waiting for the server at {front.url} to load (Loading model)…"]
            # Loaded while waited for: found, as on the usual ports.
            port = int(front.url.rsplit(":", 1)[1])
            threading.Timer(3.0, front.loaded.set).start()
            found = asyncio.run(find_backend(None, ports=(port,), waiting=said.append))
        finally:
            front.shutdown()
    assert found.url == front.url
    assert found.identity.kind == "llama.cpp"
    assert len(said) == 2


def _json(line: str) -> dict[str, object] | None:
    import json

    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
