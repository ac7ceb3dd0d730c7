"""A chat request checked whole before anything of it is stored (issue 15, row 7).

What is refused here never reaches the store: a refused request used to leave its
messages behind (three refused 15 MB requests grew a store by 103 MB). What is
accepted is bounded: at most :data:`MAX_MESSAGES` messages, each at most
:data:`MAX_MESSAGE_BYTES` as JSON, so one stored episode (its text and the message
kept as sent, plus its full-text index entry) stays within a few MiB.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from sakur4.errors import InputError, TooLarge

# OpenAI's chat roles; "developer" is its current name for the system prompt.
ROLES = ("system", "developer", "user", "assistant", "tool")
# A harness conversation of ten thousand messages is far past what any local window
# shows; a request with more is refused with the limit (a 100k-message request once
# added 30 MB to the store before its refusal).
MAX_MESSAGES = 10_000
# One message as JSON: 1 MiB is ~250k tokens, more than any local server's window,
# so a larger message could never be shown whole; it is refused with the limit.
MAX_MESSAGE_BYTES = 1024 * 1024


# JSON's widest form of one character: a control character escaped as \u0000.
_WIDEST = 6


def _size(message: Mapping[str, Any]) -> int:
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _surely_within(message: Mapping[str, Any], limit: int) -> bool:
    """True when ``message`` cannot exceed ``limit`` bytes as JSON, from the lengths of
    its strings at their widest: encoding every message was 11 ms a turn at 100k
    tokens, and only one whose strings come near the limit needs it."""
    bound = 0
    stack: list[Any] = [message]
    while stack:
        v = stack.pop()
        t = type(v)  # the exact types first: an ABC's isinstance was most of the walk
        if t is str or (t is not dict and isinstance(v, str)):
            bound += _WIDEST * len(v) + 2
        elif t is dict or isinstance(v, Mapping):
            bound += 2 + len(v)
            stack.extend(v.keys())
            stack.extend(v.values())
        elif t is list or isinstance(v, list):
            bound += 2 + len(v)
            stack.extend(v)
        elif (
            v is None
            or isinstance(v, (bool, float))
            or (isinstance(v, int) and -1 << 60 < v < 1 << 60)
        ):
            bound += 24
        else:
            return False  # a huge integer, or what JSON cannot hold: encode it to know
        if bound > limit:
            return False
    return True


def _content(i: int, content: Any) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InputError(
            f"messages[{i}].content must be a string, null or a list of parts, "
            f"not {type(content).__name__}"
        )
    for j, part in enumerate(content):
        if not isinstance(part, (str, Mapping)):
            raise InputError(f"messages[{i}].content[{j}] must be a part object")


def _tool_calls(i: int, calls: Any) -> None:
    if calls is None:
        return
    if not isinstance(calls, list):
        raise InputError(f"messages[{i}].tool_calls must be a list")
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(name, str) or not name:
            raise InputError(f"messages[{i}].tool_calls[{j}] needs a function with a name")
        if not isinstance(call.get("id", ""), str):
            raise InputError(f"messages[{i}].tool_calls[{j}].id must be a string")
        if not isinstance(fn.get("arguments", ""), (str, Mapping)):
            raise InputError(f"messages[{i}].tool_calls[{j}].function.arguments must be a string")


class Checked:
    """The messages of the last few requests that passed :func:`chat_messages`, newest
    first. A harness resends its whole conversation every turn: a message equal
    (``==``) to the one at its place in a passed request of the same conversation
    (the same first message) passes again unchecked (every check is a function of the
    message's value; checking every message was ~9% of a turn at 100k tokens). The
    pipeline never changes a request's messages in place (repairs and rewrites copy),
    so what is held is what passed."""

    def __init__(self, keep: int = 8) -> None:
        self._passed: deque[list[Any]] = deque(maxlen=keep)

    def like(self, messages: Sequence[Any]) -> list[Any]:
        """The newest passed request that opens as ``messages`` does (empty: none)."""
        for old in self._passed:
            if old[0] == messages[0]:
                return old
        return []

    def passed(self, messages: list[Any]) -> None:
        self._passed.appendleft(list(messages))


def chat_messages(body: Any, checked: Checked | None = None) -> list[dict[str, Any]]:
    """The request's messages, each checked; raises InputError (or TooLarge) naming the first
    message that cannot be served. ``checked``: requests that passed before (see
    :class:`Checked`), remembered there once this one passes."""
    if not isinstance(body, dict):
        raise InputError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InputError("'messages' must be a non-empty list")
    if len(messages) > MAX_MESSAGES:
        raise TooLarge(
            f"the request has {len(messages):,} messages; the gateway stores at most "
            f"{MAX_MESSAGES:,} for one conversation"
        )
    known = checked.like(messages) if checked is not None else []
    n = len(known)
    for i, m in enumerate(messages):
        if i < n and m == known[i]:
            continue  # passed as it is in this conversation's last request
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise InputError(f"messages[{i}] must be an object with a string 'role'")
        role = m["role"]
        if role not in ROLES:
            raise InputError(f"messages[{i}] has role {role!r}; the roles are {', '.join(ROLES)}")
        _content(i, m.get("content"))
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InputError(f"messages[{i}] is a tool result without its 'tool_call_id'")
        elif role == "assistant":
            _tool_calls(i, m.get("tool_calls"))
        elif m.get("tool_calls"):
            raise InputError(f"messages[{i}]: only an assistant message makes tool calls")
        if _surely_within(m, MAX_MESSAGE_BYTES):
            continue
        size = _size(m)
        if size > MAX_MESSAGE_BYTES:
            raise TooLarge(
                f"messages[{i}] is {size:,} bytes as JSON; one message may be at most "
                f"{MAX_MESSAGE_BYTES:,} (more than any local window holds)"
            )
    if checked is not None:
        checked.passed(messages)
    return messages
