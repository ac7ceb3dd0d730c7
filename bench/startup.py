"""Start-up of the ``sakur4`` command, each figure beside its yardstick in the same run.

    nice -n 10 .venv/bin/python bench/startup.py [--runs N]

Paired whole-process runs (A, B, A, B, ...), so a machine whose speed drifts during
the run moves both sides of each pair; the ratio is taken pair by pair and its
median printed, with the median wall and CPU seconds of each side:

- ``sakur4 --version`` beside ``python -c "import click"`` (goal, issue 18: <= 3x);
- ``sakur4 serve`` over stdio answering MCP ``initialize``, beside a one-tool server
  on the same SDK (bench/minimal_server.py), timed from spawn to the response line
  (goal, issue 18: <= 1.2x); the time to the ``tools/list`` answer is printed too,
  since that is when a harness can first call a tool;
- ``sakur4 index FILE`` after editing that file, in a copy of this package's source
  (goal, issue 17: <= 0.15 s wall), beside ``python -c "import click"`` for scale,
  and the floor under it: loading the settings alone (pydantic-settings).

The machine is shared: the load average is printed before and after, and only the
ratios compare across runs. CPU seconds are the children's own accounting
(``getrusage(RUSAGE_CHILDREN)``). CI never runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mcp.types import LATEST_PROTOCOL_VERSION

HERE = Path(__file__).resolve().parent
SAKUR4 = Path(sys.executable).with_name("sakur4")
PACKAGE = HERE.parent / "src" / "sakur4"
IMPORT_CLICK = [sys.executable, "-c", "import click"]
MINIMAL_SERVER = [sys.executable, str(HERE / "minimal_server.py")]

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "bench-startup", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


@dataclass(frozen=True)
class Timing:
    wall: float  # seconds to the figure's end point (the exit, or a response line)
    cpu: float  # the child's user + system seconds, over its whole life
    extra: float = 0.0  # a second end point where there is one (tools/list answered)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def whole_process(cmd: list[str], env: dict[str, str] | None = None) -> Timing:
    """Spawn to exit."""
    cpu0, t0 = _cpu(), time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{cmd} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return Timing(wall, _cpu() - cpu0)


def mcp_stdio(cmd: list[str], env: dict[str, str] | None = None) -> Timing:
    """Spawn to the ``initialize`` response (wall), and to the ``tools/list`` one (extra)."""
    cpu0, t0 = _cpu(), time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None
    assert stdout is not None

    def ask(*messages: dict[str, object]) -> dict[str, object]:
        stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise SystemExit(f"{cmd} closed stdout before answering {messages[-1]['method']}")
        reply: dict[str, object] = json.loads(line)
        if "result" not in reply:
            raise SystemExit(f"{cmd} answered {messages[-1]['method']} with {reply}")
        return reply

    ask(INITIALIZE)
    initialized = time.perf_counter() - t0
    tools = ask(INITIALIZED, LIST_TOOLS)
    listed = time.perf_counter() - t0
    stdin.close()
    proc.wait(timeout=30)
    result = tools["result"]
    if not isinstance(result, dict) or not result.get("tools"):
        raise SystemExit(f"{cmd} listed no tools: {tools}")
    return Timing(initialized, _cpu() - cpu0, listed)


Pairs = list[tuple[Timing, Timing]]


def paired(a: Callable[[], Timing], b: Callable[[], Timing], runs: int) -> Pairs:
    a(), b()  # warm-up: page cache, .pyc files, the store's first migration
    return [(a(), b()) for _ in range(runs)]


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def report(name: str, pairs: Pairs, b_name: str, goal: float | None) -> str:
    ratio = _median([a.wall / b.wall for a, b in pairs])
    a_wall, b_wall = _median([a.wall for a, _ in pairs]), _median([b.wall for _, b in pairs])
    a_cpu, b_cpu = _median([a.cpu for a, _ in pairs]), _median([b.cpu for _, b in pairs])
    print(f"{name}: {a_wall:.3f} s wall, {a_cpu:.3f} s CPU (median of {len(pairs)})")
    print(f"  {b_name}: {b_wall:.3f} s wall, {b_cpu:.3f} s CPU")
    print(f"  ratio, pair by pair: median {ratio:.2f}x", end="")
    lo, hi = min(a.wall / b.wall for a, b in pairs), max(a.wall / b.wall for a, b in pairs)
    print(f" (min {lo:.2f}x, max {hi:.2f}x); CPU {_median([a.cpu / b.cpu for a, b in pairs]):.2f}x")
    if goal is None:
        return ""
    verdict = "met" if ratio <= goal else "MISSED"
    return f"goal: {name} <= {goal}x {b_name}: {ratio:.2f}x, {verdict}"


def bench_version(runs: int) -> str:
    pairs = paired(
        lambda: whole_process([str(SAKUR4), "--version"]),
        lambda: whole_process(IMPORT_CLICK),
        runs,
    )
    return report("sakur4 --version", pairs, 'python -c "import click"', 3.0)


def bench_serve(runs: int, scratch: Path) -> str:
    project = scratch / "serve-project"
    project.mkdir()
    env = {**os.environ, "SAKUR4_STORE": str(scratch / "serve.db")}
    serve = [str(SAKUR4), "--project", str(project), "serve"]
    pairs = paired(lambda: mcp_stdio(serve, env), lambda: mcp_stdio(MINIMAL_SERVER), runs)
    goal = report("sakur4 serve, initialize answered", pairs, "one-tool SDK server", 1.2)
    listed = _median([a.extra / b.extra for a, b in pairs])
    a_list = _median([a.extra for a, _ in pairs])
    b_list = _median([b.extra for _, b in pairs])
    print(
        f"  tools/list answered: {a_list:.3f} s against {b_list:.3f} s, "
        f"median {listed:.2f}x pair by pair (not a goal: when a harness can first call a tool)"
    )
    return goal


def bench_reindex(runs: int, scratch: Path) -> str:
    tree = scratch / "index-project"
    shutil.copytree(PACKAGE, tree / "sakur4", ignore=shutil.ignore_patterns("__pycache__"))
    store = scratch / "index.db"
    base = [str(SAKUR4), "--store", str(store), "--project", str(tree), "index"]
    whole_process(base)  # the full index the one-file runs start from
    edited = tree / "sakur4" / "receipts.py"
    original = edited.read_text(encoding="utf-8")
    count = iter(range(10**6))

    def one_file() -> Timing:
        edited.write_text(f"{original}\n\ndef _bench_edit_{next(count)}():\n    return 1\n")
        return whole_process([*base, str(edited)])

    pairs = paired(one_file, lambda: whole_process(IMPORT_CLICK), runs)
    report("sakur4 index FILE (one file edited)", pairs, 'python -c "import click"', None)
    # What every command that reads its configuration pays before it does anything.
    settings = [sys.executable, "-c", "from sakur4.settings import Settings; Settings.load()"]
    floor = paired(lambda: whole_process(settings), lambda: whole_process(IMPORT_CLICK), runs)
    report("  floor: the settings alone (pydantic-settings)", floor, "import click", None)
    wall = _median([a.wall for a, _ in pairs])
    verdict = "met" if wall <= 0.15 else "MISSED"
    return f"goal: CLI one-file re-index <= 0.15 s: {wall:.3f} s, {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="pairs per figure (default 15)")
    args = parser.parse_args()
    if not SAKUR4.exists():
        raise SystemExit(f"no sakur4 command beside {sys.executable}: install the project first")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="sakur4-startup-") as tmp:
        goals = [
            bench_version(args.runs),
            bench_serve(args.runs, Path(tmp)),
            bench_reindex(args.runs, Path(tmp)),
        ]
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    for line in goals:
        print(line)


if __name__ == "__main__":
    main()
