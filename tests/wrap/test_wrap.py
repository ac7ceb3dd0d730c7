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
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sakur4.backends.launcher import LlamaServer, free_port
from sakur4.demo.via_gateway import running_gateway
from sakur4.errors import SettingsError
from sakur4.harnesses.find import find_backend
from sakur4.receipts import Receipt, list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project
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
        assert f"reusing the Sakur4 gateway at {gateway.url}" in done.stderr
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


def _json(line: str) -> dict[str, object] | None:
    import json

    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
