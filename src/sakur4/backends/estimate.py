"""Token layouts estimated, for servers that cannot say how they render and tokenize a
chat request (Ollama, LM Studio, SGLang, TabbyAPI, any OpenAI-compatible server).

Each message is sized from its bytes (or, where the server tokenizes text, from its
content's exact token count) plus a per-message allowance for the template's role
markers; the sizes are then scaled by what the server itself counted for earlier
prompts (``usage.prompt_tokens``: the largest ratio of the last few is kept, so the
scale errs high) and a stated safety margin is added on top. The estimate is meant to
be an upper bound: a prompt it says fits, fits, as long as the server's counts keep to
the ratio already seen.

The tokens are stand-ins, not the server's: message ``i``'s are numbered from the
chain hash of ``messages[:i+1]``, so two prompts share stand-in tokens exactly as far
as they share whole messages. Reuse predicted from them stops at the first message
that changed (never inside it), so a prediction errs low; and a receipt's reuse is
only ever the server's own figure (``unverifiable`` where it gives none).
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from sakur4.backends.layout import MessageSpan, TokenLayout, prefix_hashes
from sakur4.backends.report import PromptReport
from sakur4.errors import InputError

# Bytes per token before calibration: BPE tokenizers of 100k+ entries give ~4 bytes a
# token on English prose and ~3 on code; 3 errs high until the server has counted.
BYTES_PER_TOKEN = 3.0
# Template tokens around each message (role markers, separators) and the generation
# prompt, when the template is not known: chatml spends 4-5 a message, Gemma 5, Llama 3 5.
MESSAGE_OVERHEAD = 8
GENERATION_OVERHEAD = 8
# The stated safety margin on top of the calibrated estimate.
MARGIN = 0.15
# Server counts kept for calibration; the largest ratio among them scales estimates.
SAMPLES = 8
# Calibration never shrinks estimates below this share of the byte estimate.
MIN_SCALE = 0.5

# Exact token counts of message contents, where the server tokenizes plain text.
ContentCounter = Callable[[Sequence[str]], Awaitable[Sequence[int]]]


def message_text(message: Any) -> str:
    """What of a message the template renders: role, name, text parts, tool calls."""
    if not isinstance(message, Mapping):
        return str(message)
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content
        )
    parts = [str(message.get("role", "")), str(message.get("name") or ""), str(content or "")]
    calls = message.get("tool_calls")
    if calls:
        parts.append(json.dumps(calls, sort_keys=True, ensure_ascii=False))
    return "\n".join(parts)


def _base(chain_hash: str) -> int:
    # 48 bits of the chain hash, shifted clear of small ids: stand-ins never collide
    # with one another in practice (they are compared only within one session's prompts).
    return int(chain_hash[:12], 16) << 20


class EstimatedLayouts:
    """Estimated layouts for one server, calibrated by what it counts."""

    def __init__(self, count_contents: ContentCounter | None = None) -> None:
        self.count_contents = count_contents
        self._ratios: deque[float] = deque(maxlen=SAMPLES)
        # The last request laid out: its messages, chain and raw (unscaled) size, so the
        # server's count of it calibrates the scale.
        self._last: tuple[Sequence[Any], tuple[str, ...], int] | None = None

    @property
    def scale(self) -> float:
        """Server tokens per estimated token: the largest recent ratio (1.0 before any)."""
        return max(max(self._ratios, default=1.0), MIN_SCALE)

    async def _raw_sizes(self, messages: Sequence[Any], tools: Any) -> tuple[list[int], int]:
        texts = [message_text(m) for m in messages]
        head = json.dumps(tools, ensure_ascii=False) if tools else ""
        if self.count_contents is not None:
            counted = list(await self.count_contents([head, *texts]))
            return [n + MESSAGE_OVERHEAD for n in counted[1:]], counted[0]
        sizes = [math.ceil(len(t.encode()) / BYTES_PER_TOKEN) + MESSAGE_OVERHEAD for t in texts]
        return sizes, math.ceil(len(head.encode()) / BYTES_PER_TOKEN)

    async def layout(self, body: Mapping[str, Any]) -> TokenLayout:
        """The estimated layout of this chat request body (see the module docstring)."""
        messages = body.get("messages")
        if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
            raise InputError("a chat request needs a non-empty list of messages")
        request = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        hashes = prefix_hashes(request)
        sizes, head = await self._raw_sizes(messages, request.get("tools"))
        self._last = (list(messages), hashes, head + sum(sizes) + GENERATION_OVERHEAD)
        factor = self.scale * (1 + MARGIN)
        tokens: list[range] = []
        spans: list[MessageSpan] = []
        start = 0
        for i, (m, h, size) in enumerate(zip(messages, hashes, sizes, strict=True)):
            n = math.ceil((size + (head if i == 0 else 0)) * factor)
            base = _base(h)
            tokens.append(range(base, base + n))
            role = str(m.get("role", "")) if isinstance(m, Mapping) else ""
            spans.append(MessageSpan(i, role, start, start + n, True, True))
            start += n
        tail = math.ceil(GENERATION_OVERHEAD * factor)
        tokens.append(range(_base(hashes[-1]) + (1 << 19), _base(hashes[-1]) + (1 << 19) + tail))
        context = json.dumps({k: v for k, v in request.items() if k != "messages"}, sort_keys=True)
        return TokenLayout(
            prompt="",
            tokens=tuple(t for r in tokens for t in r),
            spans=tuple(spans),
            generation_start=start,
            method="estimated",
            renders=0,
            tokenized_bytes=0,
            token_bytes=(),
            prefix_hashes=hashes,
            message_byte_ends=(),
            context=context,
        )

    def observe(self, body: Mapping[str, Any], report: PromptReport) -> None:
        """The server counted ``report.prompt_tokens`` for ``body``: if that is the request
        last laid out, the ratio of its count to the raw estimate calibrates the scale."""
        last = self._last
        messages = body.get("messages")
        if last is None or report.prompt_tokens is None or not isinstance(messages, list):
            return
        if messages != last[0]:
            return  # another request than the one laid out last (a retry of an older one)
        if last[2] > 0:
            self._ratios.append(report.prompt_tokens / last[2])

    def distrust(self, layout: TokenLayout) -> None:
        """Nothing is learned from renders here: the scale is what the server counted."""
