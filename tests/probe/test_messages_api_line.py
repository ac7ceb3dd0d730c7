"""`sakur4 probe` says whether the server serves /v1/messages and what the gateway does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sakur4.cli.probe import _show
from sakur4.probe import ProbeResult


def _result(**changes: object) -> ProbeResult:
    base = ProbeResult(
        url="http://127.0.0.1:9",
        probed_at="now",
        kind="llama.cpp",
        version=None,
        model=None,
        n_ctx=4096,
        n_ctx_train=None,
        total_slots=1,
        slot_actions="unsupported",
        exact_tokenization=True,
        reuse_verifiable=True,
        reuse_field="timings.cache_n",
        checkpoint_source="checkpoint-ring",
        sources=(),
        reason="",
        experiment=(),
        prefill_tokens_per_s=None,
        advice=(),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({}, "not served: the gateway translates"),
        ({"messages_api": True}, "served: the gateway forwards /v1/messages"),
        ({"messages_api": True, "total_slots": 4}, "served, but the gateway translates"),
    ],
)
def test_the_probe_says_which_upstream_the_gateway_uses(
    changes: dict[str, object], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _show(_result(**changes))
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "messages API" in x]
    assert said in line
