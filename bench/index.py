"""Ledger indexing beside aider's repo-map tags and Universal Ctags, on the same real trees.

    flock /work/bench.lock nice -n 5 .venv/bin/python bench/index.py \
        [--tree PATH ...] [--runs N] [--aider-python PATH]

For each tree (default: this interpreter's standard library, and the project
venv's site-packages), a copy is made in a scratch directory so a file can be
edited without touching the original, then:

- full index, each as a whole process into a fresh store, wall and CPU seconds
  and peak RSS: Sakur4 with its worker pool (``sakur4 index --json``), Sakur4
  pinned to one core (``taskset -c 0``: no pool), aider's repo-map tags
  (bench/aider_tags.py: ``RepoMap.get_tags`` for every file, cold cache; needs an
  interpreter with aider installed, ``--aider-python``), and ctags (``ctags -R``
  over the same languages, skipping the same directories);
- the store's size per byte of source;
- re-index after editing one file (a function added): in this process, walking the
  whole tree and given the file's path; and as a CLI command given the path
  (``sakur4 index FILE``, interpreter start-up included); ctags re-run over the
  tree and over the file;
- where Sakur4's time goes: CPU seconds of tree-sitter parsing and of the tag
  queries alone, the floor for any tree-sitter indexer.

Goals (issue 17): full index <= 0.5x aider's tags on each tree, and the CLI
one-file re-index <= 0.15 s. The machine is shared: CPU seconds are printed next
to wall seconds and the load average before and after; compare ratios from one
run, not absolute times across runs. Needs ``ctags`` (Debian: universal-ctags)
and GNU time; CI never runs this.
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


def run(cmd: list[str], cwd: Path | None = None, stdin: str | None = None) -> Run:
    """Run ``cmd`` under GNU time: its own wall and CPU seconds and peak RSS.

    Not wait4() from here: a child forked from this Python process reports this
    process's size as its peak before it execs (ctags would "use" 40 MB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        timed = [GNU_TIME, "-o", report.name, "-f", "%e %U %S %M", *cmd]
        done = subprocess.run(
            timed, cwd=cwd, input=stdin, capture_output=True, text=True, check=False
        )
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


def sakur4_index(
    store: Path, tree: Path, *path: str, one_core: bool = False
) -> tuple[Run, dict[str, object]]:
    pin = ["taskset", "-c", "0"] if one_core else []
    cmd = [*pin, str(SAKUR4), "--store", str(store), "--project", str(tree), "index", *path]
    r = run([*cmd, "--json"])
    return r, json.loads(r.stdout)


def aider_tags(python: Path, tree: Path, cache: Path, files: list[str]) -> tuple[Run, int]:
    """aider's RepoMap.get_tags over ``files``, in its own interpreter; (run, tags)."""
    script = Path(__file__).with_name("aider_tags.py")
    r = run([str(python), str(script), str(tree), str(cache)], stdin="\n".join(files))
    return r, int(json.loads(r.stdout.splitlines()[-1])["tags"])


def store_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


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


def bench_tree(src: Path, runs: int, scratch: Path, aider: Path | None) -> list[str]:
    """Measure one tree, print its table; return its goal lines."""
    tree = scratch / "tree"
    files, size = copy_tree(src, tree)
    print(f"\n## {src}\ncopy: {files:,} source files, {size / 1e6:.1f} MB → {tree}")
    load_before = os.getloadavg()

    store = scratch / "bench.db"
    s4, report = sakur4_index(store, tree)
    one_core, _ = sakur4_index(scratch / "one-core.db", tree, one_core=True)
    symbols = int(report["facts_written"])  # type: ignore[call-overload]
    refs = int(report["references_written"])  # type: ignore[call-overload]
    seen = int(report["files_seen"])  # type: ignore[call-overload]
    db_bytes = store_bytes(store)
    ai: tuple[Run, int] | None = None
    if aider is not None:
        rels = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
        ai = aider_tags(aider, tree, scratch / "aider-cache", rels)
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
    cli: list[Run] = []
    for i in range(runs):
        target.write_text(original + EDIT_MARK.format(n=100 + i))
        r, rep = sakur4_index(store, tree, str(target))
        assert rep["files_parsed"] == 1, rep
        cli.append(r)
    cli_wall = statistics.median(r.wall for r in cli)
    one = [ctags(tree, scratch / "tags1", rel)[0] for _ in range(runs)]
    ct_one = min(one, key=lambda r: r.wall)
    target.write_text(original)
    load_after = os.getloadavg()

    def times(a: float, b: float) -> str:
        return f"{a / b:.2f}×" if b > 0 else "—"

    def row(label: str, a: str, b: str, ratio: str = "") -> None:
        print(f"| {label} | {a} | {b} | {ratio} |")

    def median(xs: list[tuple[float, float]]) -> str:
        w = statistics.median(x[0] for x in xs)
        c = statistics.median(x[1] for x in xs)
        return f"{w:.3f} wall, {c:.3f} CPU"

    print(f"\nload average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    print("| | Sakur4 | reference | Sakur4 / reference |")
    print("|---|---:|---:|---:|")
    row("files indexed", f"{seen:,}", f"{files:,}")
    row("symbols", f"{symbols:,} facts (+ {refs:,} reference rows)", f"{tags:,} ctags tags")
    if ai is not None:
        row(
            "full index vs aider's repo-map tags, wall s",
            f"{s4.wall:.2f} ({report.get('workers', 1)} workers)",
            f"{ai[0].wall:.2f} ({ai[1]:,} tags)",
            times(s4.wall, ai[0].wall),
        )
        row("  CPU s", f"{s4.cpu:.2f}", f"{ai[0].cpu:.2f}", times(s4.cpu, ai[0].cpu))
        row(
            "  pinned to one core (no pool), wall s",
            f"{one_core.wall:.2f} ({one_core.cpu:.2f} CPU)",
            f"{ai[0].wall:.2f}",
            times(one_core.wall, ai[0].wall),
        )
        row("  peak RSS, MB", f"{s4.max_rss_mb:.0f}", f"{ai[0].max_rss_mb:.0f}")
    row("full index vs ctags, wall s", f"{s4.wall:.2f}", f"{ct.wall:.2f}", times(s4.wall, ct.wall))
    row("  CPU s", f"{s4.cpu:.2f}", f"{ct.cpu:.2f}", times(s4.cpu, ct.cpu))
    row("  CPU / wall (cores used)", f"{s4.cpu / s4.wall:.2f}", f"{ct.cpu / ct.wall:.2f}")
    row("store size, MB (per source byte)", f"{db_bytes / 1e6:.1f} ({db_bytes / size:.2f})", "")
    row(
        "  (start-up alone: `sakur4 --version`)",
        f"{boot.wall:.2f} wall, {boot.cpu:.2f} CPU, {boot.max_rss_mb:.0f} MB",
        "",
    )
    row(
        f"re-index after editing one file, s (median of {runs})",
        f"{median(walk)} (whole tree walked)",
        f"{ct.wall:.2f} (ctags: no incremental mode)",
    )
    row("  … given the file's path, s", median(by_path), f"{ct_one.wall:.3f} (ctags, that file)")
    row(
        "  … as a CLI command (`sakur4 index FILE`), s",
        f"{cli_wall:.3f} wall, {statistics.median(r.cpu for r in cli):.3f} CPU",
        "",
    )
    print(f"\nEdited: {rel}. Full index: whole processes.")
    print(
        f"Where Sakur4's full-index CPU goes: tree-sitter parsing alone {floor[0]:.2f} s, "
        f"plus running the tag queries {floor[1]:.2f} s "
        f"({(floor[0] + floor[1]) / max(s4.cpu, 1e-9):.0%} of it); the rest is building "
        "facts and references in Python and writing them to SQLite."
    )
    goals = []
    name = src.name
    if ai is not None:
        ratio = s4.wall / ai[0].wall
        verdict = "met" if ratio <= 0.5 else "MISSED"
        goals.append(
            f"goal, {name}: full index / aider's tags = {s4.wall:.2f} / {ai[0].wall:.2f} s "
            f"= {ratio:.2f}x (<= 0.5x): {verdict}"
        )
    else:
        goals.append(f"goal, {name}: full index vs aider's tags: not measured (--aider-python)")
    verdict = "met" if cli_wall <= 0.15 else "MISSED"
    goals.append(f"goal, {name}: CLI one-file re-index = {cli_wall:.3f} s (<= 0.15 s): {verdict}")
    goals.append(f"reported, {name}: store {db_bytes / size:.2f} bytes per source byte")
    return goals


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
    ap.add_argument(
        "--aider-python",
        type=Path,
        default=os.environ.get("AIDER_PYTHON"),
        help="an interpreter with aider-chat installed [AIDER_PYTHON]",
    )
    args = ap.parse_args()
    if shutil.which("ctags") is None:
        raise SystemExit("ctags not found: apt-get install -y universal-ctags")
    if not os.access(GNU_TIME, os.X_OK):
        raise SystemExit(f"{GNU_TIME} not found: apt-get install -y time")
    version = subprocess.run(["ctags", "--version"], capture_output=True, text=True).stdout
    print(f"# Ledger indexing vs aider's repo-map tags and {version.splitlines()[0]}")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    goals: list[str] = []
    for tree in args.tree or [stdlib, venv]:
        with tempfile.TemporaryDirectory(prefix="sakur4-bench-") as scratch:
            goals += bench_tree(tree.resolve(), args.runs, Path(scratch), args.aider_python)
    print()
    print("\n".join(goals))


if __name__ == "__main__":
    main()
