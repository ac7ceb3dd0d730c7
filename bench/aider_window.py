"""Which window and repo map to tell aider (issue 41): its current-turn content (system
prompt, repo map, files in the chat, the message) is never folded by the gateway, so it
must fit the server's window by itself.

The real aider 0.86.2 runs one interactive session (messages piped to its stdin,
``--no-fancy-input``) through ``sakur4 wrap`` and a Sakur4 gateway in front of the real
llama-server (``-c 8192 --swa-full``, the packaged Gemma 3 270M), in a generated git
repository of ~40 Python files, once per configuration:

- ``large``: told 1,000,000 (wrap's window before issue 41), aider's own map defaults;
- ``server``: told 8,192 (``--window 8192``), the map aider derives from that (1,024);
- ``derived``: what ``wrap`` tells aider now (no ``--window``): the window and map
  derived from the server's window and the output cap.

Extra aider flags for a configuration go after ``--aider`` (e.g. ``--map-refresh files``).

The session: a correction to keep and a question about the repository (no files in the
chat, so the map is at its largest), two files added and asked about, a question that
names a function in a third file, and the correction asked back. Reported per
configuration, from the gateway's receipts: requests served and refused, tokens the
server processed and reused (reuse = reused / (reused + processed) over served
requests), where each request's prompt first differed from the one before it (from the
prompts the server received), and the wall time. The figures go to stdout and to
``--out`` as JSON.

    python bench/aider_window.py --config derived --out /tmp/aider-window.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness_window import Recorder, env_for, llama

from sakur4.backends.launcher import LlamaServer, free_port
from sakur4.demo.via_gateway import running_gateway
from sakur4.receipts import list_receipts
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

ROOT = Path(__file__).resolve().parent.parent
AIDER_BIN = Settings.load().cache_dir / "aider" / "0.86.2" / "bin"
MODULES = 42
OUTPUT_CAP = 64  # the issue ran 128; answers are junk either way, and slow to write here
SESSION_LIMIT = 3600.0
CORRECTION = "Correction, keep for the whole session: run the tests with pytest -x, never make."
# Per configuration: wrap's flags, and aider's. "large" is wrap before issue 41: told
# 1,000,000, aider sized its map itself (an eighth of the window, at most 4,096, times
# 2 with no file in the chat).
CONFIGS: dict[str, tuple[list[str], list[str]]] = {
    "large": (["--window", "1000000"], ["--map-tokens", "4096", "--map-multiplier-no-files", "2"]),
    "server": (["--window", "8192"], ["--map-tokens", "1024", "--map-multiplier-no-files", "2"]),
    "derived": ([], []),
}


def module_text(i: int) -> str:
    """A module of three classes and six functions, so that the whole repository's map
    (~300 tokens a file) is larger than aider's largest map: the map fills its budget."""
    nxt = (i % MODULES) + 1
    lines = [
        f'"""ledger.module_{i:02d}: batch {i} of the reconciliation pipeline."""',
        "",
        f"from ledger.module_{nxt:02d} import reconcile_batch_{nxt}",
        "",
    ]
    for kind in ("Batch", "Ledger", "Audit", "Report"):
        lines += [
            "",
            f"class {kind}{i}:",
            f'    """{kind} rows of batch {i}, with the totals the auditors ask for."""',
            "",
            "    def __init__(self, rows, limit, currency='EUR'):",
            "        self.rows, self.limit, self.currency = rows, limit, currency",
            "",
            f"    def flagged_{kind.lower()}_{i}(self, reason=None):",
            "        return [r for r in self.rows if r.flag and r.reason == reason]",
            "",
            f"    def total_{kind.lower()}_{i}(self, include_flagged=False):",
            "        return sum(r.value for r in self.rows if r.value >= self.limit)",
            "",
            f"    def split_{kind.lower()}_{i}(self, parts, by_currency=True):",
            "        return [self.rows[k::parts] for k in range(parts)]",
        ]
    for name in ("reconcile_batch", "audit_rows", "export_totals", "merge_ledgers"):
        lines += [
            "",
            "",
            f"def {name}_{i}(rows, limit={i + 3}, currency='EUR', strict=False):",
            f'    """{name.replace("_", " ")} for batch {i}."""',
            f"    batch = Batch{i}(rows, limit, currency)",
            "    rest = [r for r in rows if r.value < limit]",
            f"    return batch.total_batch_{i}() + (reconcile_batch_{nxt}(rest) if rest else 0)",
        ]
    return "\n".join(lines) + "\n"


def make_repo(root: Path) -> None:
    pkg = root / "ledger"
    pkg.mkdir(parents=True)
    (root / "README.md").write_text("# ledger\n\nReconciles ledger batches. Tests: pytest.\n")
    (pkg / "__init__.py").write_text('"""The ledger reconciliation pipeline."""\n')
    for i in range(1, MODULES + 1):
        (pkg / f"module_{i:02d}.py").write_text(module_text(i))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "ledger"], cwd=root, check=True)


SESSION = [
    f"{CORRECTION} What does this repository contain? One line.",
    "/add ledger/module_03.py",
    "What does reconcile_batch_3 do? One line.",
    "What does audit_rows_12 in module_12 return? One line.",
    "What did I ask you to keep for the whole session? One line.",
]


@dataclass
class Run:
    config: str
    flags: list[str]
    exit_code: int | None = None
    seconds: float = 0.0
    requests: int = 0
    served: int = 0
    refused: int = 0
    failed: int = 0
    processed: int = 0
    reused: int = 0
    reuse: float = 0.0
    prompt_tokens: list[int] = field(default_factory=list)
    processed_each: list[int | None] = field(default_factory=list)
    first_change: list[int | None] = field(default_factory=list)  # chars, vs the previous
    said: list[str] = field(default_factory=list)  # wrap's lines
    tail: str = ""


def first_change(before: str, after: str) -> int | None:
    n = min(len(before), len(after))
    for i in range(n):
        if before[i] != after[i]:
            return i
    return None if len(before) == len(after) else n


def run_one(config: str, extra: list[str], server: LlamaServer, work: Path, limit: float) -> Run:
    home, store, project = work / "home", work / "store.db", work / "project"
    make_repo(project)
    env = env_for(home, store)
    env["PATH"] = f"{AIDER_BIN}:{env['PATH']}"
    settings = Settings.load(
        store=store, project=project, backend=server.url, gateway_port=free_port()
    )
    recorder = Recorder()
    flags, aider_flags = CONFIGS[config]
    extra = [*aider_flags, *extra]
    result = Run(config, flags + extra)
    with running_gateway(settings, backend_transport=recorder) as gw:
        port = gw.url.rsplit(":", 1)[1]
        cmd = [sys.executable, "-m", "sakur4", "wrap", "--port", port, "--no-mcp"]
        cmd += ["--max-output", str(OUTPUT_CAP), *flags, "aider", "--"]
        cmd += ["--yes-always", "--no-auto-commits", "--no-fancy-input", "--no-pretty"]
        cmd += ["--no-show-model-warnings", *extra]
        started = time.monotonic()
        try:
            done = subprocess.run(
                cmd,
                cwd=project,
                env=env,
                input="\n".join(SESSION) + "\n",
                capture_output=True,
                text=True,
                timeout=limit,
                check=False,
            )
            result.exit_code = done.returncode
            result.said = [ln for ln in done.stderr.splitlines() if "sakur4 wrap" in ln]
            result.tail = (done.stdout + done.stderr)[-3000:]
        except subprocess.TimeoutExpired as e:
            result.tail = f"timed out after {limit:g} s: {str(e.stdout)[-2000:]}"
        result.seconds = round(time.monotonic() - started, 1)
    sent = recorder.sent
    result.requests = len(sent)
    result.first_change = [None] + [first_change(a, b) for a, b in itertools.pairwise(sent)]
    s = open_store(store)
    try:
        got = list_receipts(s, ensure_project(s, project).id, limit=10_000)
    finally:
        s.close()
    got = sorted(got, key=lambda r: r.id or 0)
    # Served: the server said what it processed. A turn refused once measured keeps the
    # verdict it was planned with (seen: "stepping"), so the verdict alone is not read.
    served = [r for r in got if r.server_processed is not None and not r.failed]
    result.served = len(served)
    result.failed = sum(1 for r in got if r.failed)
    result.refused = len(got) - result.served - result.failed
    result.prompt_tokens = [r.prompt_tokens for r in got]
    result.processed_each = [r.server_processed for r in got]
    result.processed = sum(r.server_processed or 0 for r in served)
    result.reused = sum(r.server_cached or 0 for r in served)
    total = result.processed + result.reused
    result.reuse = round(100 * result.reused / total, 1) if total else 0.0
    (work / "receipts.json").write_text(json.dumps([asdict(r) for r in got], indent=1, default=str))
    (work / "sent.json").write_text(json.dumps(sent))
    return result


def table(runs: list[Run]) -> str:
    rows = [
        "| config | flags | served | refused | failed | processed | reused | reuse | wall s |",
        "|" + " --- |" * 9,
    ]
    for r in runs:
        rows.append(
            f"| {r.config} | {' '.join(r.flags) or '(none)'} | {r.served} | {r.refused} | "
            f"{r.failed} | {r.processed:,} | {r.reused:,} | {r.reuse} % | {r.seconds:.0f} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=tuple(CONFIGS), action="append")
    ap.add_argument("--aider", nargs=argparse.REMAINDER, default=[], help="extra aider flags")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", type=Path, help="copy each run's receipts and prompts here")
    ap.add_argument("--limit", type=float, default=SESSION_LIMIT)
    args = ap.parse_args()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="aider-window-") as tmp:
        work = Path(tmp)
        with llama(work) as server:
            for config in args.config or ["derived"]:
                print(f"aider, {config} {' '.join(args.aider)}", flush=True)
                where = work / config
                run = run_one(config, args.aider, server, where, args.limit)
                runs.append(run)
                print(table([run]), flush=True)
                print("\n".join(run.said), flush=True)
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    for name in ("receipts.json", "sent.json"):
                        (args.keep / f"{config}-{name}").write_bytes((where / name).read_bytes())
                if args.out:
                    args.out.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    print(table(runs))


if __name__ == "__main__":
    main()
