"""Reading the Ledger: the current fact of a key, a key's history, symbols by name.

A fact's key is (project, path, qualified name); "current" is the newest row
of a key. A current row that is a tombstone means the symbol is gone.
"""

from __future__ import annotations

import posixpath
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Literal

from sakur4.parsers import language_for_path
from sakur4.store.db import Store
from sakur4.vocabulary import Fact

# Not the generated ``name`` column: computing it in SQL costs more than the rest of
# the row (0.55 of 1.15 s for a project's 77k current facts); bare_name is its rule.
_COLUMNS = (
    "id, path, qualified_name, kind, language, signature, start_line, end_line, "
    "symbol_hash, file_hash, tombstone, indexed_at"
)
# The newest row of each key, for a WHERE on the outer row ``f``.
_IS_CURRENT = (
    "f.id = (SELECT max(g.id) FROM symbolic_fact g WHERE g.project_id = f.project_id "
    "AND g.path = f.path AND g.qualified_name = f.qualified_name)"
)

Key = tuple[str, str]  # (path, qualified_name) within one project


def bare_name(qualified_name: str) -> str:
    """The text after the last '.', cut at the '~' that numbers a second definition of
    one qualified name in one file ("mod.f~2" -> "f"): the generated column
    ``symbolic_fact.name`` (migration m003), by the same rule."""
    return qualified_name.rsplit(".", 1)[-1].split("~", 1)[0]


def _fact(r: sqlite3.Row) -> Fact:
    # Positional: _COLUMNS order. Faster than by-name access over a whole project.
    return Fact(
        int(r[0]),
        r[1],
        r[2],
        bare_name(r[2]),
        r[3],
        r[4],
        r[5],
        r[6],
        r[7],
        r[8],
        r[9],
        bool(r[10]),
        r[11],
    )


AnchorStatus = Literal["current", "stale", "removed"]


def anchor_status(anchor_hash: str, fact: Fact | None) -> AnchorStatus:
    """The verdict for something anchored to a symbol at ``anchor_hash`` (an Atlas
    entry), given the key's current fact. The Atlas labels its reads by it and impact
    analysis marks its entries by it: one rule, so the two never disagree."""
    if fact is None or fact.tombstone:
        return "removed"
    return "current" if fact.symbol_hash == anchor_hash else "stale"


def current_fact(store: Store, project_id: int, path: str, qualified_name: str) -> Fact | None:
    """The newest fact of one key — a tombstone if the symbol was removed — or None
    if the key was never indexed. The Atlas resolves its anchors with this."""
    rows = store.query(
        f"SELECT {_COLUMNS} FROM symbolic_fact WHERE project_id = ? AND path = ? "
        "AND qualified_name = ? ORDER BY id DESC LIMIT 1",
        (project_id, path, qualified_name),
    )
    return _fact(rows[0]) if rows else None


def fact_history(store: Store, project_id: int, path: str, qualified_name: str) -> list[Fact]:
    """Every fact ever written for one key, oldest first (append-only: nothing is lost)."""
    rows = store.query(
        f"SELECT {_COLUMNS} FROM symbolic_fact WHERE project_id = ? AND path = ? "
        "AND qualified_name = ? ORDER BY id",
        (project_id, path, qualified_name),
    )
    return [_fact(r) for r in rows]


def find_symbols(store: Store, project_id: int, name: str) -> list[Fact]:
    """Current, live symbols called ``name``: a qualified name (``pkg.mod.Class.method``),
    a dotted tail of one (``Class.method``), or a bare name (``method``)."""
    exact = store.query(
        f"SELECT {_COLUMNS} FROM symbolic_fact f WHERE f.project_id = ? "
        f"AND f.qualified_name = ? AND {_IS_CURRENT} AND f.tombstone = 0 "
        "ORDER BY f.path, f.start_line",
        (project_id, name),
    )
    if exact:
        return [_fact(r) for r in exact]
    rows = [_fact(r) for r in _by_bare_names(store, project_id, [bare_name(name)])]
    if "." in name or "~" in name:
        rows = [f for f in rows if f.qualified_name.endswith("." + name)]
    return rows


def _by_bare_names(store: Store, project_id: int, names: list[str]) -> list[sqlite3.Row]:
    marks = ",".join("?" * len(names))
    return store.query(
        f"SELECT {_COLUMNS} FROM symbolic_fact f WHERE f.project_id = ? AND f.name IN ({marks}) "
        f"AND {_IS_CURRENT} AND f.tombstone = 0 ORDER BY f.path, f.start_line",
        (project_id, *names),
    )


def definitions_named(store: Store, project_id: int, names: list[str]) -> dict[str, list[Fact]]:
    """Current live definitions for each bare name (how references are resolved)."""
    out: dict[str, list[Fact]] = {n: [] for n in names}
    for i in range(0, len(names), 500):
        for r in _by_bare_names(store, project_id, names[i : i + 500]):
            fact = _fact(r)
            out[fact.name].append(fact)
    return out


def newest_facts(store: Store, project_id: int, keys: Sequence[Key]) -> dict[Key, Fact]:
    """The newest fact (tombstones included) of each key that has one, in one query
    per few hundred paths rather than one per key."""
    wanted = set(keys)
    by_path = newest_facts_by_path(store, project_id, sorted({p for p, _ in wanted}))
    return {
        (path, qname): fact
        for path, facts in by_path.items()
        for qname, fact in facts.items()
        if (path, qname) in wanted
    }


def newest_facts_by_path(
    store: Store, project_id: int, paths: Iterable[str]
) -> dict[str, dict[str, Fact]]:
    """The newest fact (tombstones included) of every key in each of ``paths``: by
    path, then qualified name. The indexer compares what it parsed against these,
    inside its write transaction (the store's one connection)."""
    out: dict[str, dict[str, Fact]] = {}
    unique = list(dict.fromkeys(paths))
    for i in range(0, len(unique), 400):
        chunk = unique[i : i + 400]
        marks = ",".join("?" * len(chunk))
        rows = store.query(
            f"SELECT {_COLUMNS} FROM symbolic_fact WHERE id IN ("
            f"  SELECT max(id) FROM symbolic_fact WHERE project_id = ? AND path IN ({marks}) "
            "  GROUP BY path, qualified_name)",
            (project_id, *chunk),
        )
        for r in rows:
            out.setdefault(r[1], {})[r[2]] = _fact(r)
    return out


def current_facts(store: Store, project_id: int) -> list[Fact]:
    """Every current, live fact of a project."""
    rows = store.query(
        f"SELECT {_COLUMNS} FROM symbolic_fact WHERE id IN ("
        "  SELECT max(id) FROM symbolic_fact WHERE project_id = ? "
        "  GROUP BY path, qualified_name) AND tombstone = 0 ORDER BY path, start_line",
        (project_id,),
    )
    return [_fact(r) for r in rows]


def indexed_file_count(store: Store, project_id: int) -> int:
    rows = store.query(
        "SELECT count(*) FROM repo_file WHERE project_id = ? AND deleted = 0", (project_id,)
    )
    return int(rows[0][0])


class Resolver:
    """Which definitions a reference can mean, decided when read.

    ``symbol_ref`` keeps the bare name a reference uses; resolving it against the
    facts current at read time means re-indexing one file never leaves another
    file's resolution stale. For a reference from file F to name N:

    1. definitions of N in F win (local scope);
    2. an import, or a name reached through something (``x.N``, ``pkg.N``,
       ``T::N``: kind ``member-*``), may mean any definition of N;
    3. a bare N that F imports may mean any definition of N;
    4. a bare N in a language whose directory is a scope (Go) means the
       definitions of N in F's directory;
    5. otherwise N is a builtin, a star import or not in the project: nothing.

    A reference is *resolved* when exactly one definition remains."""

    def __init__(self, definitions: dict[str, list[Fact]], imports: dict[str, set[str]]) -> None:
        self._defs = definitions  # bare name -> current live definitions
        self._imports = imports  # path -> bare names that file imports
        self._local: dict[str, dict[str, list[Fact]]] = {}

    def meant(self, ref_path: str, to_name: str, kind: str) -> list[Fact]:
        defs = self._defs.get(to_name)
        if not defs:
            return []
        local = self._local.get(to_name)
        if local is None:
            local = {}
            for d in defs:
                local.setdefault(d.path, []).append(d)
            self._local[to_name] = local
        if ref_path in local:
            return local[ref_path]
        if kind == "import" or kind.startswith("member-"):
            return defs
        if to_name in self._imports.get(ref_path, ()):
            return defs
        spec = language_for_path(ref_path)
        if spec is not None and spec.directory_is_scope:
            here = posixpath.dirname(ref_path)
            return [d for d in defs if posixpath.dirname(d.path) == here]
        return []


def imported_names(store: Store, project_id: int, paths: Sequence[str]) -> dict[str, set[str]]:
    """The bare names each of ``paths`` imports (from its ``import`` references)."""
    out: dict[str, set[str]] = {}
    unique = sorted(set(paths))
    for i in range(0, len(unique), 400):
        chunk = unique[i : i + 400]
        marks = ",".join("?" * len(chunk))
        for r in store.query(
            "SELECT DISTINCT path, to_name FROM symbol_ref WHERE project_id = ? "
            f"AND kind = 'import' AND path IN ({marks})",
            (project_id, *chunk),
        ):
            out.setdefault(r[0], set()).add(r[1])
    return out
