"""The re-prefill a receipt reports is pessimistic whenever the server did not verify reuse.

SPEC §8: ``unverifiable`` is reported as a full re-prefill, never as a guess. Found by
mutation testing: the receipt tests checked the case where the server said nothing at
all, not the half-report (a processed count with no cached count), where the count the
server gave must still not be taken as the re-prefill.
"""

from __future__ import annotations

from sakur4.receipts import Receipt, cache_verdict, reprefilled_tokens


def _receipt(cached: int | None, processed: int | None, **kw: object) -> Receipt:
    verdict = kw.pop("verdict", cache_verdict(cached, processed))
    return Receipt(
        project_id=1,
        session="s",
        turn=1,
        context_window=32768,
        prompt_tokens=12446,
        profile="cache-first",
        profile_reason="probe",
        verdict="fits",
        cache_verdict=verdict,  # type: ignore[arg-type]
        server_cached=cached,
        server_processed=processed,
    )


def test_a_half_report_is_unverifiable_and_counts_the_whole_prompt() -> None:
    r = _receipt(None, 446)
    assert r.cache_verdict == "unverifiable"
    assert reprefilled_tokens(r) == 12446  # not the 446 the server mentioned


def test_a_verdict_without_a_processed_count_counts_the_whole_prompt() -> None:
    assert reprefilled_tokens(_receipt(12000, None, verdict="reused")) == 12446


def test_a_verified_report_counts_what_the_server_processed() -> None:
    assert reprefilled_tokens(_receipt(12000, 446)) == 446
    assert reprefilled_tokens(_receipt(0, 12446)) == 12446
