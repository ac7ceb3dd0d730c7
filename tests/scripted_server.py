"""A scripted stand-in for llama-server, for tests of the turn pipeline without a real
server: one token per character, an exact-prefix cache that reports what it reused.

The real server runs these paths in tests/gateway; this one lets a test stage a turn's
conditions (a window of so many characters, the reuse reported) and read what was sent.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from probe_results import probe_result
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.probe import ProbeResult
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.turns.pipeline import TurnPipeline


class Scripted:
    """One token per character; an exact-prefix server that reports what it reused."""

    def __init__(self) -> None:
        self.last: str = ""
        self.chats = 0
        self.sent: list[dict[str, Any]] = []  # each chat request's body, as sent
        self.miscount = (
            0  # tokens the server's count of a prompt is off by (a template the pieces miss)
        )

    def render(self, body: dict[str, Any]) -> str:
        text = "".join(
            f"<{m['role']}>{m.get('content') or ''}</{m['role']}>" for m in body["messages"]
        )
        return text + ("<assistant>" if body.get("add_generation_prompt", True) else "")

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        path = request.url.path
        if path == "/apply-template":
            return httpx.Response(200, json={"prompt": self.render(body)})
        if path == "/tokenize":
            text = ("\x01" if body.get("add_special") else "") + body["content"]
            if body.get("with_pieces"):
                return httpx.Response(
                    200, json={"tokens": [{"id": ord(c), "piece": c} for c in text]}
                )
            return httpx.Response(200, json={"tokens": [ord(c) for c in text]})
        if path == "/v1/chat/completions":
            self.chats += 1
            self.sent.append(body)
            prompt = "\x01" + self.render(body)
            reused = 0
            while reused < min(len(prompt), len(self.last)) and prompt[reused] == self.last[reused]:
                reused += 1
            self.last = prompt
            return httpx.Response(
                200,
                json={
                    "choices": [{"message": {"role": "assistant", "content": "ok"}}],
                    "usage": {"prompt_tokens": len(prompt), "completion_tokens": 1},
                    "timings": {
                        "cache_n": reused,
                        "prompt_n": len(prompt) - reused + self.miscount,
                    },
                },
            )
        return httpx.Response(404, json={"error": {"code": 404, "message": path}})


def scripted_probe(n_ctx: int = 16384) -> ProbeResult:
    """What the probe finds of the scripted server: ``n_ctx`` tokens, any prefix resumes."""
    return probe_result(url="http://scripted", n_ctx=n_ctx, checkpoint_source="exact-prefix")


def scripted_pipeline(
    store: Store, settings: Settings | None = None, n_ctx: int = 16384
) -> tuple[TurnPipeline, Scripted]:
    """A turn pipeline in front of a scripted server, and the server."""
    server = Scripted()
    client = LlamaCppClient("http://scripted", timeout=5.0, transport=httpx.MockTransport(server))
    chosen = settings if settings is not None else Settings.load()
    return TurnPipeline(chosen, store, client, scripted_probe(n_ctx)), server
