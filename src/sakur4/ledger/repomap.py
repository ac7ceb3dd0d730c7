"""The repo map: files and their most important symbols, cut to a token budget.

Importance is PageRank over the reference graph of current facts (nodes are
definitions, plus one node per file for its top-level code; an edge goes from
the symbol whose body uses a name to the definitions that name resolves to).
Personalised by ``focus``: the random surfer restarts at the focused symbols or
files 90% of the time, so what they use and what uses them rises.

Tokens are estimated as ``ceil(len(text) / 4)`` unless the caller passes a
counter (the gateway has the server's tokenizer); the rendered text never
exceeds the budget by the counter given.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from sakur4.errors import InputError
from sakur4.ledger.facts import Resolver, current_facts
from sakur4.parsers import language_for_path, module_name
from sakur4.store.db import Store
from sakur4.vocabulary import Fact, estimate_tokens

# numpy is imported where a graph is ranked: `sakur4 index FILE` never needs it, and
# it was 0.1 s of that command's start-up (issue 17).
if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector: TypeAlias = npt.NDArray[np.float64]

TokenCounter = Callable[[str], int]

DAMPING = 0.85
FOCUS_SHARE = 0.9
# A name defined in more files than this (``get``, ``run``, ``__init__``) says
# little about which definition is meant: its edges count a tenth.
COMMON_NAME_DEFS = 5
# A reference that could mean more definitions than this carries no signal
# (``x.get()`` with sixty ``get`` methods in the project): it adds no edge.
MAX_FANOUT = 20
MAX_SIGNATURE_CHARS = 160
# Once this many symbols in a row do not fit, the map is as full as it gets.
GIVE_UP_AFTER = 50


@dataclass(frozen=True)
class MapEntry:
    path: str
    qualified_name: str
    kind: str
    start_line: int | None
    signature: str
    rank: float


@dataclass(frozen=True)
class RepoMap:
    text: str
    tokens: int  # of ``text``, by the counter used
    budget_tokens: int
    files_shown: int
    symbols_shown: int
    symbols_total: int
    focus_unmatched: tuple[str, ...] = ()
    entries: tuple[MapEntry, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pagerank(
    n: int, src: npt.NDArray[np.int64], dst: npt.NDArray[np.int64], w: Vector, restart: Vector
) -> Vector:
    import numpy as np

    out_w = np.bincount(src, weights=w, minlength=n)
    share = w / np.where(out_w[src] > 0, out_w[src], 1.0)
    dangling = out_w == 0
    rank = restart.copy()
    for _ in range(100):
        flow = np.bincount(dst, weights=rank[src] * share, minlength=n).astype(np.float64)
        new: Vector = DAMPING * (flow + rank[dangling].sum() * restart) + (1 - DAMPING) * restart
        if float(np.abs(new - rank).sum()) < 1e-10:
            return new
        rank = new
    return rank


def _focus_matches(term: str, fact: Fact) -> bool:
    t = term.rstrip("/")
    return (
        fact.qualified_name == t
        or fact.name == t
        or fact.qualified_name.endswith("." + t)
        or fact.path == t
        or fact.path.startswith(t + "/")
    )


@dataclass(frozen=True)
class _Graph:
    facts: list[Fact]
    file_node: dict[str, int]  # path -> node of the file's top-level code
    src: npt.NDArray[np.int64]
    dst: npt.NDArray[np.int64]
    weight: Vector


# Building the graph is most of a map's cost (seconds on a 1,800-file tree);
# a long-lived server asks for maps with other budgets and focuses of the same
# Ledger state, so the last few graphs are kept, keyed by that state.
_GRAPHS: OrderedDict[tuple[str, int, tuple[Any, ...]], _Graph] = OrderedDict()
_GRAPHS_KEPT = 4
_graphs_lock = threading.Lock()


def _ledger_version(store: Store, project_id: int) -> tuple[Any, ...]:
    """Changes whenever indexing writes anything for the project: every write
    appends a fact or re-stamps a file's ``last_indexed``."""
    row = store.query(
        "SELECT (SELECT max(id) FROM symbolic_fact WHERE project_id = ?), "
        "max(last_indexed), count(*), sum(deleted) FROM repo_file WHERE project_id = ?",
        (project_id, project_id),
    )[0]
    return tuple(row)


def _graph(store: Store, project_id: int) -> _Graph:
    key = (str(store.path), project_id, _ledger_version(store, project_id))
    with _graphs_lock:
        cached = _GRAPHS.get(key)
        if cached is not None:
            _GRAPHS.move_to_end(key)
            return cached
    graph = _build_graph(store, project_id)
    with _graphs_lock:
        _GRAPHS[key] = graph
        while len(_GRAPHS) > _GRAPHS_KEPT:
            _GRAPHS.popitem(last=False)
    return graph


def _build_graph(store: Store, project_id: int) -> _Graph:
    import numpy as np

    facts = current_facts(store, project_id)
    index = {(f.path, f.qualified_name): i for i, f in enumerate(facts)}
    by_name: dict[str, list[Fact]] = defaultdict(list)
    for f in facts:
        by_name[f.name].append(f)
    files = sorted({f.path for f in facts})
    file_node = {p: len(facts) + i for i, p in enumerate(files)}
    rows = store.query(
        "SELECT path, from_name, to_name, kind, sum(uses) FROM symbol_ref WHERE project_id = ? "
        "GROUP BY path, from_name, to_name, kind",
        (project_id,),
    )
    imports: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r[3] == "import":
            imports[r[0]].add(r[2])
    resolver = Resolver(by_name, imports)
    spread = {name: len({d.path for d in defs}) for name, defs in by_name.items()}
    src: list[int] = []
    dst: list[int] = []
    weight: list[float] = []
    for path, from_name, to_name, kind, count in rows:
        meant = resolver.meant(path, to_name, kind)
        if not meant or len(meant) > MAX_FANOUT:
            continue  # outside the project, or too ambiguous to say anything
        origin = index.get((path, from_name))
        if origin is None:
            origin = file_node.get(path)
            if origin is None:
                origin = file_node[path] = len(facts) + len(file_node)
        w = math.sqrt(count) / len(meant)
        if spread[to_name] > COMMON_NAME_DEFS:
            w *= 0.1
        for d in meant:
            target = index[(d.path, d.qualified_name)]
            if target != origin:
                src.append(origin)
                dst.append(target)
                weight.append(w)
    return _Graph(
        facts,
        file_node,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        np.asarray(weight, dtype=np.float64),
    )


def _rank_facts(
    store: Store, project_id: int, focus: Sequence[str] = ()
) -> tuple[list[Fact], Vector, tuple[str, ...]]:
    """Current facts with their PageRank, and the focus terms that matched nothing."""
    import numpy as np

    g = _graph(store, project_id)
    facts, file_node = g.facts, g.file_node
    n = len(facts) + len(file_node)
    restart = np.full(n, 1.0 / n) if n else np.zeros(0)
    unmatched: list[str] = []
    if focus and n:
        hit = np.zeros(n)
        for term in focus:
            found = [i for i, f in enumerate(facts) if _focus_matches(term, f)]
            prefix = term.rstrip("/")
            found += [
                node
                for path, node in file_node.items()
                if path == prefix or path.startswith(prefix + "/")
            ]
            if not found:
                unmatched.append(term)
            hit[found] = 1.0
        if hit.sum():
            restart = (1 - FOCUS_SHARE) * restart + FOCUS_SHARE * hit / hit.sum()
    ranks = _pagerank(n, g.src, g.dst, g.weight, restart)
    return facts, ranks[: len(facts)], tuple(unmatched)


def _line(fact: Fact) -> str:
    spec = language_for_path(fact.path)
    module = module_name(fact.path, spec)
    inner = fact.qualified_name.removeprefix(module + ".")
    depth = inner.count(".") if inner != fact.qualified_name else 0
    sig = " ".join(fact.signature.split()) or fact.qualified_name
    if len(sig) > MAX_SIGNATURE_CHARS:
        sig = sig[: MAX_SIGNATURE_CHARS - 1] + "…"
    return f"{'  ' * (depth + 1)}{fact.start_line}: {sig}\n"


def _render(chosen: list[tuple[Fact, float]]) -> str:
    by_file: dict[str, list[tuple[Fact, float]]] = {}
    for fact, rank in chosen:  # chosen is in rank order: files appear by best rank
        by_file.setdefault(fact.path, []).append((fact, rank))
    parts = []
    for path, items in by_file.items():
        parts.append(f"{path}\n")
        parts.extend(_line(f) for f, _ in sorted(items, key=lambda x: x[0].start_line or 0))
    return "".join(parts)


def repo_map(
    store: Store,
    project_id: int,
    budget_tokens: int,
    focus: Sequence[str] = (),
    token_counter: TokenCounter | None = None,
) -> RepoMap:
    """The project's files and key symbols, best first, in at most ``budget_tokens``."""
    if budget_tokens <= 0:
        raise InputError(f"the repo map budget must be a positive token count, not {budget_tokens}")
    count = token_counter or estimate_tokens
    facts, ranks, unmatched = _rank_facts(store, project_id, focus)
    order = sorted(
        range(len(facts)), key=lambda i: (-ranks[i], facts[i].path, facts[i].start_line or 0)
    )
    chosen: list[tuple[Fact, float]] = []
    files: set[str] = set()
    used = 0
    misses = 0
    for i in order:
        f = facts[i]
        cost = count(_line(f)) + (0 if f.path in files else count(f"{f.path}\n"))
        if used + cost > budget_tokens:
            misses += 1
            if misses >= GIVE_UP_AFTER:
                break
            continue
        misses = 0
        used += cost
        files.add(f.path)
        chosen.append((f, float(ranks[i])))
    text = _render(chosen)
    # A counter need not be additive over pieces: check the whole, drop the
    # lowest-ranked symbol until it fits.
    while chosen and count(text) > budget_tokens:
        chosen.pop()
        text = _render(chosen)
    return RepoMap(
        text=text,
        tokens=count(text),
        budget_tokens=budget_tokens,
        files_shown=len({f.path for f, _ in chosen}),
        symbols_shown=len(chosen),
        symbols_total=len(facts),
        focus_unmatched=unmatched,
        entries=tuple(
            MapEntry(f.path, f.qualified_name, f.kind, f.start_line, f.signature, round(r, 8))
            for f, r in chosen
        ),
    )
