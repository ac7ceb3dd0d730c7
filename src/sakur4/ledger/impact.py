"""Impact: what references a symbol, transitively, and which of it the Atlas has wrong.

Breadth-first over ``symbol_ref`` from the symbol asked about: depth 1 is what
references it, depth 2 what references those, and so on. A reference from a
file's top-level code is an entry of kind ``module`` and is not followed further
(nothing calls a module body by name).

``stale``: the newest Semantic Atlas entry anchored to the entry's symbol was
written against a different ``symbol_hash`` than the current fact's ("changed"),
or the symbol's current fact is a tombstone or missing ("removed"). An entry
with no Atlas summary is not stale: there is nothing to be wrong.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sakur4.errors import InputError, NotFound
from sakur4.ledger.facts import (
    Key,
    Resolver,
    anchor_status,
    definitions_named,
    find_symbols,
    imported_names,
    indexed_file_count,
    newest_facts,
)
from sakur4.store.db import Store
from sakur4.vocabulary import Fact

MAX_DEPTH = 10
DEFAULT_LIMIT = 500


@dataclass(frozen=True)
class ImpactEntry:
    depth: int  # 0: the symbol asked about
    path: str
    qualified_name: str  # the referencing symbol, or the module for top-level code
    kind: str  # the symbol's kind; "module" for top-level code
    via: str  # the name it references ("" at depth 0)
    ref_kind: str  # call, import, class, type, implementation ("" at depth 0)
    line: int | None  # of the reference (of the definition at depth 0)
    resolved: bool  # the name can only mean the symbol it was followed to
    stale: bool
    stale_reason: str | None  # "changed" or "removed"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Impact:
    name: str
    depth: int
    entries: tuple[ImpactEntry, ...]
    truncated: bool  # more entries existed than the limit

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "depth": self.depth,
            "truncated": self.truncated,
            "entries": [e.as_dict() for e in self.entries],
        }


@dataclass(frozen=True)
class _Hit:
    key: Key
    via: str
    ref_kind: str
    line: int
    resolved: bool


def _referrers(store: Store, project_id: int, frontier: dict[Key, Fact]) -> list[_Hit]:
    """Who references any symbol in ``frontier``, resolved by the rule in facts.resolve."""
    names = sorted({f.name for f in frontier.values()})
    marks = ",".join("?" * len(names))
    rows = store.query(
        "SELECT path, from_name, to_name, kind, min(line) AS line FROM symbol_ref "
        f"WHERE project_id = ? AND to_name IN ({marks}) "
        "GROUP BY path, from_name, to_name, kind ORDER BY path, line",
        (project_id, *names),
    )
    resolver = Resolver(
        definitions_named(store, project_id, names),
        imported_names(store, project_id, [r["path"] for r in rows]),
    )
    hits = []
    for r in rows:
        meant = resolver.meant(r["path"], r["to_name"], r["kind"])
        if not any((d.path, d.qualified_name) in frontier for d in meant):
            continue
        key = (r["path"], r["from_name"])
        if key in frontier:
            continue  # recursion
        hits.append(_Hit(key, r["to_name"], r["kind"], r["line"], len(meant) == 1))
    return hits


def staleness(store: Store, project_id: int, facts: dict[Key, Fact | None]) -> dict[Key, str]:
    """For each key with an Atlas entry, why its newest entry no longer matches the
    code: "changed" (hash differs) or "removed" (no live current fact). Keys whose
    entry matches, or that have none, are absent."""
    out: dict[Key, str] = {}
    paths = sorted({p for p, _ in facts})
    for i in range(0, len(paths), 400):
        chunk = paths[i : i + 400]
        marks = ",".join("?" * len(chunk))
        rows = store.query(
            "SELECT path, qualified_name, anchor_hash FROM semantic_atlas WHERE id IN ("
            "  SELECT max(id) FROM semantic_atlas WHERE project_id = ? "
            f"  AND path IN ({marks}) GROUP BY path, qualified_name)",
            (project_id, *chunk),
        )
        for r in rows:
            key = (r["path"], r["qualified_name"])
            if key not in facts:
                continue
            status = anchor_status(r["anchor_hash"], facts[key])
            if status != "current":
                out[key] = "removed" if status == "removed" else "changed"
    return out


def impact(
    store: Store, project_id: int, name: str, depth: int = 3, limit: int = DEFAULT_LIMIT
) -> Impact:
    """What references the symbol ``name`` (qualified, dotted tail, or bare), to ``depth``
    levels, each entry marked stale where its Atlas summary no longer matches."""
    if not 1 <= depth <= MAX_DEPTH:
        raise InputError(f"impact depth must be between 1 and {MAX_DEPTH}, not {depth}")
    targets = find_symbols(store, project_id, name)
    if not targets:
        files = indexed_file_count(store, project_id)
        hint = "" if files else " (nothing is indexed yet: run `sakur4 index`)"
        raise NotFound(f"no current symbol named {name!r} in this project{hint}")

    frontier: dict[Key, Fact] = {(f.path, f.qualified_name): f for f in targets}
    seen: set[Key] = set(frontier)
    found: list[tuple[int, _Hit | Fact]] = [(0, f) for f in targets]
    truncated = False
    for level in range(1, depth + 1):
        hits = [h for h in _referrers(store, project_id, frontier) if h.key not in seen]
        unique: dict[Key, _Hit] = {}
        for h in hits:
            unique.setdefault(h.key, h)
        if len(found) + len(unique) > limit:
            unique = dict(list(unique.items())[: max(0, limit - len(found))])
            truncated = True
        seen.update(unique)
        found.extend((level, h) for h in unique.values())
        known = newest_facts(store, project_id, list(unique))
        frontier = {k: f for k, f in known.items() if not f.tombstone}
        if truncated or not frontier:
            break

    keys = [(x.path, x.qualified_name) if isinstance(x, Fact) else x.key for _, x in found]
    facts: dict[Key, Fact | None] = dict.fromkeys(keys)
    facts.update(newest_facts(store, project_id, keys))
    stale = staleness(store, project_id, facts)
    entries = []
    for level, x in found:
        if isinstance(x, Fact):
            key = (x.path, x.qualified_name)
            entries.append(
                ImpactEntry(
                    depth=0,
                    path=x.path,
                    qualified_name=x.qualified_name,
                    kind=x.kind,
                    via="",
                    ref_kind="",
                    line=x.start_line,
                    resolved=True,
                    stale=key in stale,
                    stale_reason=stale.get(key),
                )
            )
            continue
        fact = facts.get(x.key)
        entries.append(
            ImpactEntry(
                depth=level,
                path=x.key[0],
                qualified_name=x.key[1],
                kind=fact.kind if fact else "module",
                via=x.via,
                ref_kind=x.ref_kind,
                line=x.line,
                resolved=x.resolved,
                stale=x.key in stale,
                stale_reason=stale.get(x.key),
            )
        )
    return Impact(name=name, depth=depth, entries=tuple(entries), truncated=truncated)
