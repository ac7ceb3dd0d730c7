"""A llama-server whose prefill is predicted, not run: for exploring policies quickly.

Chat calls are tokenized by the real server (its template and tokenizer, so the
prompts are exactly what it would process) and their reuse is predicted by the
checkpoint-ring model Sakur4 ships (:mod:`sakur4.backends.ring`; with
``--swa-full`` any prefix resumes, which the same model gives with ``n_swa = 0``).
Everything else — the probe's cache experiment included — goes to the real server.

With ``--cache-reuse N`` (``cache_reuse``) the prediction is the server's chunk
reuse instead (tools/server/server.cpp, ``update_slots``, read at llama.cpp
aa6192d): after the common prefix, the cached tokens are scanned for runs of at
least N tokens that match the prompt at the current position; each such run's KV
is shifted into place and counts as reused, a shorter match skips one cached token,
and the scan ends at the first prompt position no cached run matches (new or
replaced text). The server then evaluates at least one token.

Answers are distinct: a call's text is drawn from the words of its own prompt,
seeded by the prompt, so two summaries of different conversations differ (the first
version answered every call with the same text, so every summary was identical and
its simulated cache reused it). Times are predicted too: prefill at
``prefill_tok_s``, generation at ``gen_tok_s``.

Figures from here are predictions: they rank policies in seconds instead of
hours on a loaded machine. Every table marks simulated rows; bench/eviction.py
states the difference between a simulated and a real run of the same script,
mode and strategy when both exist.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from typing import Any

import httpx

from sakur4.backends import ring
from sakur4.backends.layout import TokenLayouts
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.ring import CheckpointRules, SentPrompt

CHAT = "/v1/chat/completions"


def reuse_chunks(
    cached: Sequence[int | None], tokens: Sequence[int], n_past: int, chunk: int
) -> int:
    """Tokens reused after llama-server's ``--cache-reuse chunk`` pass, from a common
    prefix of ``n_past`` (the loop of server.cpp, token positions only)."""
    head_c = head_p = n_past
    while head_c < len(cached) and head_p < len(tokens):
        n = 0
        while (
            head_c + n < len(cached)
            and head_p + n < len(tokens)
            and cached[head_c + n] == tokens[head_p + n]
        ):
            n += 1
        if n >= chunk:
            n_past += n
            head_c += n
            head_p += n
        else:
            head_c += 1
    return n_past


WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")


def distinct_text(body: dict[str, Any], tokens: int) -> str:
    """About ``tokens`` tokens of words from the prompt's own messages, seeded by it."""
    text = " ".join(str(m.get("content") or "") for m in body.get("messages", []))
    words = WORD.findall(text[-20000:]) or ["ok"]
    rng = random.Random(hashlib.sha256(text.encode()).digest())
    return " ".join(rng.choice(words) for _ in range(max(1, int(tokens * 0.6))))


class SimulatedChat(httpx.AsyncBaseTransport):
    """One slot of a server with ``rules``, answering chat calls from a prediction."""

    def __init__(
        self,
        url: str,
        rules: CheckpointRules,
        n_ctx: int,
        prefill_tok_s: float = 250.0,
        gen_tok_s: float = 25.0,
        cache_reuse: int | None = None,
    ) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.client = LlamaCppClient(url, timeout=600.0, transport=httpx.AsyncHTTPTransport())
        self.layouts = TokenLayouts(self.client)
        self.rules = rules
        self.n_ctx = n_ctx
        self.rate = prefill_tok_s / 1000
        self.gen_rate = gen_tok_s / 1000
        self.state = ring.empty_slot(rules)
        self.cache_reuse = cache_reuse
        self.cached: list[int | None] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != CHAT:
            return await self.real.handle_async_request(request)
        body = json.loads(request.content)
        layout = await self.layouts.layout(body)
        n = len(layout.tokens)
        if n > self.n_ctx:
            return httpx.Response(
                400,
                json={
                    "error": {
                        "code": 400,
                        "message": f"request ({n} tokens) exceeds the available context size "
                        f"({self.n_ctx} tokens), try increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": n,
                        "n_ctx": self.n_ctx,
                    }
                },
            )
        generated = int(body.get("max_tokens") or 1)
        if self.cache_reuse:
            reused = self._shifted(layout.tokens, generated)
        else:
            sent = SentPrompt(layout.tokens, layout.user_starts, generated=generated)
            # One request at a time: advance is predict_slot's step without the replay.
            self.state = ring.advance(self.state, sent)
            reused = self.state.reuse[-1]
        processed = n - reused
        answer: dict[str, Any] = {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {
                        "role": "assistant",
                        "content": distinct_text(body, generated),
                    },
                }
            ],
            "usage": {
                "prompt_tokens": n,
                "completion_tokens": generated,
                "prompt_tokens_details": {"cached_tokens": reused},
            },
            "timings": {
                "cache_n": reused,
                "prompt_n": processed,
                "prompt_ms": processed / self.rate,
                "predicted_n": generated,
                "predicted_ms": generated / self.gen_rate,
            },
        }
        return httpx.Response(200, json=answer)

    def _shifted(self, tokens: Sequence[int], generated: int) -> int:
        """The ``--cache-reuse`` slot (any prefix resumes with --swa-full)."""
        n = len(tokens)
        n_past = 0
        while n_past < min(n, len(self.cached)) and self.cached[n_past] == tokens[n_past]:
            n_past += 1
        n_past = reuse_chunks(self.cached, tokens, n_past, self.cache_reuse or 0)
        if n_past == n and n_past > 0:
            n_past -= 1  # the server evaluates at least one token
        # The generated tokens follow the prompt in the cache (unknown ids: never match).
        self.cached = [*tokens, *([None] * (max(generated, 1) - 1))]
        return n_past

    async def aclose(self) -> None:
        # Clients built on this transport close it when they finish (the gateway's
        # probe does, then its chat client goes on using it): stay usable. The
        # connections go with the process.
        return None
