"""Every prompt-building path goes through render_anchor_block; none assembles anchors itself.

The seed had the function and four callers that joined anchors by hand, so a
unit test of the function proved nothing. Two guards here: a source scan (only
render_anchor_block reads an anchor's text or priority, in any engine module),
and a runtime check that each public function returning a prompt or a plan calls
it — enumerated from the package's ``__all__``, so a new builder cannot slip by.
"""

from __future__ import annotations

import ast
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sakur4.engine
from sakur4.engine import (
    Anchor,
    Checkpoints,
    Episode,
    Kind,
    Plan,
    PlanSettings,
    Policy,
    RenderedPrompt,
    choose_profile,
    plan_turn,
    render_messages,
)
from sakur4.engine import anchors as anchors_module

from .sessions import count

THE_RENDERER = "render_anchor_block"
ANCHOR_FIELDS = {"text", "priority"}  # what ordering or joining anchors has to read
ENGINE = Path(sakur4.engine.__file__).parent


def anchor_readers(source: str, filename: str) -> list[str]:
    """Places outside render_anchor_block that read an anchor's text or priority."""
    found: list[str] = []

    def walk(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            now = inside or (
                isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                and child.name == THE_RENDERER
            )
            if not now:
                if isinstance(child, ast.Attribute) and child.attr in ANCHOR_FIELDS:
                    found.append(f"{filename}:{child.lineno} reads .{child.attr}")
                if isinstance(child, ast.Constant) and child.value in ANCHOR_FIELDS:
                    found.append(f"{filename}:{child.lineno} names {child.value!r}")
            walk(child, now)

    walk(ast.parse(source), False)
    return found


def builders_missing_the_renderer(source: str, filename: str) -> list[str]:
    """Functions returning a RenderedPrompt that do not call render_anchor_block."""
    missing = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef) or node.returns is None:
            continue
        if "RenderedPrompt" not in ast.unparse(node.returns):
            continue
        calls = {
            c.func.id if isinstance(c.func, ast.Name) else getattr(c.func, "attr", "")
            for c in ast.walk(node)
            if isinstance(c, ast.Call)
        }
        if THE_RENDERER not in calls:
            missing.append(f"{filename}:{node.lineno} {node.name}")
    return missing


def engine_sources() -> list[tuple[str, str]]:
    return [(p.read_text(), p.name) for p in sorted(ENGINE.glob("*.py"))]


def test_only_render_anchor_block_reads_anchor_text() -> None:
    assert len(engine_sources()) >= 8  # the scan really covers the package
    found = [r for src, name in engine_sources() for r in anchor_readers(src, name)]
    assert found == []


def test_every_prompt_renderer_calls_render_anchor_block() -> None:
    found = [r for src, name in engine_sources() for r in builders_missing_the_renderer(src, name)]
    assert found == []


# What the scans would catch: the seed's shape, a builder joining anchors itself.
SEED_SHAPE = """
def render_messages(episodes, anchors, plan) -> RenderedPrompt:
    head = "\\n".join(a.text for a in sorted(anchors, key=lambda a: a.priority))
    return RenderedPrompt(({"role": "system", "content": head},), ("head",))
"""


def test_the_scans_catch_a_builder_that_joins_anchors_itself() -> None:
    assert len(anchor_readers(SEED_SHAPE, "seed.py")) == 2
    assert builders_missing_the_renderer(SEED_SHAPE, "seed.py") == ["seed.py:2 render_messages"]


# -- runtime: each public prompt or plan builder really calls it ----------------

EPISODES = [
    Episode(0, "system", Kind.MESSAGE, "harness prompt", 4),
    Episode(1, "user", Kind.MESSAGE, "fix the bug", 3),
]
ANCHORS = [Anchor(1, "never push to main", 1, 5), Anchor(2, "python 3.11", 2, 3)]


def _plan() -> Plan:
    return plan_turn(
        EPISODES,
        PlanSettings(4096, choose_profile("detected"), Policy(cut_tolerance=256, live_results=2)),
        anchors=ANCHORS,
        layout=None,
        checkpoints=Checkpoints.every(),
        count=count,
    )


SAMPLE_CALLS: dict[str, Callable[[], Any]] = {
    "plan_turn": _plan,
    "render_messages": lambda: render_messages(EPISODES, ANCHORS, _plan()),
}


def prompt_builders() -> list[str]:
    """Public engine functions that return a prompt or a plan (which sizes the head)."""
    names = []
    for name in sakur4.engine.__all__:
        obj = getattr(sakur4.engine, name)
        if not inspect.isfunction(obj):
            continue
        returns = typing.get_type_hints(obj).get("return")
        if returns in (RenderedPrompt, Plan):
            names.append(name)
    return names


def test_the_builders_are_the_ones_this_test_knows() -> None:
    assert sorted(prompt_builders()) == sorted(SAMPLE_CALLS), (
        "a public prompt builder was added or removed: give it a sample call here"
    )


@pytest.mark.parametrize("name", sorted(SAMPLE_CALLS))
def test_each_builder_calls_render_anchor_block(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = anchors_module.render_anchor_block

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    for module in (sakur4.engine.planner, sakur4.engine.render):
        monkeypatch.setattr(module, THE_RENDERER, spy)
    before = len(calls)
    SAMPLE_CALLS[name]()
    assert len(calls) > before
