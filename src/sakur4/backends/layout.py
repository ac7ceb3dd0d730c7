"""Token layout: the exact token span of each chat message in the prompt the server builds.

The server renders messages with *its* template and tokenizes with *its*
tokenizer, so the layout is computed with the server's own ``/apply-template``
and ``/tokenize``:

1. render the whole request (what the server will process). Message ``i`` ends
   where the prefix ``messages[:i+1]`` rendered alone (no generation prompt) ends,
   when that is a prefix of the whole. Rendering every prefix costs one call a
   message and grows with the conversation, so the ends come from the one render
   where a proof allows: each message's text in the render is its *wrapper* (the
   template's bytes before and after the content, learned from a prefix render of an
   earlier message of the same kind) around its content, byte for byte. A message
   whose bytes are not exactly wrapper + content (a template that renders this
   message differently, tool calls, a kind not seen yet) is measured with prefix
   renders, and its wrapper learned. (A template that renders a message differently
   once more follow it, e.g. one that folds the system prompt into the first user
   turn, gives no boundary there: that message gets an empty span and
   ``rendered_alone=False``.)
2. tokenize the whole prompt with each token's piece (its bytes), giving every
   token's byte offset: ids alone, with pieces this model's earlier answers gave
   (:mod:`sakur4.backends.pieces`; a few unknown ones asked for), where those join to
   exactly the prompt's bytes, else ``/tokenize`` with pieces. A message boundary is
   *clean* when a token starts exactly there. A token that
   straddles a boundary (the tokenizer merged across it) ends the earlier span at
   that token's start and marks it not clean.

The spans concatenate to exactly the prompt's tokens (BOS first), which is what
the server processes — the tests check that against the server's own reuse count.

Cached per backend: a growing conversation reuses the layout of its longest
known message prefix (keyed by a hash chain over the messages), finds the ends of
the messages after it in the one render (a message changed by a plan, and every
unchanged one after it, is checked against its wrapper, not rendered again), and
tokenizes only the new text plus a few tokens of overlap; the overlap must
tokenize to the same tokens, otherwise the whole prompt is tokenized again.
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Literal

from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.pieces import Identity, PieceCache
from sakur4.errors import BackendRefused, InputError

# Tokens re-tokenized before a cached boundary to check the seam did not merge.
OVERLAP_TOKENS = 8
# Renders that must agree byte for byte with a prompt built from learned pieces before
# a template context's prompts are built without rendering.
CONFIRMATIONS = 2
# Ids without a known piece are asked for in one call (``/tokenize`` of the ids) when
# they are at most one in this many tokens of the text, else the text is tokenized with
# pieces. Measured here: with pieces costs 1.4-1.8 us a token more than ids alone (12.8k
# tokens 45 vs 27 ms, 100k 463 vs 285 ms); the pieces of N ids cost ~1.2 ms + 1-2.4 us an
# id (64 ids 1.3 ms, 1,000 3.9, 4,550 12), so at the bound they cost under half of what
# the pieces call would add (and a fetch spares the ids call already made).
TOKENS_PER_FETCH = 4
# Fields of a chat request that are not about rendering (the rest go to /apply-template).
_NOT_TEMPLATE = {"stream", "stream_options"}


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


def _canonical(value: Any) -> bytes:
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
        digest = hashlib.sha256(
            _canonical({k: v for k, v in body.items() if k == "tools"})
        ).digest()
    for m in messages[same:]:
        h = hashlib.sha256(digest + _canonical(m))
        digest = h.digest()
        out.append(h.hexdigest())
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Wrapper:
    """What a template renders around the contents of a run of messages (usually one;
    see the module docstring): their bytes are ``parts[0] + content_1 + parts[1] + ...
    + content_m + parts[m]``."""

    parts: tuple[bytes, ...]

    def end_after(self, messages: Sequence[Any], full_b: bytes, start: int) -> int | None:
        """Where ``messages``, starting at ``start``, end if their bytes there are exactly
        this wrapper around their contents (as sent, or trimmed as some templates do)."""
        if len(messages) != len(self.parts) - 1 or not full_b.startswith(self.parts[0], start):
            return None
        return self._rest(messages, full_b, start + len(self.parts[0]), 0)

    def _rest(self, messages: Sequence[Any], full_b: bytes, pos: int, k: int) -> int | None:
        if k == len(messages):
            return pos
        after = self.parts[k + 1]
        for content in _contents(messages[k]):
            if full_b.startswith(content + after, pos):
                end = self._rest(messages, full_b, pos + len(content) + len(after), k + 1)
                if end is not None:
                    return end
        return None

    def start_before(self, messages: Sequence[Any], full_b: bytes, end: int) -> int | None:
        """Where ``messages``, ending at ``end``, start, by the same proof."""
        for content in _contents(messages[0]) if len(messages) == 1 else []:
            piece = self.parts[0] + content + self.parts[1]
            if end >= len(piece) and full_b.endswith(piece, 0, end):
                return end - len(piece)
        return None


def _contents(message: Any) -> list[bytes]:
    """The ways a template may render a message's content: as sent, or trimmed."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if content is None:
        return [b""]
    if not isinstance(content, str):
        return []  # content parts: the template joins them its own way
    out = [content.encode("utf-8")]
    trimmed = content.strip().encode("utf-8")
    return out if trimmed == out[0] else [*out, trimmed]


def _learn(messages: Sequence[Any], piece: bytes) -> Wrapper | None:
    """The wrapper of measured messages: their bytes around the one place each content
    is, in order (None when a content is empty or not found exactly once)."""
    parts: list[bytes] = []
    pos = 0
    for m in messages:
        for content in _contents(m):
            if content and piece.count(content, pos) == 1:
                at = piece.index(content, pos)
                parts.append(piece[pos:at])
                pos = at + len(content)
                break
        else:
            return None
    parts.append(piece[pos:])
    return Wrapper(tuple(parts))


Kind = tuple[bool, str, bool]


def _kind(messages: Sequence[Any], i: int) -> Kind:
    """Messages of one kind share a wrapper: the first (it carries the template's
    preamble), and then by role and whether it carries tool calls."""
    m = messages[i]
    calls = bool(m.get("tool_calls")) if isinstance(m, Mapping) else False
    return i == 0, _role(m), calls


class TokenLayouts:
    """Computes token layouts against one llama-server, caching message prefixes.

    ``one_render=False`` finds every message end with prefix renders (the reference
    the one-render ends are tested against); ``pieces_by_id=False`` always tokenizes
    with pieces (the reference for pieces from the cache)."""

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
        self.one_render = one_render
        self.pieces_by_id = pieces_by_id
        # Per template context (the request without its messages): each kind's wrapper.
        # A run of several messages has a wrapper where the renders could not split it.
        self._wrappers: dict[str, dict[tuple[Kind, ...], Wrapper]] = {}
        self._max = max_layouts
        self._recent: OrderedDict[int, TokenLayout] = OrderedDict()
        self._by_hash: dict[str, tuple[int, int]] = {}  # chain hash -> (layout id, k)
        self._specials: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._next_id = 0
        # Per template context: the bytes after the last message (the generation
        # prompt), whether each kind's content renders trimmed, and how many renders
        # confirmed a constructed prompt byte for byte (None: one did not).
        self._tails: dict[str, bytes] = {}
        self._trims: dict[str, dict[Kind, bool]] = {}
        self._confirmed: dict[str, int | None] = {}
        # The last chain per first message, so a turn hashes only its new messages.
        self._chains: OrderedDict[str, tuple[Sequence[Any], tuple[str, ...]]] = OrderedDict()
        # The model's token pieces, learned from the server's answers (first sight of a
        # conversation tokenizes ids alone when they are known), and how offsets came.
        self.pieces = PieceCache()
        self.piece_calls: Counter[str] = Counter()

    async def layout(self, body: Mapping[str, Any]) -> TokenLayout:
        """The layout of the prompt the server builds for this chat request body."""
        messages = body.get("messages")
        if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
            raise InputError("a chat request needs a non-empty list of messages")
        request = {k: v for k, v in body.items() if k not in _NOT_TEMPLATE}
        context = _canonical({k: v for k, v in request.items() if k != "messages"}).decode()
        hashes = self._hashes(request, context)
        built = self._construct(messages, hashes, context)
        trusted = (self._confirmed.get(context) or 0) >= CONFIRMATIONS
        base: TokenLayout | None
        if built is not None and trusted and not self.verify:
            full_b, base, k, ends = built
            full = full_b.decode("utf-8")
            renders = 0
        else:
            full = await self.client.apply_template(request)
            full_b = full.encode("utf-8")
            renders = 1
            base, k = self._lookup(hashes, full_b, messages)
            known = list(base.message_byte_ends[:k]) if base else []
            ends, more = await self._message_ends(request, known, full_b)
            renders += more
            self._learn_construction(context, messages, ends, full_b, built)

        lead, trail = await self._special_tokens()
        tok = None
        method: Literal["full", "incremental", "per-prefix"] = "full"
        if base is not None and base.spans[k - 1].clean_end:
            tok = await self._incremental(base, k, full_b, lead, trail)
            method = "incremental" if tok is not None else "full"
        if tok is not None and self.verify:
            whole = await self._full(full, full_b, lead, trail)
            if whole[0] != tok[0]:
                tok, method = whole, "full"  # the seam merged after all: trust the whole
        if tok is None:
            tok = await self._full(full, full_b, lead, trail)
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
            spans, gen = _spans(messages, ends, offsets, len(full_b), len(lead), len(tokens), same)
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
        self._remember(result)
        return result

    def distrust(self, layout: TokenLayout) -> None:
        """The server counted another prompt than ``layout``: render its context again
        from now on, and forget the layouts measured in it."""
        self._confirmed[layout.context] = None
        for lid in [i for i, old in self._recent.items() if old.context == layout.context]:
            for h in self._recent.pop(lid).prefix_hashes:
                if self._by_hash.get(h, (None,))[0] == lid:
                    del self._by_hash[h]

    # -- a prompt built without a render -------------------------------------------------

    def _hashes(self, request: Mapping[str, Any], context: str) -> tuple[str, ...]:
        messages = request["messages"]
        key = context + "\0" + _canonical(messages[0]).decode()
        hashes = prefix_hashes(request, self._chains.get(key))
        self._chains[key] = (messages, hashes)
        self._chains.move_to_end(key)
        while len(self._chains) > self._max:
            self._chains.popitem(last=False)
        return hashes

    def _construct(
        self, messages: Sequence[Any], hashes: tuple[str, ...], context: str
    ) -> tuple[bytes, TokenLayout, int, list[int | None]] | None:
        """The prompt of a conversation that only grew, without asking the server: the
        cached prompt up to its last unchanged message, then each new message as its
        kind's wrapper around its content, then the generation prompt.

        Only where every piece was learned from this context's renders; the result is
        trusted once renders have confirmed constructions byte for byte
        (``CONFIRMATIONS``) and none has disagreed, and the server's own count of
        every prompt sent is checked against it afterwards (:meth:`distrust`)."""
        tail = self._tails.get(context)
        wrappers = self._wrappers.get(context)
        if tail is None or not wrappers or _role(messages[-1]) == "assistant":
            return None
        base, k = None, 0
        for j in range(len(messages) - 1, 0, -1):
            hit = self._by_hash.get(hashes[j - 1])
            layout = self._recent.get(hit[0]) if hit else None
            if layout is not None and layout.context == context:
                base, k = layout, j
                break
        if base is None or _role(messages[k - 1]) == "assistant":
            return None  # an assistant message's end was measured with another follower
        end = base.message_byte_ends[k - 1]
        if end is None or not base.spans[k - 1].clean_end:
            return None
        trims = self._trims.get(context, {})
        pieces = [base.prompt.encode("utf-8")[:end]]
        ends: list[int | None] = list(base.message_byte_ends[:k])
        pos = end
        n, i = len(messages), k
        while i < n:
            # One message, or a run the renders could not split (as in _message_ends).
            j = i
            w = wrappers.get((_kind(messages, i),))
            if w is None:
                while j < n - 1 and _role(messages[j]) == "assistant":
                    j += 1
                w = wrappers.get(tuple(_kind(messages, x) for x in range(i, j + 1)))
                if w is None or j == i:
                    return None
            piece = [w.parts[0]]
            for x in range(i, j + 1):
                kind, variants = _kind(messages, x), _contents(messages[x])
                if not variants:
                    return None
                if len(variants) > 1:
                    if kind not in trims:
                        return None
                    variants = variants[1:] if trims[kind] else variants[:1]
                piece += [variants[0], w.parts[x - i + 1]]
            pieces += piece
            pos += sum(len(b) for b in piece)
            ends += [None] * (j - i) + [pos]
            i = j + 1
        pieces.append(tail)
        return b"".join(pieces), base, k, ends

    def _learn_construction(
        self,
        context: str,
        messages: Sequence[Any],
        ends: Sequence[int | None],
        full_b: bytes,
        built: tuple[bytes, TokenLayout, int, list[int | None]] | None,
    ) -> None:
        """After a render: learn the generation prompt and how each kind's content is
        rendered, and hold the construction of this request (if there was one) against
        the render."""
        last = ends[-1]
        if last is not None and _role(messages[-1]) != "assistant":
            tail = full_b[last:]
            if self._tails.setdefault(context, tail) != tail:
                self._confirmed[context] = None  # the generation prompt varies
        wrappers = self._wrappers.get(context, {})
        trims = self._trims.setdefault(context, {})
        for i, end in enumerate(ends):
            start = ends[i - 1] if i > 0 else 0
            kind = _kind(messages, i)
            w = wrappers.get((kind,))
            if end is None or start is None or w is None or kind in trims:
                continue  # checked before the contents are encoded: most messages stop here
            variants = _contents(messages[i])
            if len(variants) < 2:
                continue
            piece = full_b[start:end]
            for trimmed, content in zip((False, True), variants, strict=True):
                if piece == w.parts[0] + content + w.parts[1]:
                    trims[kind] = trimmed
                    break
        if built is None or self._confirmed.get(context, 0) is None:
            return
        if built[0] == full_b and built[3] == list(ends):
            self._confirmed[context] = (self._confirmed.get(context) or 0) + 1
        else:
            self._confirmed[context] = None

    # -- rendering -----------------------------------------------------------------

    async def _render(self, request: Mapping[str, Any], messages: list[Any]) -> bytes | None:
        part = {**request, "messages": messages, "add_generation_prompt": False}
        try:
            return (await self.client.apply_template(part)).encode("utf-8")
        except BackendRefused:
            return None  # e.g. a template that insists on alternating roles

    async def _message_ends(
        self, request: Mapping[str, Any], known: list[int | None], full_b: bytes
    ) -> tuple[list[int | None], int]:
        """Byte offset where each message ends in the full prompt (None: unknown), and
        the number of renders it took. ``known`` holds the ends of a cached prefix.

        Each message after ``known`` is first held against its kind's wrapper at the
        end of the one before; the messages that fail that proof are measured with
        prefix renders (:meth:`_rendered_ends`), and their wrappers learned.
        """
        messages = list(request["messages"])
        if not self.one_render:
            return await self._rendered_ends(request, messages, list(known), full_b, len(known))
        context = {k: v for k, v in request.items() if k != "messages"}
        wrappers = self._wrappers.setdefault(_canonical(context).decode(), {})
        n = len(messages)
        ends: list[int | None] = list(known)
        renders = 0
        while len(ends) < n:
            i = len(ends)
            start = ends[i - 1] if i > 0 else 0
            # The run up to the next message a prefix can end with (llama.cpp renders a
            # trailing assistant message as a prefill, so it cannot end one).
            j = i
            while j < n - 1 and _role(messages[j]) == "assistant":
                j += 1
            kinds = tuple(_kind(messages, x) for x in range(i, j + 1))
            if start is not None:
                w = wrappers.get(kinds[:1])
                end = w.end_after(messages[i : i + 1], full_b, start) if w else None
                if end is not None:
                    ends.append(end)
                    continue
                # A run the renders could not split (the template refuses a prefix that
                # would end inside it) is matched whole, its inside left unknown as then.
                w = wrappers.get(kinds) if j > i else None
                end = w.end_after(messages[i : j + 1], full_b, start) if w else None
                if end is not None:
                    ends += [None] * (j - i) + [end]
                    continue
            run, more = await self._rendered_ends(request, messages[: j + 1], list(ends), full_b, i)
            renders += more
            self._fill_and_learn(messages, run, i, full_b, wrappers)
            ends = run
        return ends, renders

    def _fill_and_learn(
        self,
        messages: Sequence[Any],
        run: list[int | None],
        i: int,
        full_b: bytes,
        wrappers: dict[tuple[Kind, ...], Wrapper],
    ) -> None:
        """Complete a measured run ``i..len(run)-1`` from known wrappers (backwards from
        a known end, forwards from a known start) and learn the wrappers it shows."""
        j = len(run) - 1
        for x in range(j - 1, i - 1, -1):
            after, w = run[x + 1], wrappers.get((_kind(messages, x + 1),))
            if run[x] is None and after is not None and w is not None:
                run[x] = w.start_before(messages[x + 1 : x + 2], full_b, after)
        for x in range(i, j + 1):
            begin, w = (run[x - 1] if x > 0 else 0), wrappers.get((_kind(messages, x),))
            if run[x] is None and begin is not None and w is not None:
                run[x] = w.end_after(messages[x : x + 1], full_b, begin)
            end = run[x]
            if end is not None and begin is not None:
                learned = _learn(messages[x : x + 1], full_b[begin:end])
                if learned is not None:
                    wrappers[(_kind(messages, x),)] = learned
        begin = run[i - 1] if i > 0 else 0
        end = run[j]
        if j > i and begin is not None and end is not None and None in run[i:j]:
            learned = _learn(messages[i : j + 1], full_b[begin:end])
            if learned is not None:
                wrappers[tuple(_kind(messages, x) for x in range(i, j + 1))] = learned

    async def _rendered_ends(
        self,
        request: Mapping[str, Any],
        messages: list[Any],
        ends: list[int | None],
        full_b: bytes,
        first: int,
    ) -> tuple[list[int | None], int]:
        """Ends of ``messages[first:]`` from prefix renders, after ``ends[:first]``.

        ``messages[:i+1]`` rendered alone ends where message ``i`` ends — except when
        message ``i`` is an assistant message: llama.cpp renders a trailing assistant
        message as a prefill to continue (no end-of-turn), and no request field turns
        that off. Its end is found from the message after it instead: render
        ``messages[:i] + [messages[i+1]]``; what that adds after message ``i-1`` is
        message ``i+1``'s own rendering, which must end the span ``[?, end(i+1))``.
        """
        n = len(messages)
        ends = list(ends[:first])
        renders = 0
        deferred: list[int] = []
        for i in range(first, n):
            if _role(messages[i]) == "assistant" and i < n - 1:
                ends.append(None)
                deferred.append(i)
                continue
            b = await self._render(request, messages[: i + 1])
            renders += 1
            prev = next((e for e in reversed(ends) if e is not None), 0)
            ok = b is not None and full_b.startswith(b) and len(b) >= prev
            ends.append(len(b) if ok and b is not None else None)
        for i in deferred:
            after, before = ends[i + 1], (ends[i - 1] if i > 0 else 0)
            if after is None or before is None:
                continue
            b = await self._render(request, [*messages[:i], messages[i + 1]])
            renders += 1
            if b is None or not full_b.startswith(b[:before]):
                continue
            tail = b[before:]
            end = after - len(tail)
            if end >= before and full_b[end:after] == tail:
                ends[i] = end
        return ends, renders

    # -- tokenizing ------------------------------------------------------------------

    async def _special_tokens(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Tokens the server adds around a prompt's text (BOS, and EOS for some models)."""
        if self._specials is None:
            empty = await self.client.tokenize("", add_special=True)
            probe = await self.client.tokenize("a", add_special=True)
            plain = await self.client.tokenize("a", add_special=False)
            n = len(plain)
            for cut in range(len(probe) - n + 1):
                if probe[cut : cut + n] == plain:
                    self._specials = (tuple(probe[:cut]), tuple(probe[cut + n :]))
                    break
            else:
                self._specials = (tuple(empty), ())
        return self._specials

    async def _full(
        self, full: str, full_b: bytes, lead: tuple[int, ...], trail: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...] | None, int]:
        n_lead, n_trail = len(lead), len(trail)
        ids, raws = await self._pieces_of(full, full_b, n_lead, n_trail)
        if ids[:n_lead] != lead or (n_trail and ids[-n_trail:] != trail):
            return ids, None, len(full_b)
        offsets = [0] * n_lead
        offsets += accumulate(map(len, raws), initial=0)
        pos = offsets.pop()
        offsets += [pos] * n_trail
        if pos != len(full_b):
            return ids, None, len(full_b)  # pieces do not spell the text: map another way
        return ids, tuple(offsets), len(full_b)

    async def _pieces_of(
        self, text: str, text_b: bytes, n_lead: int, n_trail: int
    ) -> tuple[tuple[int, ...], list[bytes]]:
        """The server's tokens of ``text`` (a prompt) and the piece of each one between the
        ``n_lead`` and ``n_trail`` specials it adds: from the ids alone and the pieces
        known for this model where those join to exactly ``text_b`` (the proof: a wrong
        piece fails it), else from ``/tokenize`` with pieces, whose pieces are then known.

        Unknown ids are asked for in one call, up to one per :data:`TOKENS_PER_FETCH`
        tokens of the text (a first sight with nothing known asks for each distinct id);
        more go to the pieces call."""
        identity = await self._identity()
        self.pieces.serving(identity)
        if self.pieces_by_id and identity is not None:
            ids = tuple(await self.client.tokenize(text, add_special=True))
            body = ids[n_lead : len(ids) - n_trail]
            raws = await self._known_pieces(body, len(ids) // TOKENS_PER_FETCH)
            if isinstance(raws, str):
                self.piece_calls[raws] += 1
            elif b"".join(raws) == text_b:
                self.piece_calls["known pieces"] += 1
                return ids, raws
            else:
                self.piece_calls["proof failed"] += 1
        pieces = await self.client.tokenize_pieces(text, add_special=True)
        self.piece_calls["tokenize with pieces"] += 1
        body_pieces = pieces[n_lead : len(pieces) - n_trail]
        if identity is not None:
            self.pieces.learn(body_pieces)
        return tuple(t for t, _ in pieces), [raw for _, raw in body_pieces]

    async def _known_pieces(self, ids: Sequence[int], fetch: int) -> list[bytes] | str:
        """The pieces of ``ids``, asking the server for the unknown ones in one call when
        they are at most ``fetch``; else why not (the pieces call is then used)."""
        unknown = sorted(self.pieces.unknown(ids))
        if len(unknown) > fetch:
            return "too many unknown"
        if unknown:
            answered = await self.client.pieces_of(unknown)
            if [t for t, _ in answered] != unknown:
                # Not read as ids (a server that tokenized the list as text, say): these
                # pieces are not the ids' own; the pieces call gives them.
                return "pieces of ids refused"
            self.pieces.learn(answered)
            self.piece_calls["pieces of ids"] += 1
        return self.pieces.pieces(ids)

    async def _identity(self) -> Identity | None:
        """What the server serves now, so pieces learned under another are never used
        (None: it does not say — no ``/props`` — and no piece is kept)."""
        try:
            props = await self.client.props()
        except BackendRefused:
            return None
        alias = props.raw.get("model_alias")
        return props.model_path or (str(alias) if alias else None), props.build

    async def _incremental(
        self,
        base: TokenLayout,
        k: int,
        full_b: bytes,
        lead: tuple[int, ...],
        trail: tuple[int, ...],
    ) -> tuple[tuple[int, ...], tuple[int, ...] | None, int] | None:
        """Tokens of the new prompt from the cached prefix plus the new text only."""
        cut = base.spans[k - 1].end
        b_end = base.message_byte_ends[k - 1]
        if b_end is None or cut <= len(lead):
            return None
        first = max(len(lead), cut - OVERLAP_TOKENS)
        # Start the overlap on a UTF-8 character boundary (byte tokens can split one).
        while first > len(lead) and (full_b[base.token_bytes[first]] & 0xC0) == 0x80:
            first -= 1
        o_start = base.token_bytes[first]
        text_b = full_b[o_start:]
        try:
            text = text_b.decode("utf-8")
        except UnicodeDecodeError:
            return None
        # With pieces, not from the cache: paired runs showed no gain at a turn's ~4 KB
        # (the ids alone save ~2 ms of the server's time, the identity check costs ~1).
        pieces = await self.client.tokenize_pieces(text, add_special=False)
        body = pieces[: len(pieces) - len(trail)]
        ids, raws = tuple(t for t, _ in pieces), [raw for _, raw in body]
        m = cut - first
        if ids[:m] != base.tokens[first:cut]:
            return None
        if sum(map(len, raws[:m])) != b_end - o_start:
            return None
        new_offsets = list(accumulate(map(len, raws[m:]), initial=b_end))
        pos = new_offsets.pop()
        if pos != len(full_b):
            return None
        # Tuple slices and concatenation: copying the cached prefix item by item into
        # lists was 6 ms a turn at 100k tokens.
        # The short parts joined first: the prefix is copied once, not twice.
        new_tokens = ids[m : len(ids) - len(trail)]
        tokens = base.tokens[:cut] + (new_tokens + trail)
        offsets = base.token_bytes[:cut] + (tuple(new_offsets) + (pos,) * len(trail))
        return tokens, offsets, len(full_b) - o_start

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
        lead, trail = await self._special_tokens()
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
            spans.append(MessageSpan(i, _role(m), start, end, clean, end_b is not None))
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

    # -- the cache -------------------------------------------------------------------

    def _lookup(
        self, hashes: tuple[str, ...], full_b: bytes, messages: Sequence[Any]
    ) -> tuple[TokenLayout | None, int]:
        """The cached layout sharing the longest message prefix whose text still matches.

        A prefix ending in an assistant message is not reused: its end was measured
        in a request where something else (or nothing) followed it.
        """
        for k in range(len(hashes), 0, -1):
            if _role(messages[k - 1]) == "assistant":
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

    def _remember(self, layout: TokenLayout) -> None:
        if not layout.token_bytes:
            return  # per-prefix layouts have no offsets to extend incrementally
        lid = self._next_id
        self._next_id += 1
        self._recent[lid] = layout
        for k, h in enumerate(layout.prefix_hashes, start=1):
            self._by_hash[h] = (lid, k)
        while len(self._recent) > self._max:
            old_id, old = self._recent.popitem(last=False)
            for h in old.prefix_hashes:
                if self._by_hash.get(h, (None,))[0] == old_id:
                    del self._by_hash[h]


def _role(message: Any) -> str:
    return str(message.get("role", "")) if isinstance(message, Mapping) else ""


def _spans(
    messages: Sequence[Any],
    ends: Sequence[int | None],
    offsets: Sequence[int],
    n_bytes: int,
    n_lead: int,
    n_tokens: int,
    known: tuple[MessageSpan, ...] = (),
) -> tuple[tuple[MessageSpan, ...], int]:
    """Map each message's byte end to a token position (see the module docstring).

    ``known``: the spans of the first messages, mapped already on the same offsets."""
    spans: list[MessageSpan] = list(known)
    start = known[-1].end if known else n_lead
    # Offsets never decrease: the specials after the text are the tokens at its end.
    text_end = bisect_left(offsets, n_bytes, lo=n_lead, hi=n_tokens)
    for i in range(len(known), len(messages)):
        m = messages[i]
        end_b = ends[i]
        if end_b is None:
            spans.append(MessageSpan(i, _role(m), start, start, False, False))
            continue
        # First token whose text starts at or after the boundary.
        t = bisect_left(offsets, end_b, lo=n_lead, hi=text_end)
        clean = offsets[t] == end_b if t < text_end else end_b == n_bytes
        if not clean:
            t -= 1  # token t-1 straddles the boundary: it belongs to what follows
        end = max(start, t)
        spans.append(MessageSpan(i, _role(m), start, end, clean, True))
        start = end
    return tuple(spans), start
