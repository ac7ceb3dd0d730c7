"""What every test runs with, under ``tests/`` and ``bench/tests/`` alike (a plugin both
conftests name): the ``--require-backend`` option, a clean ``SAKUR4_*`` environment and
a private home, the garbage collected at each test's end, and SIGINT that raises."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator

import pytest


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
