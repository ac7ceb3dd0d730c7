"""The model the gateway lists: a llama-server started with ``-m FILE`` lists its model
by the file's path, which the harnesses showed as the model's name (Claude Code warned
``unrecognized_model``, issue 41). The gateway lists the file's stem, and still serves
whatever name a request gives. On the real llama-server, through the ``openai`` SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

import anthropic
from sakur4.backends.kinds import server_kind
from sakur4.backends.launcher import LlamaServer
from sakur4.gateway.openai import clean_model_id, served_listing

PATH = "/home/someone/.cache/sakur4/models/gemma3-270m-q4_k_m.gguf"


def test_a_model_file_is_listed_by_its_stem_and_other_names_pass() -> None:
    assert clean_model_id(PATH) == "gemma3-270m-q4_k_m"
    assert clean_model_id("C:\\models\\Qwen3-8B-Q4_K_M.GGUF") == "Qwen3-8B-Q4_K_M"
    for name in ("my-alias", "Qwen/Qwen3-0.6B", "gemma3:270m"):
        assert clean_model_id(name) == name
    listing = {
        "object": "list",
        "models": [{"name": PATH, "model": PATH, "format": "gguf"}],
        "data": [{"id": PATH, "object": "model", "owned_by": "llamacpp"}],
    }
    served = served_listing(listing, server_kind("llama.cpp"))
    assert [m["id"] for m in served["data"]] == ["gemma3-270m-q4_k_m"]
    assert served["models"][0]["name"] == served["models"][0]["model"] == "gemma3-270m-q4_k_m"
    assert served["models"][0]["format"] == "gguf"
    assert listing["data"][0]["id"] == PATH  # the backend's own listing is not changed
    # A server that checks the name a request gives (vLLM serving a GGUF file by its
    # path) keeps its listing: the stem would be refused there.
    assert served_listing(listing, server_kind("vllm")) == listing


@pytest.mark.backend
def test_the_gateway_lists_the_stem_and_serves_any_name(
    llama_ring: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring.url)
    with openai.OpenAI(
        base_url=gw.url + "/v1", api_key="unused", max_retries=0, timeout=300
    ) as client:
        (listed,) = client.models.list().data
        assert listed.id == Path(llama_ring.model).stem
        for name in (listed.id, str(llama_ring.model), "anything"):
            answer = client.chat.completions.create(
                model=name, max_tokens=2, messages=[{"role": "user", "content": "Say ok."}]
            )
            assert answer.choices


@pytest.mark.backend
def test_a_messages_answer_names_the_model_asked_for(
    llama_ring: LlamaServer, start_gateway: Any
) -> None:
    """llama-server names its model file's path in every answer, whatever was asked;
    Anthropic's API (and Claude Code, which checks it) names the model asked for."""
    gw = start_gateway(llama_ring.url)
    asked = Path(llama_ring.model).stem
    said = [{"role": "user", "content": "Say ok."}]
    with anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0) as client:
        plain = client.messages.create(model=asked, max_tokens=2, messages=said)
        assert plain.model == asked
        with client.messages.stream(model=asked, max_tokens=2, messages=said) as stream:
            assert stream.get_final_message().model == asked
