"""A llama-server whose prefill is predicted, not run: for exploring policies quickly.

Chat calls are tokenized by the real server (its template and tokenizer, so the
prompts are exactly what it would process) and their reuse is predicted by the
checkpoint-ring model Sakur4 ships (:mod:`sakur4.backends.checkpoints`; with
``--swa-full`` any prefix resumes, which the same model gives with ``n_swa = 0``).
Everything else — the probe's cache experiment included — goes to the real server.

Figures from here are predictions: they rank policies in seconds instead of
hours on a loaded machine. The published table comes from real runs only; run the
same command with and without ``--simulate`` to compare the two.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from sakur4.backends import checkpoints
from sakur4.backends.checkpoints import CheckpointRules, SentPrompt, SlotPrediction
from sakur4.backends.layout import TokenLayouts
from sakur4.backends.llamacpp import LlamaCppClient

CHAT = "/v1/chat/completions"


class SimulatedChat(httpx.AsyncBaseTransport):
    """One slot of a server with ``rules``, answering chat calls from a prediction."""

    def __init__(
        self, url: str, rules: CheckpointRules, n_ctx: int, prefill_tok_s: float = 250.0
    ) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.client = LlamaCppClient(url, timeout=600.0, transport=httpx.AsyncHTTPTransport())
        self.layouts = TokenLayouts(self.client)
        self.rules = rules
        self.n_ctx = n_ctx
        self.rate = prefill_tok_s / 1000
        self.state = SlotPrediction(rules, 0, None, ())
        self.count = 0

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
        sent = SentPrompt(layout.tokens, layout.user_starts, generated=generated)
        # One request at a time, the model's own step (predict_slot replays a history).
        self.state = checkpoints._step(self.state, self.count, sent)
        self.count += 1
        reused = self.state.reuse[-1]
        processed = n - reused
        answer: dict[str, Any] = {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": "ok " * generated},
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
                "predicted_ms": 0.0,
            },
        }
        return httpx.Response(200, json=answer)

    async def aclose(self) -> None:
        # Clients built on this transport close it when they finish (the gateway's
        # probe does, then its chat client goes on using it): stay usable. The
        # connections go with the process.
        return None
