"""Fakes of the server kinds that cannot run here (SGLang needs CUDA; no Ollama or LM
Studio binary can be had): an httpx transport answering each kind's documented
endpoints in their documented shapes (sources cited in the clients' modules), with a
prefix cache that reuses the whole messages a request shares with the one before.

A fake shows only what its shapes show: that Sakur4 reads each kind's fields as
documented (a ``null`` that means "not reported", a window from ``/api/ps``), never
that the real server behaves so. The tests that use one say "fake" in their names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import httpx

FakeKind = Literal["sglang", "ollama", "lmstudio", "openai-compatible"]
MODEL = "fake-model"


def counted(message: Any) -> int:
    """The fake tokenizer: ~4 bytes a token, 4 template tokens a message."""
    return len(json.dumps(message, ensure_ascii=False).encode()) // 4 + 4


class FakeServer(httpx.AsyncBaseTransport):
    """One fake server of ``kind``. ``reports_reuse``: SGLang started with
    ``--enable-cache-report``, an Ollama with ``prompt_eval_cached_count`` (LM Studio and
    a generic server never report it). ``window``: the loaded context (Ollama: what
    ``/api/ps`` shows once a chat loaded the model; ``modelfile_ctx``: its ``num_ctx``)."""

    def __init__(
        self,
        kind: FakeKind,
        *,
        reports_reuse: bool = True,
        window: int | None = 8192,
        modelfile_ctx: int | None = None,
    ) -> None:
        self.kind = kind
        self.reports_reuse = reports_reuse
        self.window = window
        self.modelfile_ctx = modelfile_ctx
        self.loaded = kind != "ollama"  # Ollama loads a model on its first request
        self.last: list[Any] = []
        self.sent: list[dict[str, Any]] = []  # every chat request body
        self.headers: list[httpx.Headers] = []  # every chat request's headers

    def _routes(self) -> dict[str, Any]:
        card = {"id": MODEL, "object": "model", "owned_by": "someone"}
        routes: dict[str, Any] = {"/v1/models": {"object": "list", "data": [card]}}
        if self.kind == "sglang":
            card["owned_by"] = "sglang"
            routes["/get_model_info"] = {"model_path": MODEL, "is_generation": True}
            routes["/get_server_info"] = {"context_length": self.window, "version": "0.5.9"}
            routes["/health"] = None
        elif self.kind == "ollama":
            card["owned_by"] = "library"
            routes["/api/version"] = {"version": "0.40.1"}
            routes["/api/tags"] = {"models": [{"name": MODEL, "model": MODEL}]}
            loaded = [{"name": MODEL, "model": MODEL, "context_length": self.window}]
            routes["/api/ps"] = {"models": loaded if self.loaded else []}
        elif self.kind == "lmstudio":
            card["owned_by"] = "organization_owner"
            instances = [{"id": MODEL, "config": {"context_length": self.window}}]
            routes["/api/v1/models"] = {
                "models": [
                    {
                        "type": "llm",
                        "key": MODEL,
                        "max_context_length": 131072,
                        "loaded_instances": instances if self.window else [],
                    }
                ]
            }
        return routes

    def _usage(self, messages: Sequence[Any], tools: Any) -> dict[str, Any]:
        total = sum(counted(m) for m in messages) + (counted(tools) if tools else 0) + 4
        shared = 0
        for a, b in zip(self.last, messages, strict=False):
            if a != b:
                break
            shared += 1
        cached = min(sum(counted(m) for m in messages[:shared]), total - 1) if shared else 0
        self.last = list(messages)
        usage: dict[str, Any] = {
            "prompt_tokens": total,
            "completion_tokens": 1,
            "total_tokens": total + 1,
        }
        if self.kind == "sglang":
            # usage_processor._details_if_cached: details only when the flag is on and > 0.
            on = self.reports_reuse and cached > 0
            usage["prompt_tokens_details"] = {"cached_tokens": cached} if on else None
        elif self.kind == "ollama" and self.reports_reuse:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return usage

    def _chat(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.sent.append(body)
        self.headers.append(request.headers)
        self.loaded = True
        usage = self._usage(body["messages"], body.get("tools"))
        message = {"role": "assistant", "content": "ok"}
        if not body.get("stream"):
            return httpx.Response(
                200,
                json={
                    "id": "c1",
                    "object": "chat.completion",
                    "model": MODEL,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": usage,
                },
            )
        events = [
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "model": MODEL,
                "choices": [{"index": 0, "delta": message, "finish_reason": "stop"}],
            },
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(
                {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": MODEL,
                    "choices": [],
                    "usage": usage,
                }
            )
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=text.encode()
        )

    def _tokenize(self, request: httpx.Request) -> httpx.Response:
        prompt = json.loads(request.content)["prompt"]
        texts = prompt if isinstance(prompt, list) else [prompt]
        counts = [len(t.encode()) // 4 for t in texts]
        tokens = [list(range(n)) for n in counts]
        if not isinstance(prompt, list):
            return httpx.Response(200, json={"tokens": tokens[0], "count": counts[0]})
        return httpx.Response(200, json={"tokens": tokens, "count": counts, "max_model_len": -1})

    def _show(self, request: httpx.Request) -> httpx.Response:
        params = f"temperature 0.7\nnum_ctx {self.modelfile_ctx}" if self.modelfile_ctx else ""
        return httpx.Response(
            200,
            json={
                "parameters": params,
                "details": {"family": "gemma3"},
                "model_info": {"gemma3.context_length": 131072},
            },
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/chat/completions" and request.method == "POST":
            return self._chat(request)
        if self.kind == "sglang" and path == "/v1/tokenize":
            return self._tokenize(request)
        if self.kind == "ollama" and path == "/api/show":
            return self._show(request)
        routes = self._routes()
        if path in routes and request.method == "GET":
            found = routes[path]
            return httpx.Response(200) if found is None else httpx.Response(200, json=found)
        return httpx.Response(404, json={"detail": "Not Found"})


def usage_of(sent: Mapping[str, Any]) -> int:
    """What the fake counts for a request body (its prompt_tokens)."""
    tools = sent.get("tools")
    return sum(counted(m) for m in sent["messages"]) + (counted(tools) if tools else 0) + 4
