"""Mutation testing (mutmut 3) of the code whose guards matter most: can the tests fail?

    .venv/bin/python scripts/mutation.py [TARGET ...] [--workers N] [--examples N] [--ci]

Targets: ``engine`` (src/sakur4/engine, all of it), ``staleness`` (the Atlas verdict
rule and the Ledger's current-fact and impact-staleness functions), ``receipts`` (the
cache verdict and the re-prefill count). Default: all three. ``--ci`` runs the bounded
subset CI runs (``receipts`` and the engine's ladder and profiles) and fails on any
survivor that docs/verification/mutation.md does not list (by its mutmut name, in
backquotes, with the reason it was left).

Each target runs in a scratch copy of the committed tree (``git archive HEAD`` of src/,
tests/ and pyproject.toml, with a ``[tool.mutmut]`` table added, in
``/tmp/sakur4-mutation/<target>-<phase>``; with ``--ci`` a fresh temporary directory,
removed after), never in the working tree, at ``nice 10``.
Two phases, so the slow property test runs only where it is needed:

1. every mutant against the target's tests without the slow ones;
2. the survivors of phase 1 again, with the slow tests (the engine's hypothesis property
   test, run with ``--examples`` examples instead of the suite's 200: a mutant it kills
   at 50 it kills at 200, so phase 2 can only under-count kills).

A mutant counts as killed when a test failed on it, or made the tests run past mutmut's
time limit (an endless loop: CI would time out too; shown apart as "timeout"). mutmut's
mypy filter is not used: it trips over mypy's own complaints about the generated
trampolines. Tests that read the
engine's source text (the anchor-path scans) are left out: the trampolines rewrite it.
Prints killed/total per module and every survivor with its diff.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("SAKUR4_MUTATION_DIR", Path(tempfile.gettempdir(), "sakur4-mutation")))
MUTMUT = Path(sys.executable).parent / "mutmut"
DETECTED = ("killed", "timeout")
COMMIT = os.environ.get("SAKUR4_MUTATION_COMMIT", "HEAD")
# Where survivors are listed, each with its reason (docs/verification/mutation.md).
SURVIVORS_DOC = ROOT / "docs" / "verification" / "mutation.md"
SUITE_EXAMPLES = "max_examples=200"

# Source-text scans: mutmut's trampolines rename every function, so these read code
# that is not the code under test (they fail on the unmutated copy).
ENGINE_SOURCE_SCANS = [
    "tests/engine/test_anchor_paths.py::test_only_render_anchor_block_reads_anchor_text",
    "tests/engine/test_anchor_paths.py::test_every_prompt_renderer_calls_render_anchor_block",
]


@dataclass(frozen=True)
class Target:
    mutate: tuple[str, ...]  # files (globs) whose functions are mutated
    names: tuple[str, ...]  # which of their mutants count (mutmut name globs)
    tests: tuple[str, ...]
    slow: tuple[str, ...] = ()  # run only on phase-1 survivors
    deselect: tuple[str, ...] = field(default=())


TARGETS = {
    "engine": Target(
        mutate=("src/sakur4/engine/*",),
        names=("sakur4.engine.*",),
        tests=("tests/engine",),
        slow=("tests/engine/test_properties.py",),
        deselect=tuple(ENGINE_SOURCE_SCANS),
    ),
    "staleness": Target(
        mutate=("src/sakur4/atlas.py", "src/sakur4/ledger/impact.py", "src/sakur4/ledger/facts.py"),
        names=(
            "sakur4.atlas.*",
            "sakur4.ledger.impact.x_staleness*",
            "sakur4.ledger.impact.x_impact_*",
            "sakur4.ledger.facts.x_anchor_status_*",
            "sakur4.ledger.facts.x_current_fact_*",
            "sakur4.ledger.facts.x_newest_facts_*",
        ),
        tests=("tests/atlas", "tests/ledger"),
    ),
    "receipts": Target(
        mutate=("src/sakur4/receipts.py",),
        names=("sakur4.receipts.x_cache_verdict_*", "sakur4.receipts.x_reprefilled_tokens_*"),
        tests=("tests/receipts",),
    ),
    # The bounded subset CI runs: the ladder's rules, its tiers and the profile choice.
    "engine-rules": Target(
        mutate=(
            "src/sakur4/engine/tiers.py",
            "src/sakur4/engine/profiles.py",
            "src/sakur4/vocabulary.py",
        ),
        names=("sakur4.engine.tiers.*", "sakur4.engine.profiles.*", "sakur4.vocabulary.*"),
        tests=(
            "tests/engine/test_tiers.py",
            "tests/engine/test_profiles.py",
            "tests/engine/test_edges.py",
            "tests/test_vocabulary.py",
        ),
    ),
}
CI_TARGETS = ("receipts", "engine-rules")


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def prepare(name: str, t: Target, phase: int, examples: int) -> Path:
    """A fresh scratch copy with the mutmut table for this target and phase."""
    d = WORK / f"{name}-{phase}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    # The committed tree, not the working tree: others edit it while a run takes half an
    # hour, and a figure is only worth something if it names the commit it was taken at.
    archive = subprocess.run(  # noqa: S603 - fixed arguments
        ["git", "archive", "--format=tar", COMMIT, "src", "tests", "pyproject.toml"],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(d, filter="data")
    # A target's own guard tests may not exist yet in an older checkout.
    tests = [p for p in (*t.tests, *(t.slow if phase == 2 else ())) if (d / p).exists()]
    args = [a for s in t.deselect for a in ("--deselect", s)]
    if phase == 1:
        args += [a for s in t.slow for a in ("--ignore", s)]
    for slow in t.slow:
        p = d / slow
        p.write_text(p.read_text().replace(SUITE_EXAMPLES, f"max_examples={examples}"))
    table = "\n".join(
        [
            "",
            "[tool.mutmut]",
            'source_paths = ["src"]',
            f"only_mutate = {_toml_list(list(t.mutate))}",
            f"pytest_add_cli_args_test_selection = {_toml_list(tests + args)}",
            'pytest_add_cli_args = ["-p", "no:cacheprovider"]',
            "use_git_change_detection = false",
            "",
        ]
    )
    (d / "pyproject.toml").write_text((d / "pyproject.toml").read_text() + table)
    return d


def mutmut(d: Path, *args: str, log: Path | None = None) -> str:
    env = dict(os.environ, PATH=f"{MUTMUT.parent}:{os.environ['PATH']}")
    # The store's suites run on SQLite only here: each mutant's pytest would start a
    # PostgreSQL server of its own (tests/fixtures_postgresql.py).
    env["SAKUR4_TEST_ENGINES"] = "sqlite"
    cmd = ["nice", "-n", "10", str(MUTMUT), *args]
    if log is None:
        return subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True).stdout  # noqa: S603
    with log.open("w") as f:
        subprocess.run(cmd, cwd=d, env=env, stdout=f, stderr=subprocess.STDOUT)  # noqa: S603
    return ""


def results(d: Path, names: tuple[str, ...]) -> dict[str, str]:
    """mutant name → status, for the mutants this target counts."""
    out = {}
    for line in mutmut(d, "results", "--all", "true").splitlines():
        key, _, status = line.strip().rpartition(": ")
        if key and any(_glob(key, n) for n in names):
            out[key] = status
    return out


def _glob(key: str, pattern: str) -> bool:
    from fnmatch import fnmatchcase

    return fnmatchcase(key, pattern)


def run_target(name: str, t: Target, workers: int, examples: int) -> dict[str, str]:
    d1 = prepare(name, t, 1, examples)
    print(f"== {name}: phase 1 in {d1}", flush=True)
    mutmut(d1, "run", "--max-children", str(workers), *t.names, log=d1 / "run.log")
    status = results(d1, t.names)
    if not status or all(s == "not checked" for s in status.values()):
        sys.exit(f"{name}: mutmut checked no mutant; see {d1 / 'run.log'}")
    survivors = sorted(k for k, s in status.items() if s not in DETECTED)
    if t.slow and survivors:
        d2 = prepare(name, t, 2, examples)
        print(f"== {name}: phase 2, {len(survivors)} survivors with {t.slow}", flush=True)
        mutmut(d2, "run", "--max-children", str(workers), *survivors, log=d2 / "run.log")
        again = results(d2, tuple(survivors))
        status.update({k: s for k, s in again.items() if k in status})
    return status


def module_of(key: str) -> str:
    return key.split(".x_")[0].split(".xǁ")[0]


def report(name: str, status: dict[str, str], d: Path) -> list[str]:
    by_module: dict[str, Counter[str]] = {}
    for key, s in status.items():
        by_module.setdefault(module_of(key), Counter())[s] += 1
    print(f"\n{name}: module  killed/total  score")
    tk = tt = 0
    for mod, c in sorted(by_module.items()):
        killed = c["killed"] + c["timeout"]
        total = sum(c.values())
        tk, tt = tk + killed, tt + total
        other = {k: v for k, v in c.items() if k != "killed"}
        print(
            f"  {mod:32} {killed:4}/{total:<4} {100 * killed / total:5.1f}%"
            f"  {dict(other) if other else ''}"
        )
    print(f"  {'total':32} {tk:4}/{tt:<4} {100 * tk / max(tt, 1):5.1f}%")
    survivors = sorted(k for k, s in status.items() if s not in DETECTED)
    for key in survivors:
        diff = mutmut(d, "show", key)
        body = "\n".join(
            ln
            for ln in diff.splitlines()
            if ln.startswith(("+ ", "- ", "+\t", "-\t"))
            or (ln[:1] in "+-" and not ln.startswith(("+++", "---")))
        )
        print(f"  survived ({status[key]}): {key}\n{_indent(body)}")
    return survivors


def _indent(s: str) -> str:
    return "\n".join("      " + ln for ln in s.splitlines())


def documented_survivors() -> set[str]:
    """Mutant names listed (in backquotes) in docs/verification/mutation.md."""
    text = SURVIVORS_DOC.read_text(encoding="utf-8") if SURVIVORS_DOC.exists() else ""
    return set(re.findall(r"`(sakur4\.[^`]+__mutmut_\d+)`", text))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    # No ``choices=``: with nargs="*" argparse (3.11) checks the empty default against
    # them and refuses a bare ``--ci``.
    ap.add_argument("targets", nargs="*", metavar="TARGET", help=", ".join(TARGETS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--examples", type=int, default=50, help="hypothesis examples in phase 2")
    ap.add_argument("--ci", action="store_true", help="the bounded subset; fail on new survivors")
    a = ap.parse_args()
    unknown = [t for t in a.targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown targets {unknown}: choose from {', '.join(TARGETS)}")
    names = list(CI_TARGETS) if a.ci else (a.targets or ["engine", "staleness", "receipts"])
    if a.ci and "SAKUR4_MUTATION_DIR" not in os.environ:
        # scripts/check runs this: two checks at once on one machine must not share
        # (and wipe) each other's scratch copies.
        global WORK
        WORK = Path(tempfile.mkdtemp(prefix="sakur4-mutation-ci-"))
        try:
            return _run(a, names)
        finally:
            shutil.rmtree(WORK, ignore_errors=True)
    return _run(a, names)


def _run(a: argparse.Namespace, names: list[str]) -> int:
    known = documented_survivors()
    sha = subprocess.run(  # noqa: S603 - fixed arguments
        ["git", "rev-parse", "--short", COMMIT],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"mutation testing at commit {sha}", flush=True)
    new: list[str] = []
    for name in names:
        status = run_target(name, TARGETS[name], a.workers, a.examples)
        new += [s for s in report(name, status, WORK / f"{name}-1") if s not in known]
    if a.ci and new:
        print(f"\n{len(new)} survivors not listed in {SURVIVORS_DOC.relative_to(ROOT)}: {new}")
        print("Kill each with a test, or list it there with the reason it cannot be killed.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
