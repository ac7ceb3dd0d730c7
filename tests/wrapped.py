"""Where the set-up put the real harnesses, and how a test runs ``sakur4 wrap`` as a user
would: a separate process, its own home, nothing of the test's environment but PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fixtures_llama import REAL_SETTINGS
from tracebacks import traceback_in

TESTS = Path(__file__).resolve().parent
CLAUDE_DIR = TESTS / "gateway" / "claude_code" / "node_modules" / "@anthropic-ai"
CLAUDE_DIR = CLAUDE_DIR / "claude-code-linux-x64"
OPENCODE_DIR = TESTS / "wrap" / "opencode" / "node_modules" / "opencode-linux-x64" / "bin"
AIDER_VERSION = "0.86.2"  # as scripts/setup-tests installs it
CACHE = REAL_SETTINGS.cache_dir if REAL_SETTINGS else Path("/nonexistent")
AIDER_DIR = CACHE / "aider" / AIDER_VERSION / "bin"

INSTALL = {
    "claude": (CLAUDE_DIR, "npm ci --prefix tests/gateway/claude_code --ignore-scripts"),
    "opencode": (OPENCODE_DIR, "npm install --prefix tests/wrap/opencode --ignore-scripts"),
    "aider": (AIDER_DIR, "scripts/setup-tests (aider's own virtualenv in the cache)"),
}


def wrap_env(home: Path, store: Path, *harness_dirs: Path) -> dict[str, str]:
    """A user's environment: a fresh home, the store, the harnesses on PATH, nothing sent
    off the machine."""
    home.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join([*(str(d) for d in harness_dirs), os.environ.get("PATH", "")])
    # The tree under test, when it is not the installed one (a worktree's src first).
    python_path = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    return python_path | {
        "PATH": path,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "SAKUR4_STORE": str(store),
        # Claude Code: no telemetry, no update checks, its config under the home.
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # OpenCode: no update check.
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
    }


def run_wrap(
    cwd: Path, env: dict[str, str], *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``sakur4 wrap ARGS`` from this tree, to its end; the gateway it started logged no
    traceback (issue 41: checked for every gateway of the test suite)."""
    done = subprocess.run(
        [sys.executable, "-m", "sakur4", "wrap", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    log = Path(env["SAKUR4_STORE"]).parent / "wrap-gateway.log"  # where wrap puts it
    found = traceback_in(log.read_text(errors="replace")) if log.exists() else None
    assert found is None, f"the wrapped gateway logged a traceback ({log}):\n{found}"
    return done


def _mentions(pid: str, marker: str) -> bool:
    for part in ("cmdline", "environ"):
        try:
            raw = (Path("/proc") / pid / part).read_bytes()
        except OSError:
            continue
        if marker.encode() in raw:
            return True
    return False


def leftovers(marker: str, grace: float = 15.0) -> list[str]:
    """Processes still alive whose command line or environment names ``marker`` (a
    test's temporary directory), after up to ``grace`` seconds: an MCP server exits
    when its harness closes its stdin, a moment after the harness itself."""
    me = str(os.getpid())
    deadline = time.monotonic() + grace
    while True:
        alive = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and entry.name != me and _mentions(entry.name, marker):
                try:
                    alive.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
                except OSError:
                    continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)
