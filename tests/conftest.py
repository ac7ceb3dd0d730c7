"""Shared fixtures. Every test runs with a clean ``SAKUR4_*`` environment and a
private data directory, so nothing touches the real home or store."""

from __future__ import annotations

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

pytest_plugins = ["fixtures_llama"]


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
