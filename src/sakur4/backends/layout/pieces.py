"""Token pieces: the bytes each token id stands for, learned per model from the server's
own answers, and a prompt tokenized with each token's byte offset from them.

The offsets come from the ids alone with the pieces this model's earlier answers gave
(a few unknown ones asked for by id), where those join to exactly the prompt's bytes,
else from ``/tokenize`` with pieces. A conversation that grew is tokenized only in its
new text plus a few tokens of overlap; the overlap must tokenize to the same tokens as
before (the seam did not merge), otherwise the whole prompt is tokenized again.

A token's piece is part of the model's vocabulary, so it never changes while the server
serves the same model: ``/tokenize`` with pieces (1.6x the time of ids alone at 100k
tokens) is needed only for a text with many ids not seen yet, or one the proof fails;
a few unknown ids are asked for by id. The pieces are learned under the identity of
what served them (the model file and the server build, from ``/props``) and forgotten
as soon as that identity is another. Size: one entry per id the server ever returned,
so at most the vocabulary (262,144 for Gemma 3, the largest in common use);
:data:`MAX_PIECES` caps it for a server whose ids are not a vocabulary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import accumulate

from sakur4.backends.layout.spans import TokenLayout
from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.errors import BackendRefused

# Tokens re-tokenized before a cached boundary to check the seam did not merge.
OVERLAP_TOKENS = 8
# Ids without a known piece are asked for in one call (``/tokenize`` of the ids) when
# they are at most one in this many tokens of the text, else the text is tokenized with
# pieces. Measured here: with pieces costs 1.4-1.8 us a token more than ids alone (12.8k
# tokens 45 vs 27 ms, 100k 463 vs 285 ms); the pieces of N ids cost ~1.2 ms + 1-2.4 us an
# id (64 ids 1.3 ms, 1,000 3.9, 4,550 12), so at the bound they cost under half of what
# the pieces call would add (and a fetch spares the ids call already made).
TOKENS_PER_FETCH = 4
# Gemma 3's vocabulary (the largest of the common ones: Llama 3 128,256, Qwen 3 151,936).
MAX_PIECES = 262_144

# What served a set of pieces: the model's path (or alias) and the server's build.
Identity = tuple[str | None, str | None]


class PieceCache:
    """Token id -> bytes for one model; empty again whenever the model changes."""

    def __init__(self, limit: int = MAX_PIECES) -> None:
        self.limit = limit
        self.identity: Identity | None = None
        self._bytes: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._bytes)

    def serving(self, identity: Identity | None) -> None:
        """The server now serves ``identity`` (None: unknown): pieces learned under
        another are dropped."""
        if identity != self.identity:
            self._bytes.clear()
            self.identity = identity

    def learn(self, pieces: Iterable[tuple[int, bytes]]) -> None:
        """Remember (id, bytes) pairs as the server gave them (a later answer wins, so a
        wrong entry is mended by the next answer that has its id)."""
        self._bytes.update(pieces)
        while len(self._bytes) > self.limit:
            self._bytes.popitem()  # the newest: what was known before stays

    def unknown(self, ids: Sequence[int]) -> set[int]:
        """The ids in ``ids`` without a piece."""
        return set(ids).difference(self._bytes)

    def pieces(self, ids: Sequence[int]) -> list[bytes]:
        """The pieces of ``ids``, all known (see :meth:`unknown`)."""
        get = self._bytes.__getitem__
        return [get(t) for t in ids]


# A prompt's tokens, each token's byte offset (None: the pieces do not spell the text),
# and how many bytes were sent to be tokenized.
Tokens = tuple[tuple[int, ...], tuple[int, ...] | None, int]


class PieceTokenizer:
    """Tokenizes prompts with one llama-server, giving every token's byte offset.

    ``pieces_by_id=False`` always tokenizes with pieces (the reference for pieces from
    the cache)."""

    def __init__(self, client: LlamaCppClient, *, pieces_by_id: bool = True) -> None:
        self.client = client
        self.pieces_by_id = pieces_by_id
        # The model's token pieces, learned from the server's answers (first sight of a
        # conversation tokenizes ids alone when they are known), and how offsets came.
        self.pieces = PieceCache()
        self.calls: Counter[str] = Counter()
        self._specials: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    async def specials(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
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

    async def whole(
        self, full: str, full_b: bytes, lead: tuple[int, ...], trail: tuple[int, ...]
    ) -> Tokens:
        """The prompt ``full`` (``full_b`` encoded) tokenized whole; ``lead`` and
        ``trail`` are the server's :meth:`specials`."""
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

    async def grown(
        self,
        base: TokenLayout,
        k: int,
        full_b: bytes,
        lead: tuple[int, ...],
        trail: tuple[int, ...],
    ) -> Tokens | None:
        """Tokens of the new prompt ``full_b`` from ``base``'s tokens up to the end of its
        message ``k - 1`` plus the new text only (None: the seam did not hold)."""
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
                self.calls[raws] += 1
            elif b"".join(raws) == text_b:
                self.calls["known pieces"] += 1
                return ids, raws
            else:
                self.calls["proof failed"] += 1
        pieces = await self.client.tokenize_pieces(text, add_special=True)
        self.calls["tokenize with pieces"] += 1
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
            self.calls["pieces of ids"] += 1
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
