"""A harness's own compaction call through the gateway, at the length where the harness
compacts (issue 28's goal: ≤ 5 % of its prompt processed, where straight to the server
it processes all of it).

    nice -n 15 .venv/bin/python bench/compaction.py [--window N] [--output N] [--prompt N]

The real OpenCode (tests/wrap/opencode, 1.18.33) runs ``opencode run -f ledger_0.py -f
ledger_1.py -- "What do these files do?"`` through a real gateway in front of a real
llama-server (the packaged Gemma 3 with ``--swa-full``, ``-c 32768``: the server resumes
any prefix, as a full-attention model does; the gateway's window is that n_ctx, far over
the prompt, so the gateway folds nothing before the compaction). OpenCode is told a
window of ``--window`` with ``--output`` tokens an answer: it compacts when a reply's
input + output tokens reach window − output (anomalyco/opencode,
packages/opencode/src/session/overflow.ts ``usable``/``isOverflow``; no ``limit.input``
given). The attached files are sized so the first prompt is ``--prompt`` tokens, over
that line: OpenCode compacts once, after its first answer, and not again (its prompt
after the compaction is its system prompt, the summary and a line). The proxy below
caps each answer OpenCode asks for at ``--answer-cap`` tokens (its ``max_tokens``
lowered on the way; this server's ``-n`` does not override a request's): at ~13k tokens
of context this model writes ~3–4 tokens/s on two loaded cores, and the title, the
answer and the summary would each run to OpenCode's 4,096. What is measured, the
prompt processed, does not depend on the answers' length.

A recording proxy between OpenCode and the gateway keeps OpenCode's compaction request
as sent. Printed side by side: that call through the gateway (its receipt:
``server_processed`` of ``prompt_tokens``, ``server_cached``) and the same request sent
straight to the server afterwards (``timings.prompt_n``, ``cache_n``). Token counts only
are compared: times here depend on whatever else the machine runs.

Below ~9–10k tokens of prompt the goal cannot be met by any gateway: OpenCode's
summariser instruction and template (~460 tokens) are processed whatever is cached.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx

from sakur4.backends.launcher import LlamaServer, ServerFlags, ensure_model, find_llama_server
from sakur4.demo.via_gateway import running_gateway
from sakur4.harnesses.compaction import recognise
from sakur4.harnesses.recipes import Target, harness, launch
from sakur4.receipts import Receipt, list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

ROOT = Path(__file__).resolve().parent.parent
OPENCODE = ROOT / "tests" / "wrap" / "opencode" / "node_modules" / "opencode-linux-x64" / "bin"
INSTALL = "npm install --prefix tests/wrap/opencode --ignore-scripts"
SERVER_CTX = 32768  # the packaged model's trained context
QUESTION = "What do these files do?"
GOAL = 0.05

# Measured on OpenCode 1.18.33's first request through this model's template
# (/apply-template + /tokenize): its system prompt and tools, and one generated function
# as its read tool lists it (numbered lines).
OPENCODE_OVERHEAD = 2150
TOKENS_PER_DEF = 75.6
# OpenCode's read tool keeps at most 2,000 lines and 50 KB of a file: each file stays
# well under both, or the prompt would be cut short of the size asked for.
DEFS_PER_FILE = 120


@dataclass(frozen=True)
class Sizing:
    window: int  # told to OpenCode
    output: int  # OpenCode's limit.output: its reserve, and what it asks an answer for
    prompt: int  # the first prompt aimed at, in tokens

    @property
    def compacts_at(self) -> int:
        """OpenCode's line: a reply whose input + output reach it triggers compaction."""
        return max(0, self.window - self.output)

    @property
    def defs(self) -> int:
        return max(1, round((self.prompt - OPENCODE_OVERHEAD) / TOKENS_PER_DEF))

    def problems(self) -> list[str]:
        """Why this sizing would not measure a compaction after the first answer."""
        out = []
        if self.prompt <= self.compacts_at:
            out.append(
                f"a {self.prompt:,}-token prompt is under OpenCode's line "
                f"({self.window:,} − {self.output:,} = {self.compacts_at:,}): no compaction"
            )
        if self.prompt + self.output > SERVER_CTX:
            out.append(
                f"prompt + output ({self.prompt + self.output:,}) over the server's "
                f"{SERVER_CTX:,}: the gateway would fold the files before the compaction"
            )
        if OPENCODE_OVERHEAD + self.output >= self.compacts_at:
            out.append("the prompt after the compaction would be over the line again")
        return out


def source(first: int, count: int) -> str:
    """``count`` small, distinct functions: code the model reads as code."""
    return "\n".join(
        f"def batch_{i}(rows, rate={i % 7 + 1}):\n"
        f'    """Sum batch {i}\'s values at rate {i % 7 + 1}."""\n'
        f'    return sum(r.value * rate + {i} for r in rows if r.kind == "k{i % 13}")\n'
        for i in range(first, first + count)
    )


def project_files(defs: int) -> dict[str, str]:
    """The project's files (name -> text), ``defs`` functions in files OpenCode reads whole."""
    files = {}
    for n, first in enumerate(range(0, defs, DEFS_PER_FILE)):
        files[f"ledger_{n}.py"] = source(first, min(DEFS_PER_FILE, defs - first))
    return files


class Recording(BaseHTTPRequestHandler):
    """Passes each request on to the gateway as it is (the answer streamed back) and
    keeps the chat bodies: the compaction request as OpenCode sent it. Each answer is
    capped at ``cap`` tokens on the way (``max_tokens``)."""

    upstream = ""
    cap = 0
    seen: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/chat/completions"):
            body = json.loads(raw)
            self.seen.append(body)
            raw = json.dumps(capped(body, self.cap)).encode()
        self._forward(raw)

    def _forward(self, raw: bytes | None) -> None:
        skip = {"host", "content-length", "connection", "accept-encoding"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        method = "GET" if raw is None else "POST"
        with (
            httpx.Client(timeout=1800) as http,
            http.stream(method, self.upstream + self.path, content=raw, headers=headers) as got,
        ):
            self.send_response(got.status_code)
            for k, v in got.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            for data in got.iter_raw():
                self.wfile.write(data)
                self.wfile.flush()
        self.close_connection = True


def capped(body: dict[str, Any], cap: int) -> dict[str, Any]:
    """``body`` asking for at most ``cap`` tokens of answer."""
    out = {**body, "max_tokens": min(int(body.get("max_tokens") or cap), cap)}
    if "max_completion_tokens" in body:
        out["max_completion_tokens"] = min(int(body["max_completion_tokens"]), cap)
    return out


@contextlib.contextmanager
def recording(upstream: str, cap: int) -> Iterator[str]:
    Recording.upstream = upstream
    Recording.cap = cap
    Recording.seen.clear()
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()


def user_env(home: Path, store: Path, run_env: dict[str, str]) -> dict[str, str]:
    """A user's environment: a fresh home, the store, OpenCode on PATH, no update check."""
    home.mkdir(parents=True, exist_ok=True)
    keep = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
    return (
        keep
        | {
            "PATH": os.pathsep.join([str(OPENCODE), os.environ.get("PATH", "")]),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "SAKUR4_STORE": str(store),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
        }
        | run_env
    )


def receipts(store: Path, project: Path) -> list[Receipt]:
    s = open_store(store)
    try:
        return list_receipts(s, ensure_project(s, project).id, limit=1000)
    finally:
        s.close()


def share(processed: int, prompt: int) -> str:
    return f"{100 * processed / prompt:.1f} %" if prompt else "-"


def print_via(via: Receipt) -> None:
    """The table's head and its row for the compaction call served through the gateway."""
    processed = via.server_processed or 0
    print()
    print("| compaction call | processed | prompt | reused | processed / prompt |")
    print("|---|---|---|---|---|")
    print(
        f"| via the gateway | {processed:,} | {via.prompt_tokens:,} | {via.server_cached or 0:,} "
        f"| {share(processed, via.prompt_tokens)} |"
    )


def full_attention_server(log: Path) -> LlamaServer:
    """The set-up's llama-server with the packaged model, any prefix resumable
    (``--swa-full``), ``-c`` the model's trained context, logging to ``log``."""
    settings = Settings.load()
    flags = ServerFlags(ctx=SERVER_CTX, swa_full=True)
    return LlamaServer(
        find_llama_server(settings),
        ensure_model(settings),
        flags,
        log_path=log,
        die_with_parent=True,
    )


def run(sizing: Sizing, cap: int, work: Path, log: Path) -> int:
    project = work / "project"
    project.mkdir()
    files = project_files(sizing.defs)
    for name, text in files.items():
        (project / name).write_text(text)
    store = work / "store.db"
    server = full_attention_server(log)
    with server:
        model = str(httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"][0]["id"])
        settings = Settings.load(store=store, project=project, backend=server.url)
        with running_gateway(settings) as gateway, recording(gateway.url, cap) as url:
            target = Target(url, model, sizing.output, project, None, window=sizing.window)
            args = [x for name in files for x in ("-f", name)]
            plan = launch(harness("opencode"), target, ["run", *args, "--", QUESTION], work)
            done = subprocess.run(
                [str(OPENCODE / "opencode"), *plan.argv[1:]],
                cwd=project,
                env=user_env(work / "home", store, dict(plan.env)),
                capture_output=True,
                text=True,
                timeout=3600,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        if done.returncode != 0:
            print(f"OpenCode failed ({done.returncode}): {done.stderr[-1500:]}")
            return 1
        seen = list(Recording.seen)
        asked = [b for b in seen if recognise(b) is not None]
        served = [r for r in receipts(store, project) if "compaction" in r.detail]
        print(f"OpenCode's chat calls: {len(seen)}; compaction requests: {len(asked)}")
        for r in sorted(receipts(store, project), key=lambda r: r.id or 0):
            kind = "compaction" if "compaction" in r.detail else "turn"
            print(
                f"  receipt {r.id}: {kind:10} prompt {r.prompt_tokens:>6,}  "
                f"processed {r.server_processed}  reused {r.server_cached}"
            )
        if not asked or not served:
            print("no compaction: OpenCode did not compact (raise --prompt or lower --window)")
            return 1
        via = min(served, key=lambda r: r.id or 0)
        straight = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={**asked[0], "stream": False, "max_tokens": 1, "cache_prompt": True},
            timeout=1800,
        ).json()["timings"]
    s_proc = int(straight["prompt_n"])
    s_prompt = s_proc + int(straight.get("cache_n", 0))
    v_proc = via.server_processed or 0
    print_via(via)
    print(
        f"| straight to the server | {s_proc:,} | {s_prompt:,} | {s_prompt - s_proc:,} "
        f"| {share(s_proc, s_prompt)} |"
    )
    # The goal is of the harness's own prompt: OpenCode's compaction prompt is the one
    # sent straight (the served one carries the session's system prompt and tools too).
    own = max(v_proc / s_prompt, v_proc / via.prompt_tokens) if s_prompt else 1.0
    print(f"\nvia the gateway, {v_proc:,} is {share(v_proc, s_prompt)} of OpenCode's own prompt")
    print(f"goal ≤ {GOAL:.0%} processed: {'met' if own <= GOAL else 'missed'}")
    return 0


CLAUDE = ROOT / "tests" / "gateway" / "claude_code" / "node_modules" / "@anthropic-ai"
CLAUDE = CLAUDE / "claude-code-linux-x64" / "claude"
CLAUDE_INSTALL = "npm ci --prefix tests/gateway/claude_code --ignore-scripts"
# Claude Code 2.1.332's system prompt and 12 tools, and its /compact instruction with the
# template around it (the 2026-12-03 test: 1,397 processed of 5,771), in tokens; one
# generated function piped in as text, unnumbered (/tokenize).
CLAUDE_OVERHEAD = 4300
CLAUDE_INSTRUCTION = 1400
PIPED_TOKENS_PER_DEF = 58.0


def claude_problems(prompt: int) -> list[str]:
    """Why a first prompt this long would not measure Claude Code's /compact as served:
    past the gateway's trigger (the default profile's 0.75 of the server's window) the
    planner folds the conversation, and the compaction's prompt is no longer the cached
    one plus the instruction."""
    trigger = int(0.75 * SERVER_CTX)
    if prompt + CLAUDE_INSTRUCTION >= trigger:
        return [
            f"{prompt:,} + the ~{CLAUDE_INSTRUCTION:,}-token instruction is over the "
            f"gateway's trigger ({trigger:,}): it would fold before the compaction"
        ]
    return []


def claude_env(home: Path, base_url: str, cap: int) -> dict[str, str]:
    """Claude Code pointed at the gateway, nothing leaving the machine, answers capped."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-local-unused",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(cap),
        # Its watchdogs hang up on a stream silent for 300 s (then it retries, and the
        # retry resumes what the server cached): a cold 22k-token prefill here is longer.
        "API_TIMEOUT_MS": "3600000",
        "CLAUDE_STREAM_IDLE_TIMEOUT_MS": "3600000",
    }


def run_claude_code(prompt: int, cap: int, work: Path, log: Path) -> int:
    """One ``claude -p`` turn with the files piped in (a ``prompt``-token first prompt),
    then ``claude -p --continue /compact``: the compaction call's receipt."""
    project = work / "project"
    project.mkdir()
    defs = max(1, round((prompt - CLAUDE_OVERHEAD) / PIPED_TOKENS_PER_DEF))
    piped = "\n\n".join(f"# {n}\n{t}" for n, t in project_files(defs).items())
    store = work / "store.db"
    server = full_attention_server(log)
    cli = [str(CLAUDE), "--model", "local", "--output-format", "json", "-p"]
    with server:
        settings = Settings.load(store=store, project=project, backend=server.url)
        with running_gateway(settings) as gateway:
            env = claude_env(work / "home", gateway.url, cap)
            for args, stdin in (([QUESTION], piped), (["/compact", "--continue"], "")):
                done = subprocess.run(
                    [*cli, *args],
                    cwd=project,
                    env=env,
                    input=stdin,
                    capture_output=True,
                    text=True,
                    timeout=3600,
                    check=False,
                )
                # A cut answer ends -p with is_error and exit 1 ("exceeded the 32 output
                # token maximum"): the turn was answered; only no result at all fails.
                if '"type":"result"' not in done.stdout.replace(" ", ""):
                    print(f"Claude Code failed ({done.returncode}): {done.stderr[-800:]}")
                    return 1
    every = sorted(receipts(store, project), key=lambda r: r.id or 0)
    for r in every:
        kind = "compaction" if "compaction" in r.detail else "turn"
        print(
            f"  receipt {r.id}: {kind:10} prompt {r.prompt_tokens:>6,}  "
            f"processed {r.server_processed}  reused {r.server_cached}  {r.verdict}"
        )
    served = [r for r in every if "compaction" in r.detail]
    if not served:
        print("no compaction receipt: /compact did not reach the gateway as one")
        return 1
    via = served[0]
    v_proc = via.server_processed or 0
    print_via(via)
    # Straight to the server the request extends the cached prompt as well (it is the
    # conversation plus the instruction): it resumes there too; not sent again.
    met = v_proc <= GOAL * via.prompt_tokens
    print(f"\ngoal ≤ {GOAL:.0%} processed: {'met' if met else 'missed'}")
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--harness", choices=("opencode", "claude-code"), default="opencode")
    p.add_argument("--window", type=int, default=16384, help="the window OpenCode is told")
    p.add_argument("--output", type=int, default=4096, help="OpenCode's output limit")
    p.add_argument("--prompt", type=int, help="first prompt, tokens (13,000; Claude Code 22,000)")
    p.add_argument("--answer-cap", type=int, default=32, help="tokens an answer, at most")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    a = p.parse_args()
    if a.harness == "claude-code":
        claude_code(a.prompt or 22000, a.answer_cap, a.out)
        return
    if not (OPENCODE / "opencode").is_file():
        print(f"skipped: OpenCode is not installed ({INSTALL})")
        return
    sizing = Sizing(a.window, a.output, a.prompt or 13000)
    if problems := sizing.problems():
        sys.exit("; ".join(problems))
    print(
        f"OpenCode told a window of {sizing.window:,} with {sizing.output:,} tokens an answer: "
        f"it compacts once a reply reaches {sizing.compacts_at:,} tokens. First prompt aimed "
        f"at ~{sizing.prompt:,} tokens ({sizing.defs} functions in "
        f"{len(project_files(sizing.defs))} files); server -c {SERVER_CTX:,} --swa-full; "
        f"answers capped at {a.answer_cap} tokens.",
        flush=True,
    )
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sakur4-compaction-") as work:
        code = run(sizing, a.answer_cap, Path(work), a.out / "compaction-server.log")
    sys.exit(code)


def claude_code(prompt: int, cap: int, out: Path) -> None:
    if not CLAUDE.is_file():
        print(f"skipped: Claude Code is not installed ({CLAUDE_INSTALL})")
        return
    if problems := claude_problems(prompt):
        sys.exit("; ".join(problems))
    print(
        f"Claude Code: one -p turn with ~{prompt:,} tokens of prompt (files piped in), then "
        f"/compact; server -c {SERVER_CTX:,} --swa-full; answers capped at {cap} tokens.",
        flush=True,
    )
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sakur4-compaction-") as work:
        code = run_claude_code(prompt, cap, Path(work), out / "compaction-claude-server.log")
    sys.exit(code)


if __name__ == "__main__":
    main()
