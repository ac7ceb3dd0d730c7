"""Identifying servers other than llama.cpp from their documented endpoints.

No vLLM, SGLang, Ollama or TabbyAPI server runs here, so these answer with the
shapes their documentation and source give (cited in sakur4/backends/identify.py);
llama.cpp itself is identified against the real server in test_probe.py."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from sakur4.backends.http import HttpBackend
from sakur4.backends.identify import Identity, identify
from sakur4.errors import BackendUnavailable

NOT_FOUND = {"detail": "Not Found"}


def serve(routes: Mapping[str, Any]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path in routes:
            return httpx.Response(200, json=routes[request.url.path])
        return httpx.Response(404, json=NOT_FOUND)

    return httpx.MockTransport(handler)


def who(routes: Mapping[str, Any]) -> Identity:
    async def go() -> Identity:
        async with HttpBackend("http://h:1/v1", timeout=1, transport=serve(routes)) as http:
            return await identify(http)

    return asyncio.run(go())


def test_vllm() -> None:
    card = {"id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm", "max_model_len": 32768}
    got = who({"/version": {"version": "0.11.0"}, "/v1/models": {"data": [card]}})
    assert got == Identity("vllm", version="0.11.0", model="Qwen/Qwen3-8B", n_ctx=32768)


def test_sglang() -> None:
    got = who(
        {
            "/get_model_info": {"model_path": "qwen/qwen2.5-0.5b", "is_generation": True},
            "/get_server_info": {"context_length": 32768, "version": "0.5.2"},
            "/v1/models": {"data": [{"id": "qwen/qwen2.5-0.5b", "owned_by": "sglang"}]},
        }
    )
    assert got == Identity("sglang", version="0.5.2", model="qwen/qwen2.5-0.5b", n_ctx=32768)


def test_ollama() -> None:
    got = who(
        {"/api/version": {"version": "0.12.6"}, "/api/tags": {"models": [{"name": "gemma3"}]}}
    )
    assert got == Identity("ollama", version="0.12.6", model="gemma3")


def test_tabbyapi() -> None:
    card = {"id": "Qwen-exl2", "owned_by": "tabbyAPI", "parameters": {"max_seq_len": 16384}}
    got = who({"/v1/model": card, "/v1/models": {"data": [card]}})
    assert got == Identity("tabbyapi", model="Qwen-exl2", n_ctx=16384)


def test_generic_openai_compatible() -> None:
    got = who({"/v1/models": {"data": [{"id": "m", "owned_by": "someone"}]}})
    assert got == Identity("openai-compatible", model="m")


def test_nothing_known_answers() -> None:
    assert who({}) == Identity("unknown")


def test_a_server_that_is_down_is_an_error_not_an_unknown_kind() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async def go() -> Identity:
        async with HttpBackend("http://h:1", timeout=1, transport=httpx.MockTransport(down)) as h:
            return await identify(h)

    with pytest.raises(BackendUnavailable, match="cannot connect"):
        asyncio.run(go())
