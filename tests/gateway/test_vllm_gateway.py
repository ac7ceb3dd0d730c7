"""The gateway in front of the real vLLM (slow tier: ``-m vllm``), through the real
``openai`` and ``anthropic`` SDKs: a tool conversation that crosses the trigger, every
receipt's reuse equal to vLLM's own ``cached_tokens`` (and to its ``/metrics``
counters' deltas), and a prompt over ``max_model_len`` never sent."""

from __future__ import annotations

import asyncio
import json
import sysconfig
import uuid
from pathlib import Path
from typing import Any

import openai
import pytest

import anthropic
from sakur4.backends.vllm import VllmClient
from sakur4.backends.vllm_server import SERVED_MODEL, VllmServer
from sakur4.receipts import Receipt, list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
FILES = ["json/decoder.py", "json/encoder.py", "csv.py", "shlex.py", "textwrap.py", "glob.py"]
CACHED = "vllm:prompt_tokens_cached_total"


def source(name: str, chars: int) -> str:
    return (Path(sysconfig.get_paths()["stdlib"]) / name).read_text()[:chars]


def receipts_by_id(gw: Any, session: str) -> dict[int, Receipt]:
    store = open_store(gw.store)
    try:
        project = ensure_project(store, gw.project)
        found = list_receipts(store, project.id, session=session, limit=200)
    finally:
        store.close()
    return {r.id: r for r in found if r.id is not None}


def cached_total(url: str) -> float:
    async def read() -> float:
        async with VllmClient(url, timeout=30.0, model=SERVED_MODEL) as client:
            return (await client.cache_counters())[CACHED]

    return asyncio.run(read())


@pytest.mark.backend
@pytest.mark.vllm
def test_a_tool_conversation_past_the_trigger_reuse_is_cached_tokens(
    vllm_server: VllmServer, start_gateway: Any
) -> None:
    gw = start_gateway(vllm_server.url)
    session = f"tools-{uuid.uuid4()}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"Session {session}. You read code and answer briefly."}
    ]
    seen: dict[int, int] = {}  # receipt id -> cached_tokens the server reported
    with openai.OpenAI(
        base_url=gw.url + "/v1",
        api_key="unused",
        max_retries=0,
        timeout=600.0,
        default_headers={"X-Sakur4-Session": session},
    ) as client:
        for turn in range(9):
            name = FILES[turn % len(FILES)]
            messages.append({"role": "user", "content": f"Read {name} and summarise it."})
            cid = f"call_{turn}"
            call = {"name": "read_file", "arguments": json.dumps({"path": name})}
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": cid, "type": "function", "function": call}],
                }
            )
            messages.append({"role": "tool", "tool_call_id": cid, "content": source(name, 4000)})
            before = cached_total(vllm_server.url)
            raw = client.chat.completions.with_raw_response.create(
                model=SERVED_MODEL, messages=messages, max_tokens=2, tools=TOOLS, temperature=0
            )
            answer = raw.parse()
            assert answer.usage is not None
            assert answer.usage.prompt_tokens_details is not None
            cached = answer.usage.prompt_tokens_details.cached_tokens or 0
            assert cached_total(vllm_server.url) - before == cached, turn
            seen[int(raw.headers["x-sakur4-receipt"])] = cached
            messages.append({"role": "assistant", "content": f"{name} read."})

    receipts = receipts_by_id(gw, session)
    assert set(seen) <= set(receipts)
    for rid, cached in seen.items():
        r = receipts[rid]
        assert r.server_cached == cached, (r.turn, r.server_cached, cached)
        assert r.cache_verdict != "unverifiable"
        assert r.prompt_tokens <= 8192
    verdicts = [receipts[rid].verdict for rid in sorted(seen)]
    assert any(v in ("reclaimed", "stepping") for v in verdicts), verdicts  # it evicted
    assert any(cached > 0 for cached in seen.values())


@pytest.mark.backend
@pytest.mark.vllm
def test_anthropic_tool_turns_reuse_is_cache_read_input_tokens(
    vllm_server: VllmServer, start_gateway: Any
) -> None:
    gw = start_gateway(vllm_server.url)
    session = f"anthropic-{uuid.uuid4()}"
    messages: list[dict[str, Any]] = []
    seen: dict[int, int] = {}
    with anthropic.Anthropic(
        base_url=gw.url,
        api_key="unused",
        max_retries=0,
        timeout=600.0,
        default_headers={"X-Sakur4-Session": session},
    ) as client:
        for turn in range(3):
            name = FILES[turn]
            messages.append({"role": "user", "content": f"Read {name}."})
            tid = f"toolu_{turn}"
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": tid,
                            "name": "read_file",
                            "input": {"path": name},
                        }
                    ],
                }
            )
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tid, "content": source(name, 3000)}
                    ],
                }
            )
            raw = client.messages.with_raw_response.create(
                model=SERVED_MODEL,
                max_tokens=2,
                system=f"Session {session}. You read code.",
                messages=messages,
                tools=[{"name": "read_file", "input_schema": TOOLS[0]["function"]["parameters"]}],
            )
            answer = raw.parse()
            seen[int(raw.headers["x-sakur4-receipt"])] = answer.usage.cache_read_input_tokens or 0
            messages.append({"role": "assistant", "content": f"{name} read."})
    receipts = receipts_by_id(gw, session)
    for rid, cached in seen.items():
        assert receipts[rid].server_cached == cached, (receipts[rid].turn, cached)
    assert list(seen.values())[-1] > 0


@pytest.mark.backend
@pytest.mark.vllm
def test_a_prompt_over_max_model_len_is_never_sent(
    vllm_server: VllmServer, start_gateway: Any
) -> None:
    gw = start_gateway(vllm_server.url)
    huge = " ".join(source(name, 20000) for name in FILES)  # well over 8,192 tokens
    probed = len(gw.transport.sent)  # the probe's own requests
    with (
        openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0) as client,
        pytest.raises(openai.APIStatusError) as refused,
    ):
        client.chat.completions.create(
            model=SERVED_MODEL, messages=[{"role": "user", "content": huge}], max_tokens=2
        )
    assert 400 <= refused.value.status_code < 500
    assert len(gw.transport.sent) == probed  # nothing reached vLLM's chat route
    assert "everything older folded" in str(refused.value.body)
