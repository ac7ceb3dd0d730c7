"""Which window to tell a harness: its own compaction, or Sakur4's folds (issue 30).

Claude Code and OpenCode each run one fixed non-interactive session through
``sakur4 wrap`` and a Sakur4 gateway in front of the real llama-server (``-c 8192
--swa-full``, the packaged Gemma 3 270M, as tests/wrap does), twice:

- ``real``: told the server's window (8,192), so the harness compacts by itself;
- ``large``: told 1,000,000 (wrap's default), so only the gateway keeps the prompt
  inside the window.

The session: turn 1 gives a correction to keep for the whole session and reads
README.md; turns 2-4 each read one ~2,000-token file (Claude Code: an ``@path``
mention; OpenCode: ``run -f path``), so the context crosses the window by turn 4;
turn 5 asks for the correction back. Each turn is one harness process (``claude
-p … --continue``, ``opencode run -c …``) reusing the gateway, as a user's session
would.

Reported per harness and window, side by side: tokens the server processed (the
receipts' ``server_processed``, the whole prompt where unverifiable), wall time,
turns failed (the harness exited non-zero for anything but an answer cut at the
output cap, or a request was refused or failed), whether the correction is in the
last prompt the server received, and how many of the files reached the server on
their turn. The figures go to stdout and to ``--out`` as JSON.

    python bench/harness_window.py --out /tmp/harness-window.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from sakur4.backends.launcher import (
    LlamaServer,
    ServerFlags,
    ensure_model,
    find_llama_server,
    free_port,
)
from sakur4.demo.via_gateway import running_gateway
from sakur4.receipts import list_receipts, reprefilled_tokens
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

ROOT = Path(__file__).resolve().parent.parent
CLAUDE_BIN = ROOT / "tests/gateway/claude_code/node_modules/@anthropic-ai/claude-code-linux-x64"
OPENCODE_BIN = ROOT / "tests/wrap/opencode/node_modules/opencode-linux-x64/bin"
SERVER_WINDOW = 8192
LARGE_WINDOW = 1_000_000
OUTPUT_CAP = 8
FILE_TURNS = 3
TURN_LIMIT = 600.0  # seconds one harness process may take
QUESTION = "What did I ask you to keep for the whole session? One line."
CORRECTION = "Correction, keep for the whole session: run the tests with pytest -x, never make."
CHAT_PATHS = ("/v1/chat/completions", "/v1/messages")


class Recorder(httpx.AsyncBaseTransport):
    """Passes every request to the real server; keeps the chat bodies sent, in order."""

    def __init__(self) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.sent: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path in CHAT_PATHS:
            self.sent.append(request.content.decode("utf-8", "replace"))
        return await self.real.handle_async_request(request)

    async def aclose(self) -> None:
        await self.real.aclose()


def module_text(i: int) -> str:
    """A ~2,000-token Python file with a marker the check looks for."""
    lines = [f'"""module_{i}: MARKER_{i}_{i * 7919 % 1000} reconciles ledger batches."""', ""]
    for f in range(21):
        lines += [
            f"def handler_{i}_{f}(rows, limit={f + 3}):",
            f'    """Sum the rows of batch {f} above the limit; skip the flagged ones."""',
            "    total = 0",
            "    for row in rows:",
            f"        if row.flag_{f} or row.value < limit:",
            "            continue",
            f"        total += row.value * {f + i + 2}",
            "    return total",
            "",
        ]
    return "\n".join(lines)


def marker(i: int) -> str:
    return f"MARKER_{i}_{i * 7919 % 1000}"


def make_project(root: Path) -> None:
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text(
        "# ledger\n\nReconciles ledger batches. Modules in src/, tests with pytest.\n"
    )
    for i in range(1, FILE_TURNS + 1):
        (root / "src" / f"module_{i}.py").write_text(module_text(i))


def prompts(short: bool) -> list[tuple[str, tuple[str, ...]]]:
    """(prompt, files read) per turn. ``short``: README.md and one file in turn 1, a
    second file in turn 2, the question in turn 3 (Claude Code's turns take minutes
    each on a loaded machine). Each turn's own message must fit the window: a message
    holding everything (tried first) is refused by every strategy alike."""
    if short:
        paths = ("README.md", "src/module_1.py")
        ask = f"{CORRECTION}\n\nRead {' and '.join(paths)} and say in one line what each is."
        second = "src/module_2.py"
        again = (f"Read {second} and say in one line what it does.", (second,))
        return [(ask, paths), again, (QUESTION, ())]
    out = [
        (f"{CORRECTION}\n\nRead README.md and say in one line what the project is.", ("README.md",))
    ]
    for i in range(1, FILE_TURNS + 1):
        path = f"src/module_{i}.py"
        out.append((f"Read {path} and say in one line what it does.", (path,)))
    out.append((QUESTION, ()))
    return out


def argv(harness: str, turn: int, prompt: str, paths: tuple[str, ...]) -> list[str]:
    if harness == "claude":
        for path in paths:
            prompt = prompt.replace(path, f"@{path}")
        extra = ["--continue"] if turn > 1 else []
        # --max-turns 2: one answer and one follow-up (a resume after the output cap
        # or a tool call) per turn; the 270M model would otherwise loop for minutes.
        return ["-p", prompt, *extra, "--max-turns", "2", "--output-format", "json"]
    extra = ["-c"] if turn > 1 else []
    files = [a for path in paths for a in ("-f", path)]
    return ["run", *extra, *files, "--", prompt]


def env_for(home: Path, store: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join([str(CLAUDE_BIN), str(OPENCODE_BIN), os.environ.get("PATH", "")])
    keep = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
    return keep | {
        "PATH": path,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local/state"),
        "SAKUR4_STORE": str(store),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
    }


def turn_failed(harness: str, code: int, stdout: str, stderr: str) -> str | None:
    """Why the turn failed, or None. Claude Code exits 1 for an answer cut at the output
    cap and for reaching --max-turns: answered, not failed; a request the API refused
    (an error status, a prompt too long, a failed compaction) is a failure."""
    if harness == "claude":
        lines = stdout.strip().splitlines()
        try:
            result = json.loads(lines[-1]) if lines else {}
        except ValueError:
            result = {}
        text = str(result.get("result", "")) + " " + str(result.get("errors", ""))
        bad = ("Prompt is too long", "compaction failed", "API Error")
        if "output token maximum" in text:
            return None  # an answer cut at the cap: answered (it says "API Error" too)
        if result.get("api_error_status") is not None or any(b in text for b in bad):
            return text.strip()[:200]
        if not result:
            return f"exit {code}, no result: {(stdout + stderr).strip()[-200:]}"
        return None
    if code == 0:
        return None
    return f"exit {code}: {(stdout + stderr).strip()[-200:]}"


@dataclass
class Run:
    harness: str
    told: int
    turns: int = 0
    failed: list[str] = field(default_factory=list)
    requests: int = 0
    processed: int = 0
    refused: int = 0
    failed_requests: int = 0
    seconds: float = 0.0
    correction_kept: bool = False
    files_seen: int = 0
    files: int = 0
    outputs: list[str] = field(default_factory=list)


def run_one(
    harness: str, told: int, server: LlamaServer, work: Path, short: bool, turn_limit: float
) -> Run:
    home, store, project = work / "home", work / "store.db", work / "project"
    make_project(project)
    env = env_for(home, store)
    settings = Settings.load(
        store=store, project=project, backend=server.url, gateway_port=free_port()
    )
    recorder = Recorder()
    result = Run(harness, told)
    with running_gateway(settings, backend_transport=recorder) as gw:
        port = gw.url.rsplit(":", 1)[1]
        started = time.monotonic()
        for turn, (prompt, paths) in enumerate(prompts(short), 1):
            before = len(recorder.sent)
            cmd = [sys.executable, "-m", "sakur4", "wrap", "--port", port, "--no-mcp"]
            cmd += ["--window", str(told), "--max-output", str(OUTPUT_CAP), harness, "--"]
            cmd += argv(harness, turn, prompt, paths)
            t0 = time.monotonic()
            try:
                done = subprocess.run(
                    cmd,
                    cwd=project,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=turn_limit,
                    stdin=subprocess.DEVNULL,
                    check=False,
                )
                why = turn_failed(harness, done.returncode, done.stdout, done.stderr)
                result.outputs.append(done.stdout[-600:])
            except subprocess.TimeoutExpired:
                why = f"no answer in {turn_limit:g} s"
            sent = recorder.sent[before:]
            modules = [int(p.split("_")[1].split(".")[0]) for p in paths if "module_" in p]
            seen = sum(1 for i in modules if any(marker(i) in body for body in sent))
            result.files_seen += seen
            result.files += len(modules)
            result.turns += 1
            print(
                f"  {harness} told {told:,} turn {turn}: {time.monotonic() - t0:5.1f} s, "
                f"{len(sent)} requests, files seen {seen} of {len(modules)}, "
                f"{'FAILED ' + why if why else 'ok'}",
                flush=True,
            )
            if why:
                result.failed.append(f"turn {turn}: {why}")
        result.seconds = round(time.monotonic() - started, 1)
    result.requests = len(recorder.sent)
    result.correction_kept = bool(recorder.sent) and CORRECTION in recorder.sent[-1]
    s = open_store(store)
    try:
        got = list_receipts(s, ensure_project(s, project).id, limit=10_000)
    finally:
        s.close()
    result.processed = sum(reprefilled_tokens(r) for r in got if r.verdict != "refused")
    result.refused = sum(1 for r in got if r.verdict == "refused")
    result.failed_requests = sum(1 for r in got if r.failed)
    return result


@contextlib.contextmanager
def llama(work: Path) -> Iterator[LlamaServer]:
    settings = Settings.load()
    flags = ServerFlags(ctx=SERVER_WINDOW, swa_full=True, slot_save_path=work / "slots")
    (work / "slots").mkdir()
    binary, model = find_llama_server(settings), ensure_model(settings)
    with LlamaServer(binary, model, flags, log_path=work / "server.log", die_with_parent=True) as s:
        yield s


def table(runs: list[Run]) -> str:
    head = "| harness | told | processed | wall s | turns failed | correction kept | files seen "
    rows = [head + "| requests |", "|" + " --- |" * 8]
    for r in runs:
        rows.append(
            f"| {r.harness} | {r.told:,} | {r.processed:,} | {r.seconds:.0f} | "
            f"{len(r.failed)} of {r.turns} | {'yes' if r.correction_kept else 'no'} | "
            f"{r.files_seen} of {r.files} | {r.requests} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--harness", choices=("claude", "opencode"), action="append")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--short", action="store_true", help="three turns (see prompts())")
    ap.add_argument("--turn-limit", type=float, default=TURN_LIMIT)
    args = ap.parse_args()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="harness-window-") as tmp:
        work = Path(tmp)
        with llama(work) as server:
            for harness in args.harness or ["claude", "opencode"]:
                for told in (SERVER_WINDOW, LARGE_WINDOW):
                    print(f"{harness}, told {told:,}", flush=True)
                    where = work / f"{harness}-{told}"
                    runs.append(run_one(harness, told, server, where, args.short, args.turn_limit))
                    if args.out:
                        args.out.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    print(table(runs))
    for r in runs:
        for f in r.failed:
            print(f"  {r.harness} told {r.told:,}: {f}")


if __name__ == "__main__":
    main()
