"""Which files of a project the Ledger indexes, and why the others are skipped.

Skips are counted by reason, never silent: ``vendored`` (dependency, build,
VCS and cache directories, pruned whole), ``gitignored`` (``.gitignore`` files
at any depth and ``.git/info/exclude``; an ignored directory is pruned whole, as
git does), ``no-grammar``, ``oversized``, ``symlink`` (a link whose target is
inside the project: the target is indexed at its own path), ``symlink-outside``
(refused: it leads out of the project), ``special`` (sockets, fifos…) and
``unreadable``. ``binary`` is decided later, when the file's bytes are read.

A walk is bounded (:class:`WalkLimits`): past so many source files, or so many
bytes of them, it stops and raises :class:`~sakur4.errors.LedgerError` naming the
limit, before anything is read or written — a tree that big is not one project.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pathspec

from sakur4.errors import LedgerError, PathOutsideProject
from sakur4.parsers import language_for_path
from sakur4.settings import Settings
from sakur4.store.projects import Project, resolve_inside

# Directory names never descended into: other people's code, build output, VCS
# metadata and caches. Matching is on the name, at any depth.
VENDORED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        "bower_components",
        "vendor",
        "third_party",
        "site-packages",
        ".next",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".cache",
        ".idea",
        ".vscode",
    }
)

# Build output, unless it is a Python package that happens to have the name
# (pip/_internal/operations/build).
OUTPUT_DIRS = frozenset({"build", "dist", "out", "target"})

# Bigger source files are nearly always generated (tables, bundles, fixtures).
MAX_FILE_BYTES = 1024 * 1024


# A walk's defaults (Settings.max_index_files / _bytes): the largest tree measured,
# site-packages, is 6,151 files and 56.8 MB (docs/design/ledger.md).
MAX_INDEX_FILES = 50_000
MAX_INDEX_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class WalkLimits:
    """How many source files, and bytes of them, one walk may find."""

    files: int = MAX_INDEX_FILES
    bytes: int = MAX_INDEX_BYTES

    @classmethod
    def of(cls, settings: Settings) -> WalkLimits:
        return cls(settings.max_index_files, settings.max_index_bytes)

    def refuse(self, start: Path, what: str) -> LedgerError:
        return LedgerError(
            f"refusing to index {start}: it holds more than {what} "
            "(SAKUR4_MAX_INDEX_FILES / SAKUR4_MAX_INDEX_BYTES); index a directory "
            "inside it, or raise the limit"
        )


class FoundFile(NamedTuple):
    """A file to index. A tuple, not a dataclass: one is built for every source
    file on every re-index walk (measured: a fifth of the walk's CPU)."""

    rel: str  # POSIX path relative to the project root
    abspath: str
    size: int
    mtime_ns: int
    language: str


@dataclass
class Discovery:
    files: list[FoundFile] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class _Rules:
    base: str  # "" for the root, else "dir/sub/" (the .gitignore's directory)
    spec: pathspec.GitIgnoreSpec


def _read_rules(path: Path, base: str) -> _Rules | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    return _Rules(base, spec) if len(spec) else None


def _ignored(rules: list[_Rules], rel: str, is_dir: bool) -> bool:
    """git's answer: the deepest .gitignore with a matching pattern decides."""
    for r in reversed(rules):
        if not rel.startswith(r.base):
            continue
        sub = rel[len(r.base) :] + ("/" if is_dir else "")
        verdict = r.spec.check_file(sub).include
        if verdict is not None:
            return verdict
    return False


def discover(
    project: Project,
    start: Path,
    max_file_bytes: int = MAX_FILE_BYTES,
    limits: WalkLimits | None = None,
) -> Discovery:
    """Every indexable file under ``start`` (a resolved path inside the project root);
    LedgerError past ``limits``."""
    root = project.root.resolve()
    found = Discovery()
    rules: list[_Rules] = []
    for path, base in ((root / ".git" / "info" / "exclude", ""), (root / ".gitignore", "")):
        r = _read_rules(path, base)
        if r:
            rules.append(r)

    # Between the root and the start: the ancestors' own .gitignore files and
    # skip rules apply to the start too (indexing `build/` directly is still
    # indexing a build directory).
    rel_start = start.relative_to(root).as_posix() if start != root else ""
    parts = rel_start.split("/") if rel_start else []
    for i, name in enumerate(parts):
        here = "/".join(parts[: i + 1])
        is_dir = i < len(parts) - 1 or start.is_dir()
        if is_dir and (
            name in VENDORED_DIRS
            or (name in OUTPUT_DIRS and not (root / here / "__init__.py").exists())
        ):
            found.skipped["vendored"] += 1
            return found
        if _ignored(rules, here, is_dir):
            found.skipped["gitignored"] += 1
            return found
        if is_dir and i < len(parts) - 1:
            r = _read_rules(root / here / ".gitignore", here + "/")
            if r:
                rules.append(r)

    if not start.exists():
        return found  # a path that was deleted: its facts get tombstones
    if start.is_file():
        _consider_file(start, rel_start, found, max_file_bytes)
        return found
    _walk(project, start, rel_start, rules, found, max_file_bytes, limits or WalkLimits())
    found.files.sort(key=lambda f: f.rel)
    return found


def _walk(
    project: Project,
    start: Path,
    rel_start: str,
    rules: list[_Rules],
    found: Discovery,
    max_file_bytes: int,
    limits: WalkLimits,
) -> None:
    # Depth-first with an explicit stack; each directory carries the rules in
    # force for it (its ancestors' .gitignore files plus its own). This loop is
    # the floor of every re-index (it runs over the whole tree to find what
    # changed), so it asks the OS as little as it can: one scandir per
    # directory, one lstat per candidate file, nothing for the rest.
    skipped = found.skipped
    files = found.files
    size = 0
    pending: list[tuple[str, str, list[_Rules]]] = [(str(start), rel_start, rules)]
    while pending:
        dirpath, rel_dir, in_force = pending.pop()
        prefix = rel_dir + "/" if rel_dir else ""
        try:
            with os.scandir(dirpath) as it:
                entries = list(it)
        except OSError:
            skipped["unreadable"] += 1
            continue
        if rel_dir and any(e.name == ".gitignore" for e in entries):
            own = _read_rules(Path(dirpath) / ".gitignore", prefix)
            if own:
                in_force = [*in_force, own]
        for entry in entries:
            name = entry.name
            try:
                if entry.is_symlink():
                    try:
                        resolve_inside(project, entry.path)
                        skipped["symlink"] += 1
                    except PathOutsideProject:
                        skipped["symlink-outside"] += 1
                    continue
                if entry.is_dir(follow_symlinks=False):
                    rel = prefix + name
                    if _generated_dir(entry):
                        skipped["vendored"] += 1
                    elif in_force and _ignored(in_force, rel, True):
                        skipped["gitignored"] += 1
                    else:
                        pending.append((entry.path, rel, in_force))
                    continue
                spec = language_for_path(name)
                if spec is None:
                    skipped[
                        "no-grammar" if entry.is_file(follow_symlinks=False) else "special"
                    ] += 1
                    continue
                if not entry.is_file(follow_symlinks=False):
                    skipped["special"] += 1
                    continue
                rel = prefix + name
                if in_force and _ignored(in_force, rel, False):
                    skipped["gitignored"] += 1
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                skipped["unreadable"] += 1
                continue
            if st.st_size > max_file_bytes:
                skipped["oversized"] += 1
                continue
            files.append(FoundFile(rel, entry.path, st.st_size, st.st_mtime_ns, spec.name))
            size += st.st_size
            if len(files) > limits.files:
                raise limits.refuse(start, f"{limits.files:,} source files")
            if size > limits.bytes:
                raise limits.refuse(start, f"{limits.bytes:,} bytes of source files")


def _generated_dir(entry: os.DirEntry[str]) -> bool:
    """A dependency, VCS, cache or build-output directory (see VENDORED_DIRS)."""
    if entry.name in VENDORED_DIRS:
        return True
    # "build" or "dist" can also be a real Python package (pip has one).
    return entry.name in OUTPUT_DIRS and not os.path.exists(os.path.join(entry.path, "__init__.py"))


def _consider_file(path: Path, rel: str, found: Discovery, max_file_bytes: int) -> None:
    spec = language_for_path(path.name)
    if spec is None:
        found.skipped["no-grammar"] += 1
        return
    try:
        st = path.stat()
    except OSError:
        found.skipped["unreadable"] += 1
        return
    if st.st_size > max_file_bytes:
        found.skipped["oversized"] += 1
        return
    found.files.append(FoundFile(rel, str(path), st.st_size, st.st_mtime_ns, spec.name))
