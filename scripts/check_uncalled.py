"""Nothing calls it: every public function, method, property and class in src/ must be used
by code in src/ (not by a test, not only by a benchmark).

    .venv/bin/python scripts/check_uncalled.py

The seed's record (design-decisions.txt, "What the corrections have in common") lists six
functions with a doc comment stating a promise and no caller; unit tests of each passed
throughout. This check runs vulture over the tracked files of ``src/`` only and fails on
any unused definition there that the allow-list (``scripts/uncalled.allow``, a reason per
entry) does not name. Neither ``tests/`` nor ``bench/`` is a caller: library code that
only a benchmark uses passed as used while ``bench/`` counted (issue 18); it belongs in
``bench/``.

Stricter than plain vulture in one way: a name listed in a module's ``__all__`` does not
count as used. Re-exporting is not calling; the seed's uncalled functions were all exported.
It also fails on allow-list entries that no longer match anything, so the list cannot
silently outlive the code it excuses.

Limits (vulture is name-based, not scope-aware): a definition counts as called when the
same name is used anywhere in the scanned code, so ``Store.run`` is "called" by any
``x.run``. It finds names nothing mentions, not every function nothing reaches.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from vulture import Vulture

ROOT = Path(__file__).resolve().parent.parent
ALLOW_FILE = ROOT / "scripts" / "uncalled.allow"
CALLERS = ("src",)  # never tests/ or bench/: a test or a benchmark calling it is not a caller
CHECKED = "src/"
# What "public function or method" covers: properties are methods with a promise too
# (the seed's ImpactEntry.stale), and an unused class is an uncalled constructor.
KINDS = frozenset({"function", "method", "property", "class"})
# Registered by a decorator, so the decorator is the caller: click commands and groups
# (reached through `sakur4 …`), store migrations (the @migration list runs them in order).
REGISTERING_DECORATORS = ["@*.command", "@*.group", "@migration"]


class _NoExportCredit(Vulture):
    """Vulture, except that naming a function in ``__all__`` is not using it."""

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return
        super().visit_Assign(node)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the repository root
    line: int
    kind: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.path}:{self.name}"


def load_allow_list(text: str) -> dict[str, str]:
    """``path:name  reason`` per line; ``#`` starts a comment line. A reason is required."""
    allowed: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, reason = line.partition(" ")
        if ":" not in key or not reason.strip():
            raise SystemExit(f"{ALLOW_FILE.name}:{n}: need 'path:name  reason', got {raw!r}")
        allowed[key] = reason.strip()
    return allowed


def scanned_files(root: Path) -> list[str]:
    """The tracked Python files of src/: what CI's clone holds, so a local run
    agrees with CI and an engineer's uncommitted work does not fail everyone's check."""
    try:
        out = subprocess.run(  # noqa: S603 - fixed arguments
            ["git", "ls-files", "--", *(f"{d}/*.py" for d in CALLERS)],  # noqa: S607
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: take the tree
        return [str(p) for d in CALLERS for p in sorted((root / d).rglob("*.py"))]
    return [str(root / p) for p in out.splitlines() if (root / p).exists()]


def unused_in_src(root: Path) -> list[Finding]:
    v = _NoExportCredit(ignore_decorators=REGISTERING_DECORATORS)
    v.scavenge(scanned_files(root))
    found = []
    for item in v.get_unused_code(min_confidence=0):
        if item.typ not in KINDS:
            continue
        rel = Path(item.filename).resolve().relative_to(root).as_posix()
        if rel.startswith(CHECKED):
            found.append(Finding(rel, item.first_lineno, item.typ, item.name))
    return sorted(found, key=lambda f: (f.path, f.line))


def main() -> int:
    allowed = load_allow_list(ALLOW_FILE.read_text(encoding="utf-8"))
    found = unused_in_src(ROOT)
    uncalled = [f for f in found if f.key not in allowed]
    stale = sorted(set(allowed) - {f.key for f in found})
    for f in uncalled:
        print(f"{f.path}:{f.line}: {f.kind} {f.name!r} is not called from src/")
    for key in stale:
        print(f"{ALLOW_FILE.name}: {key} is allowed but no longer unused: remove the entry")
    if uncalled or stale:
        print(
            f"{len(uncalled)} uncalled, {len(stale)} stale allow-list entries. Call it from "
            f"the code that needs it, move it to bench/ if only a benchmark uses it, delete "
            f"it, or (entry points, protocol methods only) "
            f"add 'path:name  reason' to scripts/{ALLOW_FILE.name}."
        )
        return 1
    print(f"every public function in src/ has a caller ({len(allowed)} allowed, with reasons)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
