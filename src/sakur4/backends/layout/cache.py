"""The layout cache: recent token layouts, found again by the message prefix a new
request shares with them.

Keyed by a hash chain over the messages (:func:`prefix_hashes`): entry ``k`` of a
request's chain names its first ``k + 1`` messages with its template fields, so a
growing conversation finds the layout of its longest known prefix in one lookup a
message. Bounded: the least recently used layout goes first.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from sakur4.backends.layout.spans import TokenLayout, role


def canonical(value: Any) -> bytes:
    """``value`` as JSON with sorted keys: equal values give equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def prefix_hashes(
    body: Mapping[str, Any], known: tuple[Sequence[Any], tuple[str, ...]] | None = None
) -> tuple[str, ...]:
    """A hash chain over the messages: entry ``k`` identifies ``messages[:k+1]`` plus the
    request's template fields, so two requests sharing a message prefix share entries.

    ``known``: an earlier request's messages and chain with the same template fields;
    the entries of the messages equal to its own (``==``, no serialising) are reused.
    """
    messages = body["messages"]
    same = 0
    if known is not None:
        for a, b in zip(known[0], messages, strict=False):
            if a != b:
                break
            same += 1
    out = list(known[1][:same]) if known is not None else []
    if same:
        digest = bytes.fromhex(out[-1])
    else:
        digest = hashlib.sha256(canonical({k: v for k, v in body.items() if k == "tools"})).digest()
    for m in messages[same:]:
        h = hashlib.sha256(digest + canonical(m))
        digest = h.digest()
        out.append(h.hexdigest())
    return tuple(out)


class LayoutCache:
    """At most ``max_layouts`` layouts, each found by any entry of its chain."""

    def __init__(self, max_layouts: int = 64) -> None:
        self._max = max_layouts
        self._recent: OrderedDict[int, TokenLayout] = OrderedDict()
        self._by_hash: dict[str, tuple[int, int]] = {}  # chain hash -> (layout id, k)
        self._next_id = 0
        # The last chain per first message, so a turn hashes only its new messages.
        self._chains: OrderedDict[str, tuple[Sequence[Any], tuple[str, ...]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._recent)

    def hashes(self, request: Mapping[str, Any], context: str) -> tuple[str, ...]:
        """The chain of ``request`` (its template fields are ``context``), reusing the
        entries of the last request with the same context and first message."""
        messages = request["messages"]
        key = context + "\0" + canonical(messages[0]).decode()
        hashes = prefix_hashes(request, self._chains.get(key))
        self._chains[key] = (messages, hashes)
        self._chains.move_to_end(key)
        while len(self._chains) > self._max:
            self._chains.popitem(last=False)
        return hashes

    def lookup(
        self, hashes: tuple[str, ...], full_b: bytes, messages: Sequence[Any]
    ) -> tuple[TokenLayout | None, int]:
        """The cached layout sharing the longest message prefix whose text still matches
        the prompt ``full_b``, and how many messages it shares (0: none).

        A prefix ending in an assistant message is not reused: its end was measured
        in a request where something else (or nothing) followed it.
        """
        for k in range(len(hashes), 0, -1):
            if role(messages[k - 1]) == "assistant":
                continue
            hit = self._by_hash.get(hashes[k - 1])
            if hit is None:
                continue
            layout = self._recent.get(hit[0])
            if layout is None:
                continue
            end = layout.message_byte_ends[k - 1]
            if end is not None and full_b[:end] == layout.prompt.encode("utf-8")[:end]:
                self._recent.move_to_end(hit[0])
                return layout, k
        return None, 0

    def grown_from(self, hashes: tuple[str, ...], context: str) -> tuple[TokenLayout | None, int]:
        """The cached layout of the same context that shares the most messages with this
        request short of all of them (before its prompt is known), and how many."""
        for j in range(len(hashes) - 1, 0, -1):
            hit = self._by_hash.get(hashes[j - 1])
            layout = self._recent.get(hit[0]) if hit else None
            if layout is not None and layout.context == context:
                return layout, j
        return None, 0

    def remember(self, layout: TokenLayout) -> None:
        """Keep ``layout`` (the oldest goes past the bound); one without token offsets
        (measured per prefix) cannot be extended and is not kept."""
        if not layout.token_bytes:
            return
        lid = self._next_id
        self._next_id += 1
        self._recent[lid] = layout
        for k, h in enumerate(layout.prefix_hashes, start=1):
            self._by_hash[h] = (lid, k)
        while len(self._recent) > self._max:
            self._drop(next(iter(self._recent)))

    def forget(self, context: str) -> None:
        """Drop every layout measured in ``context``."""
        for lid in [i for i, old in self._recent.items() if old.context == context]:
            self._drop(lid)

    def _drop(self, lid: int) -> None:
        for h in self._recent.pop(lid).prefix_hashes:
            if self._by_hash.get(h, (None,))[0] == lid:
                del self._by_hash[h]
