"""Each command imports what it uses (issue 18): start-up is paid on every shell call and
every harness spawn. Asserted on ``sys.modules`` of a fresh interpreter that ran the
command, never on timings (the figures are bench/startup.py's)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sakur4
from sakur4.store import open_store
from sakur4.store.projects import register_project

# Runs `sakur4 ARGS` through the console entry point, then prints what was imported.
PROBE = """
import json, sys
from sakur4.cli import main
sys.argv = ["sakur4", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""

# What only the commands that need them may load: the gateway's web stack, numpy
# (recall, embedders), httpx (the backends), the MCP SDK, tree-sitter (the Ledger).
HEAVY = {"numpy", "httpx", "starlette", "uvicorn", "mcp", "tree_sitter"}


def imported(args: list[str], tmp_path: Path) -> set[str]:
    env = {
        "SAKUR4_STORE": str(tmp_path / "store.db"),
        "SAKUR4_PROJECT": str(tmp_path),
        "SAKUR4_EMBEDDER": "none",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        env={**env, "PYTHONPATH": str(Path(sakur4.__file__).parent.parent)},
        stdin=subprocess.DEVNULL,  # `serve` reads EOF and stops
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    last = done.stdout.rstrip().rsplit("\n", 1)[-1]
    assert last.startswith("MODULES "), done.stdout + done.stderr
    return set(json.loads(last.removeprefix("MODULES ")))


def heavy(modules: set[str], among: set[str] = HEAVY) -> set[str]:
    """The top-level packages of ``among`` that were imported."""
    return {m.split(".")[0] for m in modules} & among


def test_version_imports_click_and_nothing_of_any_command(tmp_path: Path) -> None:
    modules = imported(["--version"], tmp_path)
    assert heavy(modules, HEAVY | {"pydantic", "pydantic_settings", "sqlean"}) == set()
    assert "importlib.metadata" not in modules  # the version is a string in sakur4/__init__
    assert {m for m in modules if m.startswith("sakur4.")} <= {
        "sakur4.cli",
        "sakur4.cli.errors",
        "sakur4.errors",
    }


def test_one_file_index_loads_the_ledger_and_no_web_stack(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    modules = imported(["index", str(tmp_path / "a.py")], tmp_path)
    assert "sakur4.ledger.index" in modules  # it did run
    assert heavy(modules, HEAVY - {"tree_sitter"}) == set()
    assert {m for m in modules if m.startswith(("sakur4.gateway", "sakur4.demo"))} == set()


def test_serve_answers_before_loading_what_only_a_tool_call_needs(tmp_path: Path) -> None:
    modules = imported(["serve"], tmp_path)
    assert "sakur4.mcp.stdio" in modules  # it did serve (until stdin closed)
    assert heavy(modules, {"numpy", "httpx", "tree_sitter", "pathspec"}) == set()
    loaded = {m for m in modules if m.startswith("sakur4.")}
    services = {"sakur4.ledger", "sakur4.atlas", "sakur4.probe", "sakur4.episodes.recall"}
    assert loaded & services == set()
    assert {m for m in loaded if m.startswith(("sakur4.gateway", "sakur4.mcp.http"))} == set()


@pytest.mark.parametrize(
    "args", [["status"], ["anchor", "list"], ["receipts"], ["episodes", "s"], ["project", "list"]]
)
def test_store_commands_load_no_heavy_library(args: list[str], tmp_path: Path) -> None:
    # A store that exists and knows the project, so each command really reads it.
    store = open_store(tmp_path / "store.db")
    register_project(store, tmp_path)
    store.close()
    assert heavy(imported(args, tmp_path)) == set()


def test_the_static_version_is_the_packaged_one() -> None:
    # The build reads sakur4/__init__.py (pyproject's [tool.hatch.version]).
    assert sakur4.__version__ == importlib.metadata.version("sakur4")
