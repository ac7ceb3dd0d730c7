"""Turning an OpenAI-style chat message into the fields of an episode.

The payload keeps the message exactly (canonical JSON); the content is the text a
person would search for: the message text, plus ``name(arguments)`` for each
tool call, so recall finds a call by its tool or its arguments.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sakur4.errors import InputError
from sakur4.vocabulary import Kind


@dataclass(frozen=True)
class MessageFields:
    role: str
    kind: Kind
    tool_name: str | None
    tool_call_ids: tuple[
        str, ...
    ]  # the calls an assistant message makes, or the one a result answers
    content: str
    payload: str
    content_hash: str


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    raise InputError(
        f"message content must be a string or a list of parts, not {type(content).__name__}"
    )


def text_of(message: Mapping[str, Any]) -> str:
    """A message's text: its string content, or its text parts joined ("" otherwise)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def message_fields(message: Mapping[str, Any]) -> MessageFields:
    """The episode fields of one chat message; malformed messages are an InputError."""
    if not isinstance(message, Mapping):
        raise InputError(f"a message must be an object, not {type(message).__name__}")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise InputError("a message needs a string 'role'")
    text = _text(message.get("content"))
    payload = canonical_json(dict(message))
    calls = message.get("tool_calls") or []
    if role == "tool":
        call_id = message.get("tool_call_id")
        name = message.get("name")
        return MessageFields(
            role=role,
            kind=Kind.TOOL_RESULT,
            tool_name=name if isinstance(name, str) else None,
            tool_call_ids=(str(call_id),) if call_id else (),
            content=text,
            payload=payload,
            content_hash=text_hash(payload),
        )
    if calls:
        if not isinstance(calls, list):
            raise InputError("'tool_calls' must be a list")
        names, ids, lines = [], [], [text] if text else []
        for call in calls:
            fn = call.get("function", {}) if isinstance(call, Mapping) else {}
            name = str(fn.get("name", "")) if isinstance(fn, Mapping) else ""
            args = fn.get("arguments", "") if isinstance(fn, Mapping) else ""
            names.append(name)
            if isinstance(call, Mapping) and call.get("id"):
                ids.append(str(call["id"]))
            lines.append(f"{name}({args if isinstance(args, str) else canonical_json(args)})")
        return MessageFields(
            role=role,
            kind=Kind.TOOL_CALL,
            tool_name=", ".join(n for n in names if n) or None,
            tool_call_ids=tuple(ids),
            content="\n".join(lines),
            payload=payload,
            content_hash=text_hash(payload),
        )
    return MessageFields(
        role=role,
        kind=Kind.MESSAGE,
        tool_name=None,
        tool_call_ids=(),
        content=text,
        payload=payload,
        content_hash=text_hash(payload),
    )
