"""Bad input, fuzzed (hypothesis), bounded: no crash, no hang, a clear error each time.

Each target runs a fixed number of generated inputs against the real process or
function; the long run is ``PYTHONPATH=bench python -m reliability.fuzz``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from reliability import fuzz

from sakur4.backends.launcher import LlamaServer

fuzz.BOUNDED = True  # fixed examples, no shrinking: a finding fails fast and reproducibly


def _fuzzed(target: str, examples: int, run: Callable[[int], list[fuzz.Finding]]) -> None:
    """``run(examples)`` finds nothing, and that many examples of ``target`` really ran."""
    before = fuzz.COUNTS[target]
    findings = run(examples)
    assert not findings, "\n".join(f"{f.target}: {f.what}" for f in findings)
    assert fuzz.COUNTS[target] - before >= examples


def test_stdio_lines(tmp_path: Path) -> None:
    _fuzzed("stdio", 150, lambda n: fuzz.fuzz_stdio(n, tmp_path))


def test_http_bodies(tmp_path: Path) -> None:
    _fuzzed("http", 120, lambda n: fuzz.fuzz_http(n, tmp_path))


@pytest.mark.backend
def test_gateway_requests(llama_ring: LlamaServer, tmp_path: Path) -> None:
    _fuzzed("gateway", 25, lambda n: fuzz.fuzz_gateway(n, tmp_path, llama_ring.url))


@pytest.mark.backend
def test_gateway_exposure_space(llama_ring: LlamaServer, tmp_path: Path) -> None:
    # Most examples are refused before any generation; the allowed ones cost one.
    _fuzzed("exposure", 60, lambda n: fuzz.fuzz_exposure(n, tmp_path, llama_ring.url))


def test_indexer_on_mangled_sources(tmp_path: Path) -> None:
    _fuzzed("indexer", 60, lambda n: fuzz.fuzz_indexer(n, tmp_path))


def test_doctor_on_random_store_bytes(tmp_path: Path) -> None:
    _fuzzed("doctor", 200, lambda n: fuzz.fuzz_doctor(n, tmp_path))
