"""Shared fixtures. Every test runs with a clean ``SAKUR4_*`` environment and a
private data directory, so nothing touches the real home or store."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from sakur4.settings import Settings
from sakur4.store import Store, open_store
from sakur4.store.projects import Project, add_project

# Read before any test isolates the environment: where set-up put the built
# llama-server and the assembled model (SAKUR4_CACHE_DIR, else the user cache).
REAL_CACHE_DIR = Settings.load().cache_dir

pytest_plugins = ["fixtures_llama", "fixtures_vllm"]


# The slow tier: real-server sessions of many turns, the demo, crash/fuzz/load runs, the
# browser, real harnesses and vLLM. `pytest -m "not slow"` is the fast tier a developer
# runs; CI runs everything. Kept here, in one list, so what the fast tier leaves out is
# read in one place (node ids relative to tests/, a folder or a file or one test).
SLOW = (
    "reliability/",
    "demo/test_demo.py",
    "gateway/test_dashboard_browser.py",
    "gateway/test_claude_code.py",
    "gateway/test_anthropic_sdk.py::test_tool_conversation_until_the_gateway_evicts",
    "wrap/test_recipes.py::test_the_real_",
    "wrap/test_wrap.py",
    "wrap/test_save.py::test_save_writes_the_harness_files_and_only_with_save",
    "wrap/test_compaction.py::test_the_real_opencode_compaction_through_the_gateway",
    "gateway/test_harness_shapes.py",
    "gateway/test_first_calls.py",
    "gateway/test_stuck_session.py",
    "gateway/test_session.py",
    "gateway/test_dashboard_truth.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        node = f"{item.path.relative_to(tests).as_posix()}::{item.name}"
        if item.get_closest_marker("vllm") or node.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-backend",
        action="store_true",
        help="fail (instead of skip) tests that need the real llama-server when it is missing",
    )


@pytest.fixture(autouse=True)
def _isolated_env(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path_factory.mktemp("home")
    for key in list(os.environ):
        if key.startswith("SAKUR4_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """A collection at each test's end: an unclosed client's socket is then closed, and
    its ResourceWarning reported (an error: warnings are errors), in the teardown of the
    test that left it open. Without it the collector ran at some later allocation and a
    test that did nothing wrong failed (seen in CI on tests/gateway/test_faults.py). A
    plain httpx client warns so; the openai and anthropic SDKs close theirs when collected.

    Named to sort first: pytest sets up a conftest's autouse fixtures in name order, so
    this one is torn down after every other function-scoped one. What is still alive
    after the collection is frozen (never scanned again): a full collection of the heap
    the imports leave cost 60-160 ms a test, this one 0.2 ms (docs/DESIGN.md). The miss:
    an object that outlives a test (a module-scoped fixture) and dies later in a cycle
    is only collected at the session's end, see :func:`_unfreeze_at_the_end`."""
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="session")
def _unfreeze_at_the_end() -> Iterator[None]:
    """Hands the frozen objects back to the collector when the session ends, so pytest's
    last collection (and its report of what it closed unclosed) covers them too."""
    yield
    gc.unfreeze()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store" / "sakur4.db"


@pytest.fixture
def store(store_path: Path) -> Iterator[Store]:
    s = open_store(store_path)
    yield s
    s.close()


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    return root


@pytest.fixture
def project(store: Store, project_dir: Path) -> Project:
    return add_project(store, project_dir)


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt here, and a child started now gets the default
    disposition, whatever this process inherited: a shell that runs a command in the
    background sets SIGINT to ignored, Python then installs no handler, and a Ctrl-C
    test could not fail or pass for the right reason (seen on a CI run under nohup)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
