"""What the server says it did with a prompt: tokens processed, tokens reused, prefill time.

llama.cpp reports ``timings`` (``prompt_n`` processed, ``cache_n`` reused,
``prompt_ms``) on ``/completion`` and ``/v1/chat/completions``; OpenAI-style servers
may report ``usage.prompt_tokens_details.cached_tokens``; Ollama's native API reports
``prompt_eval_count`` (cached plus new tokens: ollama ``llm/llama_server.go`` adds
``cache_n`` to ``prompt_n``) and, since ollama PR #17943, ``prompt_eval_cached_count``
(omitted when not known). When none is present
the reuse is *unverifiable*, and Sakur4 must treat it as a full re-prefill, never
as a guess of reuse (SPEC §8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ReuseSource = Literal["timings", "usage"]


@dataclass(frozen=True, slots=True)
class PromptReport:
    """One request's prompt, as the server reported it.

    ``reused`` and ``processed`` are None when the server did not say (unverifiable).
    """

    prompt_tokens: int | None
    processed: int | None
    reused: int | None
    prompt_ms: float | None
    source: ReuseSource | None

    @property
    def verifiable(self) -> bool:
        """True when the server itself reported how many prompt tokens it reused."""
        return self.reused is not None


UNREPORTED = PromptReport(None, None, None, None, None)


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def read_report(answer: Mapping[str, Any]) -> PromptReport:
    """Read the prompt report from a completion/chat answer (or a stream's last chunk)."""
    timings = answer.get("timings")
    usage = answer.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    total = _int(usage.get("prompt_tokens"))
    if total is None:
        total = _int(answer.get("tokens_evaluated"))
    if isinstance(timings, Mapping) and _int(timings.get("cache_n")) is not None:
        reused = _int(timings.get("cache_n"))
        processed = _int(timings.get("prompt_n"))
        if total is None and reused is not None and processed is not None:
            total = reused + processed
        return PromptReport(total, processed, reused, _float(timings.get("prompt_ms")), "timings")
    if total is None and _int(answer.get("prompt_eval_count")) is not None:
        total = _int(answer.get("prompt_eval_count"))
        cached = _int(answer.get("prompt_eval_cached_count"))
        if cached is not None and total is not None:
            return PromptReport(total, max(0, total - cached), cached, None, "usage")
        return PromptReport(total, None, None, None, None)
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    if cached is not None:
        processed = max(0, total - cached) if total is not None else None
        return PromptReport(total, processed, cached, None, "usage")
    return PromptReport(total, None, None, None, None)
