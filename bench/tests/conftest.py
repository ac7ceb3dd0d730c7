"""The benchmark's tests and the bounded reliability runs: they import ``bench/``, which
``tests/`` never does (``tests/`` holds the tests of ``src/``).

``bench/`` goes first on ``sys.path``, as for a script run from it, so ``import
eviction`` and ``import reliability`` find its modules (``reliability`` is a regular
package there, so this folder's ``reliability/``, a namespace portion of the same
name, never shadows it). The fixtures every test runs with come from ``tests/``
(``pythonpath``): fixtures_common and the real llama-server's fixtures_llama.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

pytest_plugins = ["fixtures_common", "fixtures_llama"]

# The slow tier here (tests/conftest.py's SLOW for the rest): the crash, fault, fuzz
# and load runs against real processes, and the many-agents run through a real gateway
# (a path, or a path and a test name's start).
SLOW = (
    "reliability/",
    "test_agents.py::test_two_agents_through_one_gateway",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and (
            f"{item.path.relative_to(here).as_posix()}::{item.name}".startswith(SLOW)
        ):
            item.add_marker(pytest.mark.slow)
