"""Ledger indexing side by side with Universal Ctags on the same real source tree.

    .venv/bin/python bench/index.py [--tree PATH ...] [--runs N]

For each tree (default: this interpreter's standard library, and the project
venv's site-packages — 6,000+ files), a copy is made in a scratch directory so
a file can be edited without touching the original, then:

- full index: Sakur4 (``sakur4 index --json`` into a fresh store) and ctags
  (``ctags -R`` over the same languages, skipping the same directories);
  wall and CPU seconds, files/s, symbols/s, peak RSS of each process;
- re-index after editing one file (a function added): Sakur4 in this process,
  walking the whole tree and given the file's path; ctags re-run over the tree
  (it has no incremental mode) and over the single file;
- where Sakur4's time goes: CPU seconds of tree-sitter parsing and of the tag
  queries alone, the floor for any tree-sitter indexer.

The machine is shared, so CPU seconds are printed next to wall seconds and the
load average before and after; compare ratios from one run, not absolute times
across runs. Needs ``ctags`` (Debian: universal-ctags); CI never runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tree_sitter as ts

from sakur4.ledger import VENDORED_DIRS, index_project
from sakur4.ledger.walk import OUTPUT_DIRS
from sakur4.parsers import LANGUAGES, language_for_path, load_grammar
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

SAKUR4 = Path(sys.executable).with_name("sakur4")
CTAGS_LANGUAGES = "Python,JavaScript,TypeScript,Go,Rust"
# The extensions Sakur4 parses that ctags does not map by default.
LANGMAP = [
    "--langmap=Python:+.pyi",
    "--langmap=JavaScript:+.cjs",
    "--langmap=TypeScript:+.tsx.mts.cts",
]
GNU_TIME = "/usr/bin/time"
EDIT_MARK = "\n\ndef _bench_added_function():\n    return {n}\n"


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    max_rss_mb: float
    stdout: str


def run(cmd: list[str], cwd: Path | None = None) -> Run:
    """Run ``cmd`` under GNU time: its own wall and CPU seconds and peak RSS.

    Not wait4() from here: a child forked from this Python process reports this
    process's size as its peak before it execs (ctags would "use" 40 MB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        timed = [GNU_TIME, "-o", report.name, "-f", "%e %U %S %M", *cmd]
        done = subprocess.run(timed, cwd=cwd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
        wall, user, system, rss_kb = report.read().split()[-4:]
    return Run(float(wall), float(user) + float(system), int(rss_kb) / 1024, done.stdout)


def copy_tree(src: Path, dst: Path) -> tuple[int, int]:
    """Copy the source files both tools would read; (files, bytes)."""
    exts = tuple(e for spec in LANGUAGES for e in spec.extensions)
    skip = set(VENDORED_DIRS) | set(OUTPUT_DIRS)
    files = size = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in skip]
        rel = Path(dirpath).relative_to(src)
        for name in filenames:
            if name.endswith(exts) and not os.path.islink(os.path.join(dirpath, name)):
                (dst / rel).mkdir(parents=True, exist_ok=True)
                shutil.copy2(os.path.join(dirpath, name), dst / rel / name)
                files += 1
                size += os.path.getsize(dst / rel / name)
    return files, size


def sakur4_index(store: Path, tree: Path, *path: str) -> tuple[Run, dict[str, object]]:
    r = run([str(SAKUR4), "--store", str(store), "--project", str(tree), "index", *path, "--json"])
    return r, json.loads(r.stdout)


def ctags(tree: Path, out: Path, *target: str) -> tuple[Run, int]:
    excludes = [f"--exclude={d}" for d in sorted(VENDORED_DIRS | OUTPUT_DIRS)]
    r = run(
        [
            "ctags",
            "-R",
            f"--languages={CTAGS_LANGUAGES}",
            *LANGMAP,
            *excludes,
            "-f",
            str(out),
            *target,
        ],
        cwd=tree,
    )
    with out.open(encoding="utf-8", errors="replace") as f:
        tags = sum(1 for line in f if not line.startswith("!_TAG"))
    return r, tags


def pick_file(tree: Path) -> Path:
    """A mid-sized Python file to edit (the same one in every run)."""
    files = sorted(tree.rglob("*.py"), key=lambda p: (abs(p.stat().st_size - 20_000), str(p)))
    return files[0]


def bench_tree(src: Path, runs: int, scratch: Path) -> None:
    tree = scratch / "tree"
    files, size = copy_tree(src, tree)
    print(f"\n## {src}\ncopy: {files:,} source files, {size / 1e6:.1f} MB → {tree}")
    load_before = os.getloadavg()

    store = scratch / "bench.db"
    s4, report = sakur4_index(store, tree)
    symbols = int(report["facts_written"])  # type: ignore[call-overload]
    refs = int(report["references_written"])  # type: ignore[call-overload]
    seen = int(report["files_seen"])  # type: ignore[call-overload]
    ct_runs = [ctags(tree, scratch / "tags", ".") for _ in range(runs)]
    ct = min(ct_runs, key=lambda x: x[0].wall)[0]
    tags = ct_runs[0][1]

    floor = tree_sitter_floor(tree)
    boot = run([str(SAKUR4), "--version"])

    # Re-index after one edit, in this process (no interpreter start-up), wall
    # and CPU: the whole tree walked to find the change, then given the path.
    target = pick_file(tree)
    rel = str(target.relative_to(tree))
    original = target.read_text()
    db = open_store(store)
    project = ensure_project(db, tree)
    walk: list[tuple[float, float]] = []
    by_path: list[tuple[float, float]] = []
    for _ in range(runs):
        for timings, path in ((walk, None), (by_path, target)):
            target.write_text(original + EDIT_MARK.format(n=len(walk) + len(by_path)))
            wall, cpu = time.perf_counter(), time.process_time()
            rep = index_project(db, project, path)
            timings.append((time.perf_counter() - wall, time.process_time() - cpu))
            assert (rep.files_parsed, rep.facts_written) == (1, 1), rep
    db.close()
    one = [ctags(tree, scratch / "tags1", rel)[0] for _ in range(runs)]
    ct_one = min(one, key=lambda r: r.wall)
    target.write_text(original)
    load_after = os.getloadavg()

    def times(a: float, b: float) -> str:
        return f"{a / b:.1f}×" if b > 0 else "—"

    def row(label: str, a: str, b: str, ratio: str = "") -> None:
        print(f"| {label} | {a} | {b} | {ratio} |")

    def median(xs: list[tuple[float, float]]) -> str:
        w = statistics.median(x[0] for x in xs)
        c = statistics.median(x[1] for x in xs)
        return f"{w:.3f} wall, {c:.3f} CPU"

    print(f"\nload average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    print("| | Sakur4 | Universal Ctags | Sakur4 / ctags |")
    print("|---|---:|---:|---:|")
    row("files indexed", f"{seen:,}", f"{files:,}")
    row("symbols", f"{symbols:,} facts (+ {refs:,} references)", f"{tags:,} tags")
    row("full index, wall s", f"{s4.wall:.2f}", f"{ct.wall:.2f}", times(s4.wall, ct.wall))
    row("full index, CPU s", f"{s4.cpu:.2f}", f"{ct.cpu:.2f}", times(s4.cpu, ct.cpu))
    row("files/s (wall)", f"{seen / s4.wall:,.0f}", f"{files / ct.wall:,.0f}")
    row("symbols/s (wall)", f"{symbols / s4.wall:,.0f}", f"{tags / ct.wall:,.0f}")
    row("peak RSS, MB", f"{s4.max_rss_mb:.0f}", f"{ct.max_rss_mb:.0f}")
    row(
        "  (start-up alone: `sakur4 --version`)",
        f"{boot.wall:.2f} wall, {boot.cpu:.2f} CPU, {boot.max_rss_mb:.0f} MB",
        "",
    )
    row(
        f"re-index after editing one file, s (median of {runs})",
        f"{median(walk)} (whole tree walked)",
        f"{ct.wall:.2f} (no incremental mode: full re-run)",
    )
    row("  … given the file's path, s", median(by_path), f"{ct_one.wall:.3f} (that file alone)")
    print(f"\nEdited: {rel}. Full index: whole processes (`sakur4 index`, `ctags -R`).")
    print(
        f"Where Sakur4's full-index CPU goes: tree-sitter parsing alone {floor[0]:.2f} s, "
        f"plus running the tag queries {floor[1]:.2f} s "
        f"({(floor[0] + floor[1]) / max(s4.cpu, 1e-9):.0%} of it); the rest is building "
        "facts and references in Python and writing them to SQLite."
    )


def tree_sitter_floor(tree: Path) -> tuple[float, float]:
    """CPU seconds to parse every file, then to run the tag queries: what any
    tree-sitter indexer pays before doing anything with the result."""
    parse = query = 0.0
    for path in sorted(tree.rglob("*")):
        spec = language_for_path(path.name)
        if spec is None or not path.is_file():
            continue
        grammar = load_grammar(spec)
        data = path.read_bytes()
        t = time.process_time()
        parsed = ts.Parser(grammar.language).parse(data)
        parse += time.process_time() - t
        t = time.process_time()
        for _ in ts.QueryCursor(grammar.query).matches(parsed.root_node):
            pass
        query += time.process_time() - t
    return parse, query


def main() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    venv = Path(sysconfig.get_paths()["purelib"])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, help=f"default: {stdlib} and {venv}")
    ap.add_argument("--runs", type=int, default=5, help="repetitions of the short measurements")
    args = ap.parse_args()
    if shutil.which("ctags") is None:
        raise SystemExit("ctags not found: apt-get install -y universal-ctags")
    if not os.access(GNU_TIME, os.X_OK):
        raise SystemExit(f"{GNU_TIME} not found: apt-get install -y time")
    version = subprocess.run(["ctags", "--version"], capture_output=True, text=True).stdout
    print(f"# Ledger indexing vs {version.splitlines()[0]}")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    for tree in args.tree or [stdlib, venv]:
        with tempfile.TemporaryDirectory(prefix="sakur4-bench-") as scratch:
            bench_tree(tree.resolve(), args.runs, Path(scratch))


if __name__ == "__main__":
    main()
