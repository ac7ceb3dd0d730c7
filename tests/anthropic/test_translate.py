"""Anthropic Messages ⇄ OpenAI chat: requests, answers, streams and errors.

The answer shapes are checked by the ``anthropic`` SDK's own models, not by
hand-written expectations of them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from sakur4.backends.report import UNREPORTED, PromptReport
from sakur4.errors import InputError
from sakur4.gateway.translate import (
    EventsFromChat,
    as_sent,
    dump_input,
    error_body,
    message_from_chat,
    report_from_usage,
    to_chat,
    to_messages,
)

EVENTS: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


def _tool_turn() -> dict[str, Any]:
    return {
        "model": "local",
        "max_tokens": 64,
        "system": [
            {"type": "text", "text": "You are terse. ", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Answer in English."},
        ],
        "metadata": {"user_id": "someone"},
        "stop_sequences": ["\n\nHuman:"],
        "tools": [
            {
                "name": "read",
                "description": "Read a file",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "tool_choice": {"type": "any"},
        "messages": [
            {"role": "user", "content": "Open a.py"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should read it.", "signature": "x"},
                    {"type": "text", "text": "Reading."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "read",
                        "input": {"z": 1, "a": "é"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "print(1)"}],
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": "<system-reminder>be brief</system-reminder>"},
                ],
            },
        ],
    }


def test_request_becomes_chat_messages_with_results_after_their_calls() -> None:
    chat = to_chat(_tool_turn())
    assert chat["messages"] == [
        {"role": "system", "content": "You are terse. Answer in English."},
        {"role": "user", "content": "Open a.py"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"a":"é","z":1}'},
                }
            ],
            "reasoning_content": "I should read it.",
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "print(1)"},
        {"role": "user", "content": "<system-reminder>be brief</system-reminder>"},
    ]
    assert chat["tools"][0]["function"]["parameters"]["type"] == "object"
    assert chat["tool_choice"] == "required"
    assert chat["stop"] == ["\n\nHuman:"]
    assert chat["max_tokens"] == 64
    # cache_control and metadata are accepted and go nowhere.
    assert "cache_control" not in json.dumps(chat)
    assert "metadata" not in chat
    assert "someone" not in json.dumps(chat)


def test_tool_arguments_are_dumped_as_the_server_dumps_them() -> None:
    assert dump_input({"b": [1, 2], "a": {"y": None, "x": "ü"}}) == (
        '{"a":{"x":"ü","y":null},"b":[1,2]}'
    )


def test_way_back_round_trips_the_rendered_messages() -> None:
    original = _tool_turn()
    chat = to_chat(original)
    body = to_messages(chat, original)
    assert body["system"] == "You are terse. Answer in English."
    assert "metadata" not in body
    assert "cache_control" not in json.dumps(body)
    # What the server converts the body into is what was rendered.
    assert to_chat(body)["messages"] == chat["messages"]


def test_as_sent_keeps_one_message_per_rendered_message() -> None:
    chat = {
        "messages": [
            {"role": "system", "content": "head"},
            {"role": "user", "content": ""},
            {"role": "assistant", "content": None},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": "[folded]"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "out"},
            {"role": "system", "content": "anchors"},
        ]
    }
    sent = as_sent(chat)["messages"]
    assert len(sent) == len(chat["messages"])
    # A folded call's text is not JSON: it travels visibly, the same both ways.
    assert sent[3]["tool_calls"][0]["function"]["arguments"] == (
        '{"_unparsed_arguments":"[folded]"}'
    )
    assert as_sent({"messages": sent})["messages"] == sent


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "must be a JSON object"),
        ({"max_tokens": 5}, "'messages' must be a non-empty list"),
        ({"messages": [{"role": "user", "content": "x"}]}, "'max_tokens' must be a positive"),
        ({"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "role 'user',"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": 3}]}, "string or a list"),
        (
            {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
            "block type 'image' is not supported",
        ),
        (
            {
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "sometimes"},
            },
            "tool_choice type 'sometimes'",
        ),
    ],
)
def test_bad_requests_get_one_clear_line(body: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        to_chat(body)


def test_count_only_needs_no_max_tokens() -> None:
    chat = to_chat({"messages": [{"role": "user", "content": "x"}]}, count_only=True)
    assert "max_tokens" not in chat


def test_answer_is_an_sdk_message_with_the_servers_reuse() -> None:
    answer = {
        "id": "chatcmpl-1",
        "model": "gemma",
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "content": "Let me look.",
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "read", "arguments": '{"path":"a"}'}},
                        {"id": "c2", "function": {"name": "read", "arguments": "not json"}},
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 7},
    }
    report = PromptReport(100, 30, 70, 12.0, "timings")
    msg = Message.model_validate(message_from_chat(answer, report, 100, "local"))
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use", "tool_use"]
    assert msg.content[1].input == {"path": "a"}  # type: ignore[union-attr]
    # Arguments that are not JSON stay visible to the harness.
    assert msg.content[2].input == {"_unparsed_arguments": "not json"}  # type: ignore[union-attr]
    assert msg.usage.input_tokens == 30
    assert msg.usage.cache_read_input_tokens == 70
    assert msg.usage.cache_creation_input_tokens == 0
    assert msg.usage.output_tokens == 7


def test_unreported_reuse_is_counted_as_input_never_as_a_cache_read() -> None:
    answer = {"choices": [{"finish_reason": "length", "message": {"content": "x"}}]}
    msg = Message.model_validate(message_from_chat(answer, UNREPORTED, 55, "m"))
    assert msg.stop_reason == "max_tokens"
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens) == (55, 0)


def _events(stream: str) -> list[Any]:
    out = []
    for raw in stream.strip().split("\n\n"):
        name, data = raw.split("\n")
        assert name.startswith("event: ")
        assert data.startswith("data: ")
        event = json.loads(data[len("data: ") :])
        assert name[len("event: ") :] == event["type"]
        if event["type"] != "ping":
            out.append(EVENTS.validate_python(event))
        else:
            out.append(event)
    return out


def test_stream_follows_anthropics_event_sequence() -> None:
    t = EventsFromChat(model="gemma", prompt_tokens=120)
    chunks = [
        {"choices": [{"delta": {"reasoning_content": "hmm"}}]},
        {"choices": [{"delta": {"content": "Hi"}}]},
        {"choices": [{"delta": {"content": " there"}}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "c1", "function": {"name": "read", "arguments": ""}}
                        ]
                    }
                }
            ]
        },
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"p'}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '":1}'}}]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"completion_tokens": 9}},
    ]
    text = "".join(t.start())
    for c in chunks:
        text += "".join(t.chunk(c))
    text += "".join(t.finish(PromptReport(120, 20, 100, 5.0, "timings")))
    events = _events(text)
    kinds = [e["type"] if isinstance(e, dict) else e.type for e in events]
    assert kinds == [
        "message_start",
        "ping",
        "content_block_start",  # thinking
        "content_block_delta",
        "content_block_delta",  # signature
        "content_block_stop",
        "content_block_start",  # text
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",  # tool_use
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert [e.index for e in events if getattr(e, "type", "") == "content_block_start"] == [0, 1, 2]
    delta = events[-2]
    assert delta.delta.stop_reason == "tool_use"
    assert (delta.usage.input_tokens, delta.usage.cache_read_input_tokens) == (20, 100)
    assert delta.usage.output_tokens == 9


def test_errors_take_anthropics_shape() -> None:
    from anthropic.types.shared import ErrorResponse

    for status, kind in [
        (400, "invalid_request_error"),
        (404, "not_found_error"),
        (503, "overloaded_error"),
        (500, "api_error"),
    ]:
        body = ErrorResponse.model_validate(error_body(status, "sakur4: no"))
        assert body.error.type == kind
        assert body.error.message == "sakur4: no"


def test_messages_usage_reads_as_a_prompt_report() -> None:
    r = report_from_usage({"input_tokens": 12, "cache_read_input_tokens": 88, "output_tokens": 3})
    assert (r.prompt_tokens, r.processed, r.reused, r.verifiable) == (100, 12, 88, True)
    assert not report_from_usage({"input_tokens": 12}).verifiable
