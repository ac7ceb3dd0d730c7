"""Shared fixtures and the slow tier. Every test runs with a clean ``SAKUR4_*``
environment and a private data directory, so nothing touches the real home or store
(fixtures_common, shared with bench/tests/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sakur4.settings import Settings
from sakur4.store import Store, open_store
from sakur4.store.projects import Project, add_project

# Read before any test isolates the environment: where set-up put the built
# llama-server and the assembled model (SAKUR4_CACHE_DIR, else the user cache).
REAL_CACHE_DIR = Settings.load().cache_dir

pytest_plugins = ["fixtures_common", "fixtures_llama", "fixtures_vllm"]


# The slow tier: real-server sessions of many turns, the demo, crash/fuzz/load runs, the
# browser, real harnesses and vLLM. `pytest -m "not slow"` is the fast tier a developer
# runs; CI runs everything. Kept here, in one list, so what the fast tier leaves out is
# read in one place (node ids relative to tests/, a folder or a file or one test).
SLOW = (
    "demo/test_demo.py",
    "demo/test_kv_shift_real.py",
    "test_wheel_install.py",
    "gateway/test_dashboard_browser.py",
    "gateway/test_claude_code.py",
    "gateway/test_parking.py",
    "gateway/test_replicas.py",
    "gateway/test_anthropic_sdk.py::test_tool_conversation_until_the_gateway_evicts",
    "wrap/test_recipes.py::test_the_real_",
    "wrap/test_wrap.py",
    "wrap/test_wrap_agents.py",
    "wrap/test_save.py::test_save_writes_the_harness_files_and_only_with_save",
    "wrap/test_compaction.py::test_the_real_opencode_compaction_through_the_gateway",
    "gateway/test_harness_shapes.py",
    "gateway/test_first_calls.py",
    "gateway/test_stuck_session.py",
    "gateway/test_receipt_steps.py",
    "gateway/test_session.py",
    "gateway/test_dashboard_truth.py",
    "gateway/test_router.py::test_router_cache_aware_",
    "gateway/test_router.py::test_router_worker_killed_",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        if not item.path.is_relative_to(tests):
            continue  # bench/tests/ (its conftest says what of it is slow)
        node = f"{item.path.relative_to(tests).as_posix()}::{item.name}"
        if item.get_closest_marker("vllm") or node.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


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
