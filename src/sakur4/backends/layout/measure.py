"""Token layouts measured against one llama-server, with its own ``/apply-template`` and
``/tokenize`` (it renders with *its* template and tokenizes with *its* tokenizer).

For a chat request:

1. render the whole request (what the server will process), and find where each
   message ends in it from the template's wrappers (:mod:`.wrappers`; prefix renders
   where no proof holds) — or, once renders have confirmed it, build the prompt of a
   conversation that only grew without a render;
2. tokenize it with each token's byte offset (:mod:`.pieces`), and map each message's
   byte end to a token span (:mod:`.spans`).

The spans concatenate to exactly the prompt's tokens (BOS first), which is what the
server processes — the tests check that against the server's own reuse count.

Cached per backend (:mod:`.cache`): a growing conversation reuses the layout of its
longest known message prefix, finds the ends of the messages after it in the one render
(a message changed by a plan, and every unchanged one after it, is checked against its
wrapper, not rendered again), and tokenizes only the new text plus a few tokens of
overlap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sakur4.backends.layout.cache import LayoutCache, canonical
from sakur4.backends.layout.pieces import PieceTokenizer, Tokens
from sakur4.backends.layout.spans import MessageSpan, TokenLayout, role, spans_at
from sakur4.backends.layout.wrappers import Built, TemplateWrappers
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.errors import InputError

# Fields of a chat request that are not about rendering (the rest go to /apply-template).
_NOT_TEMPLATE = {"stream", "stream_options"}


class TokenLayouts:
    """Computes token layouts against one llama-server, caching message prefixes.

    ``verify=True`` also renders a prompt it could build and tokenizes the whole beside
    an incremental tokenization (the reference the shortcuts are tested against);
    ``one_render`` and ``pieces_by_id`` as in :class:`.TemplateWrappers` and
    :class:`.PieceTokenizer`."""

    def __init__(
        self,
        client: LlamaCppClient,
        *,
        max_layouts: int = 64,
        verify: bool = False,
        one_render: bool = True,
        pieces_by_id: bool = True,
    ) -> None:
        self.client = client
        self.verify = verify
        self.wrappers = TemplateWrappers(client, one_render=one_render)
        self.tokenizer = PieceTokenizer(client, pieces_by_id=pieces_by_id)
        self.cache = LayoutCache(max_layouts)
        # How each prompt's offsets came (the gateway benchmark reports it).
        self.piece_calls = self.tokenizer.calls

    async def layout(self, body: Mapping[str, Any]) -> TokenLayout:
        """The layout of the prompt the server builds for this chat request body."""
        messages = body.get("messages")
        if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
            raise InputError("a chat request needs a non-empty list of messages")
        request = {k: v for k, v in body.items() if k not in _NOT_TEMPLATE}
        context = canonical({k: v for k, v in request.items() if k != "messages"}).decode()
        hashes = self.cache.hashes(request, context)
        built = self._build(messages, hashes, context)
        base: TokenLayout | None
        if built is not None and self.wrappers.trusted(context) and not self.verify:
            full_b, base, k, ends = built
            full = full_b.decode("utf-8")
            renders = 0
        else:
            full = await self.client.apply_template(request)
            full_b = full.encode("utf-8")
            renders = 1
            base, k = self.cache.lookup(hashes, full_b, messages)
            known = list(base.message_byte_ends[:k]) if base else []
            ends, more = await self.wrappers.message_ends(request, context, known, full_b)
            renders += more
            self.wrappers.learn_render(context, messages, ends, full_b, built)

        lead, trail = await self.tokenizer.specials()
        tok: Tokens | None = None
        method: Literal["full", "incremental", "per-prefix"] = "full"
        if base is not None and base.spans[k - 1].clean_end:
            tok = await self.tokenizer.grown(base, k, full_b, lead, trail)
            method = "incremental" if tok is not None else "full"
        if tok is not None and self.verify:
            whole = await self.tokenizer.whole(full, full_b, lead, trail)
            if whole[0] != tok[0]:
                tok, method = whole, "full"  # the seam merged after all: trust the whole
        if tok is None:
            tok = await self.tokenizer.whole(full, full_b, lead, trail)
        tokens, offsets, sent = tok
        if offsets is None:
            result = await self._per_prefix(messages, full, tokens, ends, hashes, renders)
        else:
            # An incremental layout shares the base's offsets up to its messages[k - 1]:
            # the spans before that message are the base's (not mapped again each turn).
            same: tuple[MessageSpan, ...] = ()
            if method == "incremental" and base is not None:
                same = base.spans[: k - 1]
                if tuple(ends[: len(same)]) != base.message_byte_ends[: len(same)]:
                    same = ()
            spans, gen = spans_at(
                messages, ends, offsets, len(full_b), len(lead), len(tokens), same
            )
            result = TokenLayout(
                prompt=full,
                tokens=tokens,
                spans=spans,
                generation_start=gen,
                method=method,
                renders=renders,
                tokenized_bytes=sent,
                token_bytes=offsets,
                prefix_hashes=hashes,
                message_byte_ends=tuple(ends),
                context=context,
            )
        self.cache.remember(result)
        return result

    def distrust(self, layout: TokenLayout) -> None:
        """The server counted another prompt than ``layout``: render its context again
        from now on, and forget the layouts measured in it."""
        self.wrappers.distrust(layout.context)
        self.cache.forget(layout.context)

    def _build(
        self, messages: Sequence[Any], hashes: tuple[str, ...], context: str
    ) -> Built | None:
        """The prompt of a conversation that only grew, built from what the template's
        renders taught (None: not learned yet, or not a conversation that grew)."""
        if not self.wrappers.can_build(context, messages):
            return None
        base, k = self.cache.grown_from(hashes, context)
        return self.wrappers.build(messages, context, base, k)

    async def _per_prefix(
        self,
        messages: Sequence[Any],
        full: str,
        tokens: tuple[int, ...],
        ends: list[int | None],
        hashes: tuple[str, ...],
        renders: int,
    ) -> TokenLayout:
        """Fallback when the pieces do not spell the text: tokenize each prefix and keep
        a boundary only where its tokens are a prefix of the whole prompt's tokens."""
        full_b = full.encode("utf-8")
        lead, trail = await self.tokenizer.specials()
        sent = len(full_b)
        spans: list[MessageSpan] = []
        start = len(lead)
        for i, m in enumerate(messages):
            end_b = ends[i]
            end, clean = start, False
            if end_b is not None:
                sent += end_b
                pre = await self.client.tokenize(full_b[:end_b].decode("utf-8"), add_special=True)
                pre = pre[: len(pre) - len(trail)] if trail else pre
                if tuple(pre) == tokens[: len(pre)] and len(pre) >= start:
                    end, clean = len(pre), True
            spans.append(MessageSpan(i, role(m), start, end, clean, end_b is not None))
            start = end
        return TokenLayout(
            prompt=full,
            tokens=tokens,
            spans=tuple(spans),
            generation_start=start,
            method="per-prefix",
            renders=renders,
            tokenized_bytes=sent,
            token_bytes=(),
            prefix_hashes=hashes,
            message_byte_ends=tuple(ends),
        )
