"""Token layouts from vLLM: each message's exact token span, from the server's own
template and tokenizer.

vLLM's ``/tokenize`` takes chat ``messages`` and answers the tokens of the prompt it
would build, so the layout is read, not estimated: the whole request once (with the
generation prompt, as a chat request renders), and each message prefix
``messages[:i+1]`` (without it) whose end is not known yet. Message ``i`` ends where
its prefix's tokens stop agreeing with the whole prompt's: a prefix that is all a
prefix of the whole ends cleanly; one that is not (the template renders this message
differently once more follow, or the tokenizer merged across the boundary) ends at the
first difference, marked not clean. A prefix the template refuses alone (roles that
must alternate) gets an empty span, its tokens counted in the next.

Cached per chain hash of the message prefix (:func:`~sakur4.backends.layout.prefix_hashes`):
a growing conversation asks only for its new messages' prefixes; a cached end is used
only where the span's own tokens hash the same as when it was measured.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from sakur4.backends.layout import MessageSpan, TokenLayout, prefix_hashes
from sakur4.backends.vllm import VllmClient
from sakur4.errors import BackendRefused, InputError

# Message prefixes whose ends are remembered (a few long conversations' worth).
MAX_ENDS = 16384


def _digest(tokens: Sequence[int]) -> bytes:
    return hashlib.blake2b(json.dumps(list(tokens)).encode(), digest_size=16).digest()


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class VllmLayouts:
    """Computes token layouts against one vLLM server, caching message ends."""

    def __init__(self, client: VllmClient) -> None:
        self.client = client
        # chain hash of messages[:i+1] -> (start, end, clean, digest of tokens[start:end])
        self._ends: OrderedDict[str, tuple[int, int, bool, bytes]] = OrderedDict()

    async def layout(self, body: Mapping[str, Any]) -> TokenLayout:
        """The layout of the prompt the server builds for this chat request body."""
        messages = body.get("messages")
        if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
            raise InputError("a chat request needs a non-empty list of messages")
        request = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        context = json.dumps({k: v for k, v in request.items() if k != "messages"}, sort_keys=True)
        hashes = prefix_hashes(request)
        whole = await self.client.tokenize_chat(request)
        tokens = whole.tokens
        calls = 1
        spans: list[MessageSpan] = []
        start = 0
        for i, m in enumerate(messages):
            role = str(m.get("role", "")) if isinstance(m, Mapping) else ""
            known = self._ends.get(hashes[i])
            if (
                known is not None
                and known[0] == start
                and known[1] <= len(tokens)
                and _digest(tokens[start : known[1]]) == known[3]
            ):
                self._ends.move_to_end(hashes[i])
                spans.append(MessageSpan(i, role, start, known[1], known[2], True))
                start = known[1]
                continue
            calls += 1
            try:
                prefix = await self.client.tokenize_chat(
                    {**request, "messages": list(messages[: i + 1])}, add_generation_prompt=False
                )
            except BackendRefused:
                spans.append(MessageSpan(i, role, start, start, False, False))
                continue
            common = _common(prefix.tokens, tokens)
            clean = common == len(prefix.tokens)
            end = max(start, common)
            spans.append(MessageSpan(i, role, start, end, clean, True))
            self._ends[hashes[i]] = (start, end, clean, _digest(tokens[start:end]))
            start = end
        while len(self._ends) > MAX_ENDS:
            self._ends.popitem(last=False)
        return TokenLayout(
            prompt="",  # vLLM gives tokens; the text is not needed to place cuts
            tokens=tokens,
            spans=tuple(spans),
            generation_start=start,
            method="incremental" if calls == 1 else "per-prefix",
            renders=calls,
            tokenized_bytes=0,
            token_bytes=(),
            prefix_hashes=hashes,
            message_byte_ends=(),
            context=context,
        )

    def distrust(self, layout: TokenLayout) -> None:
        """The server counted another prompt than ``layout``: measure its messages again."""
        for h in layout.prefix_hashes:
            self._ends.pop(h, None)
