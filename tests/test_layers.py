"""The layers of SPEC §13, held: which package may import which.

Every ``import sakur4…`` in src/ is read from the source (AST, not a runtime
import graph, so a lazy import inside a function counts too) and checked against
the layer table below. SPEC §13's table, corrected where the code is right for a
reason (docs/DESIGN.md, "Layers"): the demo runs a real gateway, so it sits above
the gateway and MCP surfaces and below the CLI that offers it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

FOUNDATION, ADAPTERS, CORE, SERVICES, SURFACES, APP, CLI = range(7)
LAYER = {
    # foundation: settings, errors, the shared vocabulary (tiers, kinds), the network-exposure
    # policy
    "__init__": FOUNDATION,
    "settings": FOUNDATION,
    "errors": FOUNDATION,
    "exposure": FOUNDATION,
    "bounds": FOUNDATION,
    "vocabulary": FOUNDATION,
    # adapters
    "store": ADAPTERS,
    "backends": ADAPTERS,
    "embedders": ADAPTERS,
    "parsers": ADAPTERS,
    # core: the context engine, pure
    "engine": CORE,
    # services
    "ledger": SERVICES,
    "atlas": SERVICES,
    "episodes": SERVICES,
    "receipts": SERVICES,
    "probe": SERVICES,
    "doctor": SERVICES,
    "anchors": SERVICES,
    "status": SERVICES,
    "harnesses": SERVICES,
    # the turn pipeline: record, plan, render, send, receipt (the gateway's routes call it)
    "turns": SERVICES,
    # surfaces that serve requests; the app that drives one; the CLI over all
    "gateway": SURFACES,
    "mcp": SURFACES,
    "demo": APP,
    "wrap": APP,
    # a long run's progress on the terminal, for what the app and the CLI drive
    "progress": APP,
    "cli": CLI,
    "__main__": CLI,
}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(root: Path = SRC) -> list[tuple[str, str, tuple[str, ...]]]:
    """(importing module, imported module, private names imported) for all of src/."""
    out = []
    for f in sorted((root / "sakur4").rglob("*.py")):
        rel = f.relative_to(root).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "sakur4" or node.module.startswith("sakur4."):
                    private = tuple(
                        a.name
                        for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")
                    )
                    out.append((module, node.module, private))
            elif isinstance(node, ast.Import):
                out += [(module, a.name, ()) for a in node.names if a.name.startswith("sakur4")]
    return out


def violations(found: list[tuple[str, str, tuple[str, ...]]]) -> list[str]:
    bad = []
    for module, target, private in found:
        me, other = _unit(module), _unit(target)
        if me == other:
            continue
        if me not in LAYER or other not in LAYER:
            bad.append(f"{module} -> {target}: a package with no layer (add it to LAYER)")
            continue
        mine, theirs = LAYER[me], LAYER[other]
        if theirs > mine:
            bad.append(f"{module} -> {target}: imports a layer above its own")
        elif mine in (ADAPTERS, CORE) and theirs != FOUNDATION:
            bad.append(f"{module} -> {target}: adapters and the engine use the foundation only")
        elif mine == theirs == SURFACES:
            bad.append(
                f"{module} -> {target}: the gateway and the MCP server never import each other"
            )
        if private:
            bad.append(f"{module} -> {target}: imports private names {', '.join(private)}")
    return bad


# Inside backends: the server kinds (backends/kinds/, one file a kind) sit above the
# clients, layouts and experiment they put together; everything else reaches a kind
# through the registry (sakur4.backends.kinds) or what every kind shares (.base), never
# a kind's own file (issue 38: a new kind is one file). identify.py re-exports the
# registry's identification for the callers it had.
KINDS = "sakur4.backends.kinds"
KIND_SHARED = (KINDS, f"{KINDS}.base")
BELOW_KINDS_EXCEPT = ("sakur4.backends.identify",)


def kind_violations(found: list[tuple[str, str, tuple[str, ...]]]) -> list[str]:
    bad = []
    for module, target, _ in found:
        inside = module == KINDS or module.startswith(KINDS + ".")
        if not target.startswith(KINDS):
            continue
        if not inside and target not in KIND_SHARED:
            bad.append(f"{module} -> {target}: a kind's file is reached through the registry")
        elif (
            not inside
            and module.startswith("sakur4.backends.")
            and module not in BELOW_KINDS_EXCEPT
        ):
            bad.append(f"{module} -> {target}: the clients sit below the kinds")
    return bad


def test_the_kinds_room_holds() -> None:
    assert kind_violations(imports()) == []


# Inside harnesses: one file a harness (issue 38), each defining ``HARNESS``. Everything
# else, the package's own modules included, reaches a harness through the registry
# (sakur4.harnesses) or what every harness shares (.base), never a harness's own file;
# a harness's file imports no other harness and not the registry (it is what the registry
# lists).
HARNESS_HOME = SRC / "sakur4" / "harnesses"
HARNESS_FILES = frozenset(
    f"sakur4.harnesses.{f.stem}"
    for f in HARNESS_HOME.glob("*.py")
    if "\nHARNESS = " in f.read_text(encoding="utf-8")
)


def harness_violations(
    found: list[tuple[str, str, tuple[str, ...]]], files: frozenset[str] = HARNESS_FILES
) -> list[str]:
    bad = []
    for module, target, _ in found:
        if target in files and module != target:
            bad.append(f"{module} -> {target}: a harness's file is reached through the registry")
        elif module in files and target == "sakur4.harnesses":
            bad.append(f"{module} -> {target}: a harness's file does not import the registry")
    return bad


def test_the_harnesses_room_holds() -> None:
    assert len(HARNESS_FILES) >= 5  # it found the harnesses' files
    assert harness_violations(imports()) == []


@pytest.mark.parametrize(
    ("edge", "why"),
    [
        (("sakur4.episodes.natures", "sakur4.harnesses.aider", ()), "through the registry"),
        (("sakur4.harnesses.recipes", "sakur4.harnesses.aider", ()), "through the registry"),
        (("sakur4.harnesses.opencode", "sakur4.harnesses.aider", ()), "through the registry"),
        (("sakur4.harnesses.aider", "sakur4.harnesses", ()), "not import the registry"),
    ],
)
def test_each_harness_rule_names_a_violation(
    edge: tuple[str, str, tuple[str, ...]], why: str
) -> None:
    (found,) = harness_violations([edge])
    assert why in found


@pytest.mark.parametrize(
    ("edge", "why"),
    [
        (("sakur4.turns.prepare", "sakur4.backends.kinds.llamacpp", ()), "through the registry"),
        (("sakur4.backends.llamacpp", "sakur4.backends.kinds", ()), "below the kinds"),
    ],
)
def test_each_kind_rule_names_a_violation(edge: tuple[str, str, tuple[str, ...]], why: str) -> None:
    (found,) = kind_violations([edge])
    assert why in found


def test_the_layers_hold() -> None:
    found = imports()
    assert len(found) > 100  # it read the tree, not an empty directory
    assert violations(found) == []


@pytest.mark.parametrize(
    ("edge", "why"),
    [
        (("sakur4.engine.planner", "sakur4.store", ()), "foundation only"),
        (("sakur4.store.db", "sakur4.backends.http", ()), "foundation only"),
        (("sakur4.gateway.app", "sakur4.mcp.build", ()), "never import each other"),
        (("sakur4.receipts", "sakur4.gateway.app", ()), "a layer above"),
        (("sakur4.turns.pipeline", "sakur4.gateway.errors", ()), "a layer above"),
        (("sakur4.doctor", "sakur4.store.db", ("_load",)), "private names"),
        (("sakur4.engine.x", "sakur4.newthing", ()), "no layer"),
    ],
)
def test_each_rule_names_a_violation(edge: tuple[str, str, tuple[str, ...]], why: str) -> None:
    (found,) = violations([edge])
    assert why in found


def cycles(found: list[tuple[str, str, tuple[str, ...]]]) -> list[list[str]]:
    """The import cycles among modules (each a strongly connected set of two or more).

    A submodule importing names from its own package's ``__init__`` is not an edge:
    a package that picks among its submodules lazily (``embedders``) is the pattern, and
    Python runs the ``__init__`` first anyway.
    """
    edges: dict[str, set[str]] = {}
    for module, target, _ in found:
        if target == "sakur4" or module.startswith(target + "."):
            continue
        edges.setdefault(module, set()).add(target)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                out.append(sorted([v, *component]))

    for v in sorted(edges):
        if v not in order:
            visit(v)
    return out


def test_no_module_imports_itself_round_a_circle() -> None:
    # store/db.py <-> store/migrations.py was the one circle (issue 38): the opening,
    # which runs the migrations, now lives in store/opening.py.
    assert cycles(imports()) == []


def test_a_circle_is_found() -> None:
    found = [
        ("sakur4.store.db", "sakur4.store.migrations", ()),
        ("sakur4.store.migrations", "sakur4.store.db", ()),
        ("sakur4.embedders.minilm", "sakur4.embedders", ()),
        ("sakur4.embedders", "sakur4.embedders.minilm", ()),
    ]
    assert cycles(found) == [["sakur4.store.db", "sakur4.store.migrations"]]
