"""The Anthropic Messages API in the gateway's terms: OpenAI chat messages, both ways.

The turn pipeline records, plans and renders OpenAI chat messages, so a
``/v1/messages`` request is translated into a chat request first. The
translation follows llama.cpp's own (``server_chat_convert_anthropic_to_oai``)
wherever that does not lose text, so a prompt is the same whichever endpoint
reaches the server:

- ``system`` (a string, or ``text`` blocks concatenated) is the first message;
- ``tool_use`` blocks become ``tool_calls``, their ``input`` dumped the way the
  server dumps it (sorted keys, no spaces), so a round trip through the server's
  own conversion keeps the bytes; ``tool_result`` blocks become ``tool``
  messages; ``thinking`` becomes ``reasoning_content``;
- text blocks join with a blank line into one string (the engine renders strings);
- ``cache_control`` anywhere is dropped: the server caches every prefix itself,
  and a breakpoint there would only make the request differ between turns.

The way back (:func:`to_messages`) turns the rendered chat messages into a
``/v1/messages`` body the server converts back into exactly those messages.
Answers go the other way: :func:`message_from_chat` and :class:`EventsFromChat`
give Anthropic's message and its stream (``message_start``, ``ping``,
``content_block_start/delta/stop``, ``message_delta``, ``message_stop``), with
usage in Anthropic's vocabulary filled from what the server reported.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sakur4.backends.report import PromptReport
from sakur4.errors import InputError

# Request fields that mean the same on both APIs, passed through unchanged.
_SAME = ("temperature", "top_p", "top_k", "stream", "chat_template_kwargs")
# Fields with no meaning for a local server; dropped (metadata is not sent anywhere).
_DROPPED = {"metadata", "cache_control", "service_tier", "container", "mcp_servers", "betas"}

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}

# Anthropic's error types by HTTP status (the SDK's ErrorType values).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def dump_input(value: Any) -> str:
    """A tool call's arguments as the server writes them (nlohmann ``dump()``)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _blocks(content: Any, where: str) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InputError(f"{where} must be a string or a list of content blocks")
    for i, b in enumerate(content):
        if not isinstance(b, Mapping) or not isinstance(b.get("type"), str):
            raise InputError(f"{where}[{i}] must be an object with a string 'type'")
    return content


def _text_of(blocks: Sequence[Mapping[str, Any]], where: str) -> str:
    texts = []
    for i, b in enumerate(blocks):
        if b["type"] != "text":
            continue
        text = b.get("text")
        if not isinstance(text, str):
            raise InputError(f"{where}[{i}].text must be a string")
        texts.append(text)
    return "\n\n".join(texts)


def system_text(system: Any) -> str | None:
    """The system prompt as one string (blocks concatenated, as the server does)."""
    if system is None:
        return None
    if isinstance(system, str):
        return system
    blocks = _blocks(system, "system")
    return "".join(str(b.get("text") or "") for b in blocks if b["type"] == "text")


def _result_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    blocks = _blocks(content, where)
    return "".join(str(b.get("text") or "") for b in blocks if b["type"] == "text")


def _message(m: Any, i: int) -> list[dict[str, Any]]:
    where = f"messages[{i}]"
    # Claude Code also sends "system" messages mid-conversation; the server takes them.
    if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant", "system"):
        raise InputError(f"{where} must be an object with role 'user', 'assistant' or 'system'")
    role = str(m["role"])
    if "content" not in m:
        raise InputError(f"{where} has no 'content'")
    if isinstance(m["content"], str):
        # As the server does: a string stays one message, even an empty one.
        return [{"role": role, "content": m["content"]}]
    blocks = _blocks(m["content"], f"{where}.content")
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    thinking = []
    for j, b in enumerate(blocks):
        kind = b["type"]
        if kind == "tool_use" and role == "assistant":
            name, call_id = b.get("name"), b.get("id")
            if not isinstance(name, str) or not isinstance(call_id, str):
                raise InputError(f"{where}.content[{j}]: tool_use needs a string id and name")
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": dump_input(b.get("input") or {})},
                }
            )
        elif kind == "tool_result":
            call_id = b.get("tool_use_id")
            if not isinstance(call_id, str):
                raise InputError(f"{where}.content[{j}]: tool_result needs a string tool_use_id")
            text = _result_text(b.get("content"), f"{where}.content[{j}].content")
            if b.get("is_error"):
                text = f"[tool error] {text}"
            results.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif kind == "thinking":
            thinking.append(str(b.get("thinking") or ""))
        elif kind not in ("text", "redacted_thinking"):
            raise InputError(
                f"{where}.content[{j}]: block type {kind!r} is not supported by a local server"
            )
    text = _text_of(blocks, f"{where}.content")
    # Results first: they answer the calls of the message before, which is where a
    # chat template expects them; the text that came with them (a reminder) follows.
    out: list[dict[str, Any]] = list(results)
    if text or calls or thinking:
        msg: dict[str, Any] = {"role": role, "content": text}
        if calls:
            msg["tool_calls"] = calls
        if thinking:
            msg["reasoning_content"] = "".join(thinking)
        out.append(msg)
    return out


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise InputError("'tools' must be a list")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping) or not isinstance(t.get("name"), str):
            raise InputError(f"tools[{i}] must be an object with a string 'name'")
        out.append(
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": str(t.get("description") or ""),
                    "parameters": t.get("input_schema") or {},
                },
            }
        )
    return out


def _tool_choice(choice: Any) -> str | dict[str, Any] | None:
    if not isinstance(choice, Mapping):
        raise InputError("'tool_choice' must be an object with a 'type'")
    kind = choice.get("type")
    if kind == "auto":
        return "auto"
    if kind == "none":
        return "none"
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": str(choice.get("name") or "")}}
    raise InputError(f"tool_choice type {kind!r} is not one of auto, any, tool, none")


def to_chat(body: Any, *, count_only: bool = False) -> dict[str, Any]:
    """An Anthropic Messages request as an OpenAI chat request (raises InputError)."""
    if not isinstance(body, Mapping):
        raise InputError("the request body must be a JSON object")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise InputError("'messages' must be a non-empty list")
    messages: list[dict[str, Any]] = []
    system = system_text(body.get("system"))
    if system is not None:
        messages.append({"role": "system", "content": system})
    for i, m in enumerate(raw):
        messages.extend(_message(m, i))
    out: dict[str, Any] = {"messages": messages}
    if "model" in body:
        out["model"] = body["model"]
    if not count_only:
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise InputError("'max_tokens' must be a positive integer")
        out["max_tokens"] = max_tokens
    if body.get("tools"):
        out["tools"] = _tools(body["tools"])
    if "tool_choice" in body and body["tool_choice"] is not None:
        choice = _tool_choice(body["tool_choice"])
        if choice is not None:
            out["tool_choice"] = choice
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise InputError("'stop_sequences' must be a list of strings")
        out["stop"] = stops
    for key in _SAME:
        if key in body:
            out[key] = body[key]
    return out


# -- the way back: rendered chat messages as a /v1/messages body --------------


def _back(m: Mapping[str, Any]) -> dict[str, Any]:
    role, content = m.get("role"), m.get("content")
    if role == "tool":
        result = {"type": "tool_result", "tool_use_id": m.get("tool_call_id") or ""}
        return {"role": "user", "content": [{**result, "content": content or ""}]}
    calls = m.get("tool_calls") or []
    reasoning = m.get("reasoning_content")
    if not calls and not reasoning:
        return {"role": role, "content": content if isinstance(content, str) else ""}
    blocks: list[dict[str, Any]] = []
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if content:
        blocks.append({"type": "text", "text": content})
    for c in calls:
        fn = c.get("function") or {}
        args = _tool_input(fn.get("arguments"))
        blocks.append(
            {"type": "tool_use", "id": c.get("id") or "", "name": fn.get("name"), "input": args}
        )
    return {"role": role, "content": blocks}


def to_messages(chat: Mapping[str, Any], original: Mapping[str, Any]) -> dict[str, Any]:
    """The rendered chat request as a ``/v1/messages`` body for a server that serves it.

    ``original`` is the harness's request: its tools and options go as they came
    (minus ``cache_control`` and metadata); the messages are the rendered ones.
    """
    msgs = list(chat.get("messages") or [])
    out: dict[str, Any] = {
        k: v for k, v in original.items() if k not in ("messages", "system") and k not in _DROPPED
    }
    if msgs and msgs[0].get("role") == "system":
        out["system"] = str(msgs[0].get("content") or "")
        msgs = msgs[1:]
    out["messages"] = [_back(m) for m in msgs]
    if "tools" in out:
        out["tools"] = [{k: v for k, v in t.items() if k != "cache_control"} for t in out["tools"]]
    return out


# -- answers -------------------------------------------------------------------


def as_sent(chat: Mapping[str, Any]) -> dict[str, Any]:
    """The rendered chat request as the server will see it after a trip through
    ``/v1/messages``: the token layout is measured on this, so it is exact."""
    twin = to_chat(to_messages(chat, {}), count_only=True)["messages"]
    return {**chat, "messages": twin}


def as_asked(message: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """The answer named by the model the request asked for, as Anthropic's API names it:
    llama-server names its model file's path whatever was asked, and Claude Code warned
    of an unrecognised model (issue 41)."""
    asked = body.get("model")
    return {**message, "model": asked} if isinstance(asked, str) and asked else dict(message)


def message_id(chat_id: Any = None) -> str:
    return f"msg_{chat_id}" if isinstance(chat_id, str) and chat_id else f"msg_{uuid.uuid4().hex}"


def usage(report: PromptReport, output_tokens: int, prompt_tokens: int | None) -> dict[str, int]:
    """Anthropic usage from the server's report: reused → cache reads, the rest → input.

    The server reports no cache creation (every processed token enters its cache;
    nothing is billed for it), so that is 0. Unreported reuse is 0 reads and the
    whole prompt as input: counted as a full re-prefill, never guessed.
    """
    total = report.prompt_tokens if report.prompt_tokens is not None else prompt_tokens or 0
    reused = report.reused or 0
    processed = report.processed if report.processed is not None else total - reused
    return {
        "input_tokens": max(0, processed),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": max(0, reused),
        "output_tokens": max(0, output_tokens),
    }


def _tool_input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        value = None
    # Arguments that are not a JSON object stay visible to the harness, not dropped.
    return value if isinstance(value, dict) else {"_unparsed_arguments": str(arguments)}


def message_from_chat(
    answer: Mapping[str, Any], report: PromptReport, prompt_tokens: int | None, model: Any
) -> dict[str, Any]:
    """A non-streaming chat answer as an Anthropic message."""
    choices = answer.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    msg = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if msg.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": msg["reasoning_content"], "signature": ""})
    if msg.get("content"):
        content.append({"type": "text", "text": str(msg["content"])})
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": str(call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"),
                "name": str(fn.get("name") or ""),
                "input": _tool_input(fn.get("arguments")),
            }
        )
    reason = _STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn")
    if msg.get("tool_calls"):
        reason = "tool_use"
    used = answer.get("usage") or {}
    return {
        "id": message_id(answer.get("id")),
        "type": "message",
        "role": "assistant",
        "model": str(answer.get("model") or model or ""),
        "content": content,
        "stop_reason": reason,
        "stop_sequence": None,
        "usage": usage(report, int(used.get("completion_tokens") or 0), prompt_tokens),
    }


def sse(event: Mapping[str, Any]) -> str:
    """One Anthropic server-sent event: its type is also its event name."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


@dataclass
class EventsFromChat:
    """Turns a chat stream's chunks into Anthropic's event sequence, chunk by chunk."""

    model: str
    prompt_tokens: int
    msg_id: str = field(default_factory=message_id)
    _index: int = -1
    _open: str | None = None  # "text", "thinking" or "tool:<chat tool index>"
    _stop: str = "end_turn"
    _started: bool = False
    output_tokens: int = 0

    def start(self) -> Iterator[str]:
        self._started = True
        yield sse(
            {
                "type": "message_start",
                "message": {
                    "id": self.msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    # Before the server answers only the prompt's size is known; the
                    # server's reuse comes in message_delta.
                    "usage": {
                        "input_tokens": self.prompt_tokens,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                        "output_tokens": 0,
                    },
                },
            }
        )
        yield sse({"type": "ping"})

    def _switch(self, kind: str, block: dict[str, Any]) -> Iterator[str]:
        if self._open == kind:
            return
        yield from self._close()
        self._index += 1
        self._open = kind
        yield sse({"type": "content_block_start", "index": self._index, "content_block": block})

    def _close(self) -> Iterator[str]:
        if self._open is None:
            return
        if self._open == "thinking":
            delta = {"type": "signature_delta", "signature": ""}
            yield sse({"type": "content_block_delta", "index": self._index, "delta": delta})
        yield sse({"type": "content_block_stop", "index": self._index})
        self._open = None

    def chunk(self, payload: Mapping[str, Any]) -> Iterator[str]:
        used = payload.get("usage")
        if isinstance(used, Mapping) and used.get("completion_tokens") is not None:
            self.output_tokens = int(used["completion_tokens"])
        for choice in payload.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                yield from self._switch(
                    "thinking", {"type": "thinking", "thinking": "", "signature": ""}
                )
                d = {"type": "thinking_delta", "thinking": delta["reasoning_content"]}
                yield sse({"type": "content_block_delta", "index": self._index, "delta": d})
            if delta.get("content"):
                yield from self._switch("text", {"type": "text", "text": ""})
                d = {"type": "text_delta", "text": delta["content"]}
                yield sse({"type": "content_block_delta", "index": self._index, "delta": d})
            for call in delta.get("tool_calls") or []:
                key = f"tool:{call.get('index', 0)}"
                fn = call.get("function") or {}
                if self._open != key:
                    block = {
                        "type": "tool_use",
                        "id": str(call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"),
                        "name": str(fn.get("name") or ""),
                        "input": {},
                    }
                    yield from self._switch(key, block)
                if fn.get("arguments"):
                    d = {"type": "input_json_delta", "partial_json": fn["arguments"]}
                    yield sse({"type": "content_block_delta", "index": self._index, "delta": d})
            reason = choice.get("finish_reason")
            if reason:
                self._stop = _STOP_REASONS.get(str(reason), "end_turn")

    def finish(self, report: PromptReport) -> Iterator[str]:
        yield from self._close()
        final = usage(report, self.output_tokens, self.prompt_tokens)
        yield sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": self._stop, "stop_sequence": None},
                "usage": final,
            }
        )
        yield sse({"type": "message_stop"})


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}``."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def report_from_usage(used: Any) -> PromptReport:
    """What a ``/v1/messages`` answer says of the prompt (input excludes cache reads)."""
    if not isinstance(used, Mapping):
        return PromptReport(None, None, None, None, None)
    read = used.get("cache_read_input_tokens")
    fresh = used.get("input_tokens")
    created = used.get("cache_creation_input_tokens") or 0
    if not isinstance(read, int) or not isinstance(fresh, int):
        total = fresh if isinstance(fresh, int) else None
        return PromptReport(total, None, None, None, None)
    processed = fresh + int(created)
    return PromptReport(processed + read, processed, read, None, "usage")
