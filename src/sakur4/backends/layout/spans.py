"""What a token layout is: each chat message's token span in the prompt the server
processes, and how byte ends become token spans once every token's byte offset is known.

A message boundary is *clean* when a token starts exactly there. A token that straddles
a boundary (the tokenizer merged across it) ends the earlier span at that token's start
and marks it not clean. The spans concatenate to exactly the prompt's tokens (BOS
first), which is what the server processes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class MessageSpan:
    """Message ``index`` occupies tokens ``[start, end)`` of the prompt.

    ``clean_end``: the message's text ends exactly on a token boundary, so a prompt
    that keeps messages ``0..index`` and changes what follows keeps tokens
    ``[0, end)`` identical. ``rendered_alone``: the template rendered the prefix
    ending here as a prefix of the whole (if not, the span is empty and its text
    lives in the next span).
    """

    index: int
    role: str
    start: int
    end: int
    clean_end: bool
    rendered_alone: bool


@dataclass(frozen=True, slots=True)
class TokenLayout:
    """The prompt the server will process for a chat request, message by message."""

    prompt: str
    tokens: tuple[int, ...]
    spans: tuple[MessageSpan, ...]
    generation_start: int
    method: Literal["full", "incremental", "per-prefix", "estimated"]
    renders: int
    tokenized_bytes: int
    # Internal: the byte offset where each token's text starts (specials added by the
    # server have no text and share the offset of what follows), and the chain hashes.
    token_bytes: tuple[int, ...] = field(repr=False)
    prefix_hashes: tuple[str, ...] = field(repr=False)
    message_byte_ends: tuple[int | None, ...] = field(repr=False)
    # The request without its messages, canonical: the template's other inputs.
    context: str = field(default="", repr=False)

    @property
    def user_starts(self) -> tuple[int, ...]:
        """Where each user message starts: the server places checkpoints at these."""
        return tuple(s.start for s in self.spans if s.role == "user" and s.rendered_alone)


def role(message: Any) -> str:
    """A wire message's role ("" for what is not a message)."""
    return str(message.get("role", "")) if isinstance(message, Mapping) else ""


def spans_at(
    messages: Sequence[Any],
    ends: Sequence[int | None],
    offsets: Sequence[int],
    n_bytes: int,
    n_lead: int,
    n_tokens: int,
    known: tuple[MessageSpan, ...] = (),
) -> tuple[tuple[MessageSpan, ...], int]:
    """Each message's span from its byte end (None: unknown, an empty span) and each
    token's byte offset; and where the generation prompt starts.

    ``known``: the spans of the first messages, mapped already on the same offsets."""
    spans: list[MessageSpan] = list(known)
    start = known[-1].end if known else n_lead
    # Offsets never decrease: the specials after the text are the tokens at its end.
    text_end = bisect_left(offsets, n_bytes, lo=n_lead, hi=n_tokens)
    for i in range(len(known), len(messages)):
        m = messages[i]
        end_b = ends[i]
        if end_b is None:
            spans.append(MessageSpan(i, role(m), start, start, False, False))
            continue
        # First token whose text starts at or after the boundary.
        t = bisect_left(offsets, end_b, lo=n_lead, hi=text_end)
        clean = offsets[t] == end_b if t < text_end else end_b == n_bytes
        if not clean:
            t -= 1  # token t-1 straddles the boundary: it belongs to what follows
        end = max(start, t)
        spans.append(MessageSpan(i, role(m), start, end, clean, True))
        start = end
    return tuple(spans), start
