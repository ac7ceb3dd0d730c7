"""Reading what the server reports about a prompt: llama.cpp timings, OpenAI usage, nothing."""

from __future__ import annotations

from sakur4.backends.report import read_report


def test_llama_cpp_timings_win() -> None:
    r = read_report(
        {
            "usage": {"prompt_tokens": 25, "prompt_tokens_details": {"cached_tokens": 1}},
            "timings": {"cache_n": 1, "prompt_n": 24, "prompt_ms": 507.7},
        }
    )
    assert (r.prompt_tokens, r.reused, r.processed, r.prompt_ms) == (25, 1, 24, 507.7)
    assert r.source == "timings"
    assert r.verifiable


def test_completion_endpoint_reports_tokens_evaluated() -> None:
    r = read_report({"tokens_evaluated": 3, "timings": {"cache_n": 1, "prompt_n": 2}})
    assert (r.prompt_tokens, r.reused, r.processed) == (3, 1, 2)


def test_openai_usage_only() -> None:
    r = read_report(
        {"usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}}}
    )
    assert (r.prompt_tokens, r.reused, r.processed, r.source) == (100, 64, 36, "usage")


def test_nothing_reported_is_unverifiable_not_zero() -> None:
    r = read_report({"usage": {"prompt_tokens": 100}})
    assert r.prompt_tokens == 100
    assert r.reused is None
    assert r.processed is None
    assert not r.verifiable


def test_booleans_and_strings_are_not_counts() -> None:
    r = read_report({"timings": {"cache_n": True, "prompt_n": "7"}})
    assert not r.verifiable
