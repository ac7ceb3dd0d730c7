"""The receipt says when the server shifted (issue 40 item 5): it reused text past the
point where the prompt first differed from the cached one, which only a server that
shifts kept runs into place (llama-server ``--cache-reuse``) does."""

from __future__ import annotations

from sakur4.backends.report import PromptReport
from sakur4.receipts import Receipt
from sakur4.turns.receipt import answered


def sent(divergence: int | None) -> Receipt:
    return Receipt(
        project_id=1,
        session="s",
        turn=3,
        context_window=4096,
        prompt_tokens=3000,
        profile="shift-first",
        profile_reason="probe: checkpoint source shifting",
        verdict="stepping",
        cache_verdict="unverifiable",
        divergence=divergence,
        detail={"reason": "1 old unit(s) removed whole"},
    )


def served(reused: int | None) -> PromptReport:
    processed = None if reused is None else 3000 - reused
    return PromptReport(3000, processed, reused, 12.0, None)


def test_reuse_past_the_divergence_is_told_as_shifted() -> None:
    r = answered(sent(1200), served(2900), {})
    assert r.detail["shifted"] == 1700
    assert r.server_cached == 2900


def test_no_shift_is_told_where_the_server_reused_only_the_common_prefix() -> None:
    for divergence, reused in [(1200, 1200), (1200, 800), (None, 2900), (1200, None)]:
        assert "shifted" not in answered(sent(divergence), served(reused), {}).detail
