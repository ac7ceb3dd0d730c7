"""Load, bounded: 8 gateway sessions on an 8-slot llama-server; 16 MCP HTTP clients.

Figures (latency, RSS) are printed; the long run with the reported figures is
``PYTHONPATH=bench python -m reliability.load`` (docs/RELIABILITY.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability.load import gateway_sessions, mcp_http_clients

from sakur4.backends.launcher import LlamaServer

# A leak this size over a short run is a defect whatever the machine's noise.
RSS_GROWTH_LIMIT_KIB = 64 * 1024


@pytest.mark.backend
def test_eight_sessions_keep_their_own_slot_and_cache(
    llama_slots8: LlamaServer, tmp_path: Path
) -> None:
    out = gateway_sessions(llama_slots8.url, tmp_path, sessions=8, turns=2, slots=8)
    print(out.summary())
    assert not out.errors, out.errors[:3]
    assert not out.contamination, out.contamination[:5]
    assert out.turns == 8 * 2
    assert sorted(out.slot_of.values()) == list(range(8)), out.slot_of
    # From its second turn each session finds its own prompt in its slot's cache.
    assert len(out.reuse) == 8
    assert min(out.reuse) >= 0.5, sorted(out.reuse)
    assert len(out.added_ms) == 8 * 2


def test_sixteen_mcp_http_clients_lose_nothing(tmp_path: Path) -> None:
    out = mcp_http_clients(tmp_path, clients=16, seconds=12)
    print(out.summary())
    assert not out.errors, out.errors[:3]
    assert not out.tracebacks, out.tracebacks[:3]
    assert out.lost == 0
    assert out.duplicated == 0
    # Only a floor: on a loaded 2-core machine 16 sessions starting up took most of the
    # 12 s (14 notes acked in one run), and the count is not what is guarded here.
    assert out.writes_acked > 0
    assert out.rss_end - out.rss_start < RSS_GROWTH_LIMIT_KIB, out.summary()
