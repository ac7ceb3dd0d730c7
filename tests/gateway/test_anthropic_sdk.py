"""The Anthropic Messages API through the gateway, driven by the official ``anthropic`` SDK
against the real llama-server: plain and streamed, tools, errors, and both upstreams
(the server's own ``/v1/messages``, and chat completions when it has none)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import anthropic
from gateway_receipts import receipts_of
from sakur4.backends.launcher import LlamaServer
from sakur4.receipts import list_receipts
from sakur4.store import open_store
from sakur4.store.projects import ensure_project

SESSION = "sdk-session"
TOOLS: list[Any] = [
    {
        "name": "read_file",
        "description": "Read a file of the project",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


def _client(gw: Any, session: str = SESSION) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=gw.url,
        api_key="unused",
        max_retries=0,
        default_headers={"X-Sakur4-Session": session},
    )


def _conversation(client: anthropic.Anthropic) -> None:
    system: Any = [
        {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
    ]
    history: list[Any] = [{"role": "user", "content": "Read a.py please."}]
    raw = client.messages.with_raw_response.create(
        model="local",
        max_tokens=8,
        system=system,
        tools=TOOLS,
        tool_choice={"type": "auto"},
        stop_sequences=["\n\n\n"],
        metadata={"user_id": "tester"},
        messages=history,
    )
    first = raw.parse()
    assert raw.headers["x-sakur4-receipt"]
    assert first.type == "message"
    assert first.stop_reason in ("end_turn", "max_tokens", "tool_use", "stop_sequence")
    assert first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0) > 0
    # The harness ran the tool; the result goes back as a tool_result block.
    history += [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading it."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "read_file",
                    "input": {"path": "a.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": "print('hello')\n" * 20,
                }
            ],
        },
    ]
    with client.messages.stream(
        model="local", max_tokens=8, system=system, tools=TOOLS, messages=history
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert "message_delta" in kinds
    # Reuse in Anthropic's vocabulary, from what the server reported: the second turn
    # extends the first, so the server read most of it from its cache.
    assert (final.usage.cache_read_input_tokens or 0) > 0
    count = client.messages.count_tokens(
        model="local", system=system, messages=history, tools=TOOLS
    )
    assert count.input_tokens > 0
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="local", max_tokens=0, messages=history)
    assert bad.value.body["type"] == "error"  # type: ignore[index]
    assert "max_tokens" in bad.value.body["error"]["message"]  # type: ignore[index]


def _check(gw: Any, upstream: str) -> None:
    receipts = receipts_of(gw, SESSION)
    assert [r.turn for r in receipts] == [1, 2]
    for r in receipts:
        assert not r.detail.get("failed"), r.as_dict()
        assert r.detail["upstream"] == upstream
        assert r.cache_verdict != "unverifiable"
    assert receipts[1].server_cached >= receipts[1].predicted_reuse - 1
    assert receipts[1].server_cached > 0
    # A tool_result block is a tool-result episode, recorded like the OpenAI route's.
    store = open_store(gw.store)
    try:
        kinds = [r[0] for r in store.query("SELECT kind FROM episodic_stream ORDER BY id")]
    finally:
        store.close()
    assert "tool_result" in kinds


@pytest.mark.backend
def test_messages_forwarded_to_the_servers_own_api(
    llama_ring: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring.url)
    with _client(gw) as client:
        _conversation(client)
    _check(gw, "messages")
    assert len(gw.transport.sent_messages) == 2
    assert not gw.transport.sent  # nothing went to chat completions
    # The kind's own fields go too: the slot the session's state is in (the scheduler's
    # choice; llama-server's Messages route honours it) and cache_prompt.
    for sent in gw.transport.sent_messages:
        assert sent.get("id_slot") == 0
        assert sent.get("cache_prompt") is True


@pytest.mark.backend
def test_messages_translated_when_the_server_has_no_messages_api(
    llama_ring: LlamaServer, start_gateway: Any
) -> None:
    gw = start_gateway(llama_ring.url, hide_messages_api=True)
    with _client(gw) as client:
        _conversation(client)
    _check(gw, "chat")
    assert len(gw.transport.sent) == 2
    assert not gw.transport.sent_messages


def _anthropic_tools() -> list[Any]:
    from sakur4.demo.scenario import TOOLS as CHAT_TOOLS

    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "input_schema": t["function"]["parameters"],
        }
        for t in CHAT_TOOLS
    ]


@pytest.mark.backend
def test_tool_conversation_until_the_gateway_evicts(
    llama_ring_cms: LlamaServer, start_gateway: Any
) -> None:
    """The scripted coding session (tool calls and results), as Anthropic messages through
    the SDK: the gateway steps old results down, the server resumes, folds reopen."""
    from replayed import replay
    from sakur4.anchors import pin_anchor
    from sakur4.demo.scenario import build_session
    from sakur4.episodes import open_fold
    from sakur4.gateway.translate import to_messages

    gw = start_gateway(llama_ring_cms.url)
    tools = _anthropic_tools()
    store = open_store(gw.store)
    client = _client(gw, "sdk-evicts")
    try:
        project = ensure_project(store, gw.project)
        for n, request in enumerate(replay(build_session(turns=12, file_chars=2600))):
            if request.pin:
                pin_anchor(store, project.id, request.pin, priority=10)
            body = to_messages({"messages": request.messages}, {})
            kwargs: dict[str, Any] = {
                "model": "local",
                "max_tokens": 2,
                "system": body["system"],
                "messages": body["messages"],
                "tools": tools,
            }
            if n % 2:
                with client.messages.stream(**kwargs) as stream:
                    assert stream.get_final_message().type == "message"
            else:
                assert client.messages.create(**kwargs).type == "message"
        receipts = list_receipts(store, project.id, session="sdk-evicts", limit=1000)
        assert receipts
        for r in receipts:
            assert not r.detail.get("failed"), r.as_dict()
            assert r.cache_verdict != "unverifiable"
        events = [r for r in receipts if r.verdict in ("reclaimed", "stepping")]
        assert len(events) >= 2, [(r.turn, r.prompt_tokens, r.verdict) for r in receipts]
        for r in receipts[1:]:
            assert r.server_cached is not None
            assert r.server_cached >= (r.predicted_reuse or 0) - 1, r.as_dict()
        # The pinned anchor is in every prompt sent once pinned.
        sent = gw.transport.sent_messages
        pinned_from = next(i for i, b in enumerate(sent) if "Correction" in json.dumps(b))
        for b in sent[pinned_from:]:
            assert "[anchor " in json.dumps(b)
        # Every episode stepped down reopens.
        stepped = {s["episode"] for r in receipts for s in r.steps if s["to"] != "dropped"}
        assert stepped
        for episode_id in stepped:
            assert open_fold(store, project.id, episode_id).content
    finally:
        client.close()
        store.close()
