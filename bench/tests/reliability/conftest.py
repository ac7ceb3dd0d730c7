"""The short, bounded versions of the reliability harnesses (bench/reliability/, on
``sys.path`` by bench/tests/conftest.py).

Fixtures: ``llama_slots8``, a real llama-server with 8 slots of 2,048 tokens for the
load test (module scope, stopped by its pid); the single-slot servers come from
``fixtures_llama``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fixtures_llama import REAL_SETTINGS, locate_backend
from sakur4.backends.launcher import LlamaServer, ServerFlags

SLOTS = 8
SLOT_CTX = 2048


@pytest.fixture(scope="module")
def llama_slots8(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    binary, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    flags = ServerFlags(ctx=SLOTS * SLOT_CTX, parallel=SLOTS)
    logs = tmp_path_factory.mktemp("llama-slots8")
    with LlamaServer(
        binary, model, flags, log_path=logs / "server.log", die_with_parent=True
    ) as server:
        yield server
