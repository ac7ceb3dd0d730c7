"""`sakur4 probe` says whether the server serves /v1/messages and what the gateway does."""

from __future__ import annotations

import pytest

from probe_results import probe_result
from sakur4.cli.probe import _show


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
    _show(probe_result(**changes))
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "messages API" in x]
    assert said in line
