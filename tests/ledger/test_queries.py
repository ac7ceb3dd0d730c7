"""Reading the Ledger: symbols by name, the repo map, impact with Atlas staleness."""

from __future__ import annotations

from pathlib import Path

import pytest

from sakur4.errors import InputError, NotFound
from sakur4.ledger import (
    current_fact,
    find_symbols,
    impact,
    index_project,
    repo_map,
    staleness,
)
from sakur4.store import Store
from sakur4.store.projects import Project
from sakur4.vocabulary import estimate_tokens


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


CHAIN = {
    "a.py": "def a():\n    return 1\n",
    "b.py": "from a import a\n\n\ndef b():\n    return a()\n",
    "c.py": "from b import b\n\n\ndef c():\n    return b()\n",
    "d.py": "from c import c\n\n\ndef d():\n    return c()\n",
}


def test_find_symbols_by_qualified_name_tail_or_bare_name(
    store: Store, project: Project, project_dir: Path
) -> None:
    write(
        project_dir,
        {"pkg/m.py": "class K:\n    def run(self):\n        pass\n\n\ndef run():\n    pass\n"},
    )
    index_project(store, project)
    assert [f.qualified_name for f in find_symbols(store, project.id, "pkg.m.K.run")] == [
        "pkg.m.K.run"
    ]
    assert [f.qualified_name for f in find_symbols(store, project.id, "K.run")] == ["pkg.m.K.run"]
    assert [f.qualified_name for f in find_symbols(store, project.id, "run")] == [
        "pkg.m.K.run",
        "pkg.m.run",
    ]
    assert find_symbols(store, project.id, "nope") == []


def _hub_project(root: Path) -> None:
    files = {
        # lonely comes first in the file: ties in rank would put it first.
        "core.py": "def lonely(y):\n    return y\n\n\ndef hub(x):\n    return x\n",
    }
    for i in range(6):
        files[f"user{i}.py"] = f"from core import hub\n\n\ndef use{i}():\n    return hub({i})\n"
    write(root, files)


def test_repo_map_ranks_a_referenced_symbol_above_an_unreferenced_one(
    store: Store, project: Project, project_dir: Path
) -> None:
    _hub_project(project_dir)
    index_project(store, project)
    m = repo_map(store, project.id, 1000)
    names = [e.qualified_name for e in m.entries]
    assert names[0] == "core.hub"
    assert names.index("core.hub") < names.index("core.lonely")
    assert m.text.startswith("core.py\n  1: def lonely(y):\n  5: def hub(x):\n")
    assert m.symbols_total == 8


@pytest.mark.parametrize("budget", [5, 12, 25, 40, 80, 1000])
def test_repo_map_never_exceeds_its_budget(
    store: Store, project: Project, project_dir: Path, budget: int
) -> None:
    _hub_project(project_dir)
    index_project(store, project)
    m = repo_map(store, project.id, budget)
    assert m.tokens == estimate_tokens(m.text) <= budget
    # A counter other than the estimate is honoured too (one token per word).
    words = repo_map(store, project.id, budget, token_counter=lambda t: len(t.split()))
    assert len(words.text.split()) <= budget

    # One that is not additive over lines (the whole costs more than its parts,
    # as a real tokenizer can): only the final whole-text check holds it.
    def coarse(t: str) -> int:
        return len(t) // 10

    assert coarse(repo_map(store, project.id, budget, token_counter=coarse).text) <= budget
    if budget >= 40:
        assert m.symbols_shown > 0


def test_repo_map_budget_cut_keeps_the_best_ranked(
    store: Store, project: Project, project_dir: Path
) -> None:
    _hub_project(project_dir)
    index_project(store, project)
    small = repo_map(store, project.id, 10)
    assert [e.qualified_name for e in small.entries] == ["core.hub"]
    with pytest.raises(InputError, match="positive"):
        repo_map(store, project.id, 0)


def test_repo_map_focus_lifts_what_is_named(
    store: Store, project: Project, project_dir: Path
) -> None:
    _hub_project(project_dir)
    index_project(store, project)
    m = repo_map(store, project.id, 1000, focus=["lonely", "no_such_thing"])
    assert m.entries[0].qualified_name == "core.lonely"
    assert m.focus_unmatched == ("no_such_thing",)
    # The six users are alike; focusing one file lifts it above its peers (and
    # what it uses, core.hub, stays on top: the focus passes its rank on).
    by_file = [
        e.qualified_name for e in repo_map(store, project.id, 1000, focus=["user3.py"]).entries
    ]
    assert by_file[:2] == ["core.hub", "user3.use3"]


def test_repo_map_of_an_empty_ledger(store: Store, project: Project) -> None:
    m = repo_map(store, project.id, 100)
    assert (m.text, m.symbols_shown, m.symbols_total) == ("", 0, 0)


def test_impact_is_transitive_to_the_depth_asked(
    store: Store, project: Project, project_dir: Path
) -> None:
    write(project_dir, CHAIN)
    index_project(store, project)
    got = {(e.depth, e.qualified_name, e.kind) for e in impact(store, project.id, "a.a", 2).entries}
    assert got == {
        (0, "a.a", "function"),
        (1, "b.b", "function"),
        (1, "b", "module"),  # `from a import a` at the top of b.py
        (2, "c.c", "function"),
        (2, "c", "module"),
    }
    deep = impact(store, project.id, "a", 3).entries
    assert (3, "d.d") in {(e.depth, e.qualified_name) for e in deep}
    assert all(e.resolved for e in deep)
    with pytest.raises(InputError):
        impact(store, project.id, "a", 0)
    with pytest.raises(NotFound, match="no current symbol"):
        impact(store, project.id, "zzz")


def test_impact_follows_imports_not_bare_name_coincidences(
    store: Store, project: Project, project_dir: Path
) -> None:
    write(
        project_dir,
        {
            "lib.py": "def helper():\n    return 1\n",
            "user.py": "from lib import helper\n\n\ndef uses():\n    return helper()\n",
            # Same bare name, never imported: a builtin or someone else's helper.
            "other.py": "def unrelated():\n    return helper()\n",
            # Reached through a module: any `helper` may be meant.
            "attr.py": "import lib\n\n\ndef via_module():\n    return lib.helper()\n",
            # Go: one directory is one package, no import needed.
            "srv/a.go": "package srv\n\nfunc Serve() {}\n",
            "srv/b.go": "package srv\n\nfunc Run() { Serve() }\n",
            "cli/c.go": "package cli\n\nfunc Serve() {}\n\nfunc Main() { Serve() }\n",
        },
    )
    index_project(store, project)
    hits = {e.qualified_name: e for e in impact(store, project.id, "lib.helper", 1).entries}
    assert set(hits) == {"lib.helper", "user.uses", "user", "attr.via_module"}
    assert hits["user.uses"].resolved
    assert hits["attr.via_module"].ref_kind == "member-call"
    go = {e.qualified_name for e in impact(store, project.id, "srv.a.Serve", 1).entries}
    assert go == {"srv.a.Serve", "srv.b.Run"}  # not cli.c.Main: its own Serve shadows


def _atlas(store: Store, project: Project, path: str, qn: str, anchor_hash: str) -> None:
    fact = current_fact(store, project.id, path, qn)
    assert fact is not None
    with store.tx() as c:
        c.execute(
            "INSERT INTO semantic_atlas (project_id, path, qualified_name, fact_id, anchor_hash, "
            "summary) VALUES (?, ?, ?, ?, ?, 'a summary')",
            (project.id, path, qn, fact.id, anchor_hash),
        )


def test_impact_marks_entries_whose_atlas_summary_no_longer_matches(
    store: Store, project: Project, project_dir: Path
) -> None:
    write(project_dir, CHAIN)
    index_project(store, project)
    for path, qn in (("b.py", "b.b"), ("c.py", "c.c")):
        fact = current_fact(store, project.id, path, qn)
        assert fact is not None
        _atlas(store, project, path, qn, fact.symbol_hash)
    fresh = {e.qualified_name: e for e in impact(store, project.id, "a", 2).entries}
    assert not fresh["b.b"].stale
    assert not fresh["c.c"].stale
    write(project_dir, {"b.py": CHAIN["b.py"].replace("return a()", "return a() + 1")})
    index_project(store, project)
    after = {e.qualified_name: e for e in impact(store, project.id, "a", 2).entries}
    assert (after["b.b"].stale, after["b.b"].stale_reason) == (True, "changed")
    assert not after["c.c"].stale  # its code did not change
    assert not after["a.a"].stale  # no summary: nothing to be wrong


def test_staleness_of_a_removed_symbol(store: Store, project: Project, project_dir: Path) -> None:
    write(project_dir, CHAIN)
    index_project(store, project)
    fact = current_fact(store, project.id, "d.py", "d.d")
    assert fact is not None
    _atlas(store, project, "d.py", "d.d", fact.symbol_hash)
    (project_dir / "d.py").unlink()
    index_project(store, project)
    gone = current_fact(store, project.id, "d.py", "d.d")
    assert staleness(store, project.id, {("d.py", "d.d"): gone}) == {("d.py", "d.d"): "removed"}
    assert staleness(store, project.id, {("d.py", "d.d"): None}) == {("d.py", "d.d"): "removed"}


def test_the_newest_atlas_entry_is_the_one_judged(
    store: Store, project: Project, project_dir: Path
) -> None:
    write(project_dir, CHAIN)
    index_project(store, project)
    fact = current_fact(store, project.id, "b.py", "b.b")
    assert fact is not None
    _atlas(store, project, "b.py", "b.b", "an-old-hash")
    assert staleness(store, project.id, {("b.py", "b.b"): fact}) == {("b.py", "b.b"): "changed"}
    _atlas(store, project, "b.py", "b.b", fact.symbol_hash)  # rewritten against the code
    assert staleness(store, project.id, {("b.py", "b.b"): fact}) == {}


def test_repo_map_follows_a_reindex(store: Store, project: Project, project_dir: Path) -> None:
    # The graph is cached per Ledger state: a re-index must invalidate it, even
    # one that changes only top-level code (no fact changes).
    _hub_project(project_dir)
    write(project_dir, {"script.py": "from core import hub\n\nhub(1)\n"})
    index_project(store, project)
    first = [e.qualified_name for e in repo_map(store, project.id, 1000).entries]
    assert first[0] == "core.hub"
    calls = "".join(f"lonely({i})\n" for i in range(40))
    write(project_dir, {"script.py": "from core import lonely\n\n" + calls})
    user = "from core import lonely\n\n\ndef use{0}():\n    return lonely({0})\n"
    for i in range(6):
        write(project_dir, {f"user{i}.py": user.format(i)})
    index_project(store, project)
    second = [e.qualified_name for e in repo_map(store, project.id, 1000).entries]
    assert second[0] == "core.lonely"
