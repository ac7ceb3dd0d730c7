"""A source tree that changes between runs and remembers every version it wrote.

The crash harness indexes it, kills the indexer, changes it and indexes again.
To check the Ledger after a kill it needs the bytes behind every content hash a
``repo_file`` row can name: this class keeps them (hash → bytes), and parses a
version on demand to say which symbols the Ledger must hold for it.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

from sakur4.parsers import language_for_path, parse_source

# A symbol as the Ledger stores it: (qualified name, kind, signature, start, end, hash).
SymbolKey = tuple[str, str, str, int | None, int | None, str]

EXTENSIONS = (".py", ".js", ".ts", ".go", ".rs")
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "store",
    "parse",
    "token",
    "cache",
    "prompt",
    "slot",
    "tier",
    "fold",
]


def content_hash(data: bytes) -> str:
    """The Ledger's content hash (ledger/index.py: blake2b, 16 bytes)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _functions(rng: random.Random, ext: str, count: int, salt: int) -> list[str]:
    out = []
    for i in range(count):
        name = f"{rng.choice(WORDS)}_{i}"
        k = rng.randrange(1000) + salt
        if ext == ".py":
            out.append(f"def {name}(x, y={k}):\n    return helper_{i % 3}(x) + y\n")
            if rng.random() < 0.3:
                out.append(f"class Box{i}:\n    def get(self):\n        return {k}\n")
        elif ext in (".js", ".ts"):
            typed = ": number" if ext == ".ts" else ""
            out.append(f"function {name}(x{typed}) {{\n  return helper{i % 3}(x) + {k};\n}}\n")
            if rng.random() < 0.3:
                out.append(f"class Box{i} {{\n  get() {{ return {k}; }}\n}}\n")
        elif ext == ".go":
            out.append(f"func {name}(x int) int {{\n\treturn helper{i % 3}(x) + {k}\n}}\n")
        else:
            out.append(f"fn {name}(x: i64) -> i64 {{\n    helper{i % 3}(x) + {k}\n}}\n")
    return out


def render(rng: random.Random, ext: str, salt: int) -> bytes:
    """One source file in the language of ``ext``: a few functions, sometimes a class,
    sometimes a syntax error (tree-sitter recovers; the Ledger still indexes it)."""
    head = {".go": "package sample\n\n", ".py": '"""generated"""\n\n'}.get(ext, "")
    body = "\n".join(_functions(rng, ext, rng.randrange(2, 12), salt))
    if rng.random() < 0.05:
        body += "\n(((( this is not valid code\n"
    return (head + body).encode()


@dataclass
class ProjectFiles:
    """The tree under ``root``; ``versions`` maps every content hash ever written to its bytes."""

    root: Path
    rng: random.Random
    versions: dict[str, bytes] = field(default_factory=dict)
    _expected: dict[tuple[str, str], frozenset[SymbolKey]] = field(default_factory=dict)
    _salt: int = 0

    def _write(self, rel: str) -> None:
        ext = "." + rel.rsplit(".", 1)[1]
        self._salt += 1
        data = render(self.rng, ext, self._salt)
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        self.versions[content_hash(data)] = data

    def files(self) -> list[str]:
        return sorted(
            p.relative_to(self.root).as_posix()
            for p in self.root.rglob("*")
            if p.is_file() and p.suffix in EXTENSIONS
        )

    def populate(self, count: int) -> None:
        for i in range(count):
            self._write(f"pkg{i % 7}/mod{i}{EXTENSIONS[i % len(EXTENSIONS)]}")

    def mutate(self, fraction: float) -> int:
        """Rewrite about ``fraction`` of the files, delete and add a few; return the count."""
        current = self.files()
        changed = 0
        for rel in current:
            roll = self.rng.random()
            if roll < fraction * 0.05:
                (self.root / rel).unlink()
                changed += 1
            elif roll < fraction:
                self._write(rel)
                changed += 1
        for _ in range(self.rng.randrange(0, 4)):
            n = self.rng.randrange(10**6)
            self._write(f"new{n % 5}/file{n}{self.rng.choice(EXTENSIONS)}")
            changed += 1
        return changed

    def snapshot(self) -> dict[str, str]:
        """The tree as it is now: path → content hash."""
        return {rel: content_hash((self.root / rel).read_bytes()) for rel in self.files()}

    def expected_symbols(self, rel: str, digest: str) -> frozenset[SymbolKey] | None:
        """The symbols the Ledger must hold for ``rel`` at version ``digest`` (None: a
        version this tree never wrote)."""
        key = (rel, digest)
        if key not in self._expected:
            data = self.versions.get(digest)
            if data is None:
                return None
            spec = language_for_path(rel)
            parsed = parse_source(data, rel, spec)
            self._expected[key] = frozenset(
                (s.qualified_name, s.kind, s.signature, s.start_line, s.end_line, s.symbol_hash)
                for s in parsed.symbols
            )
        return self._expected[key]
