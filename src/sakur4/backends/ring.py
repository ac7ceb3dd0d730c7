"""Predict where llama-server's context-checkpoint ring lets a prompt resume.

A sliding-window model (Gemma 3: 512-token window) keeps only the last window of
its SWA layers, so the server cannot roll back to an arbitrary prefix: it resumes
from the latest *context checkpoint* at or before the divergence, or re-processes
everything. There is no HTTP listing of checkpoints; this module replays what
Sakur4 sent through the server's placement rules (llama.cpp b11434,
``tools/server/server-context.cpp``; re-measured against ``-lv 4`` logs, see
docs/design/backends.md) and predicts the ring — a pure function, no I/O.

The rules, per request (prompt of N tokens, slot holding L tokens):

- **Restore.** ``n_past`` = longest common prefix with the slot. If the slot's SWA
  memory no longer reaches back to ``n_past - n_swa`` (its oldest position ``lo``
  is ``>= n_past - n_swa``), the server takes the newest checkpoint with
  ``pos_max <= n_past`` (and ``pos_min < n_past - n_swa`` or ``pos_min == 0``)
  and resumes at its ``pos_max`` (``n_tokens - 1``), or from 0 if none fits.
  Checkpoints past the resume point are erased. An exact resend keeps one token
  to evaluate (``n_past - 1``).
- **Placement.** The prompt is processed in batches (``n_batch`` 2048); a batch
  also ends before each user-message start that is the last one, or more than
  ``min_step`` (``-cms``) past the newest checkpoint, and ``4 + n_ubatch`` (516)
  and 4 tokens before the end. A checkpoint of the state *before* a batch is made
  when that batch starts a user message, ends within ``n_ubatch`` of the prompt's
  end, or finishes the prompt — and only if it is the last user message, near the
  end, or more than ``min_step`` past the newest checkpoint.
- **Ring.** At most ``max_checkpoints`` (32); when full, checkpoints of earlier
  requests closer than ``min_step`` to their predecessor go first, then the oldest.
- **Memory.** The SWA cache holds ``pad(n_swa + n_ubatch, 256)`` cells (1024
  here): after processing up to position ``e`` it reaches back to ``e + 1 - 1024``.

With ``n_swa == 0`` (full attention, or ``--swa-full``) no checkpoints are made
and any prefix resumes exactly. A hybrid or recurrent model (``recurrent``: Mamba,
LFM2, Granite hybrid, ...) holds its past in one state that cannot be rolled back:
its memory reaches back only to its last position, so a prompt resumes at the exact
end of that state (a pure extension) or at a checkpoint (``n_swa`` 0, the same
placement), nowhere else — measured on a model built here, docs/DESIGN.md
"A recurrent model, built here". The server's RAM prompt cache (``--cache-ram``) can
swap in another saved prompt when the slot would keep less than half of its
tokens; that is not modelled, so a reported ``cache_n`` that differs from the
prediction should replace it (:attr:`SentPrompt.reused`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sakur4.backends import block_cache


@dataclass(frozen=True, slots=True)
class CheckpointRules:
    """The server parameters placement depends on (llama.cpp defaults; Gemma 3's window).
    ``recurrent``: the model's memory keeps only its last position (hybrid/recurrent)."""

    n_swa: int = 512
    n_ubatch: int = 512
    n_batch: int = 2048
    min_step: int = 8192
    max_checkpoints: int = 32
    recurrent: bool = False
    # vLLM's prefix cache on a sliding-window model (backends/block_cache.py): hits in
    # whole ``block``-token blocks, where the ``window_blocks`` blocks before them are
    # kept (0: not such a cache; the probe measures both).
    block: int = 1
    window_blocks: int = 0

    @property
    def swa_cells(self) -> int:
        """Cells of the SWA KV cache: the window plus one micro-batch, padded to 256."""
        n = self.n_swa + self.n_ubatch
        return -(-n // 256) * 256

    @property
    def makes_checkpoints(self) -> bool:
        return (self.n_swa > 0 or self.recurrent) and self.max_checkpoints > 0


DEFAULT_RULES = CheckpointRules()
FULL_ATTENTION = CheckpointRules(n_swa=0)
RECURRENT = CheckpointRules(n_swa=0, recurrent=True)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A saved state of the slot covering tokens ``[0, n_tokens)``."""

    n_tokens: int
    pos_min: int
    pos_max: int
    request: int  # index of the sent prompt that created it

    @property
    def resume(self) -> int:
        """Tokens reused when the server restores this checkpoint (its ``n_past``)."""
        return min(self.n_tokens, max(self.pos_min + 1, self.pos_max))


@dataclass(frozen=True, slots=True)
class SentPrompt:
    """One request as sent: its prompt tokens, where its user messages start (from
    the token layout; empty for raw completions), how many tokens were generated,
    and the reuse the server reported (``cache_n``), when known."""

    tokens: tuple[int, ...]
    user_starts: tuple[int, ...] = ()
    generated: int = 1
    reused: int | None = None


@dataclass(frozen=True, slots=True)
class SlotPrediction:
    """The predicted state of the slot after the history, and what each request reused."""

    rules: CheckpointRules
    cached_len: int
    memory_from: int | None  # oldest position the SWA memory still holds (None: empty)
    checkpoints: tuple[Checkpoint, ...]
    reuse: tuple[int, ...] = ()  # predicted n_past of each sent prompt (before any override)
    created: tuple[tuple[int, ...], ...] = ()  # n_tokens of checkpoints each request made
    cached: tuple[int | None, ...] = field(default=(), repr=False)
    # vLLM, a sliding-window model: the blocks its sliding-window layers keep along
    # ``cached`` (block_cache.py).
    kept: frozenset[int] = field(default=frozenset(), repr=False)

    def resume_at(self, divergence: int) -> int:
        """Tokens reused by a prompt that first differs from the slot at ``divergence``."""
        p = min(max(divergence, 0), self.cached_len)
        if self.rules.window_blocks:
            return block_cache.hit(self.kept, p, self.rules.block, self.rules.window_blocks)
        n_past, _ = _restore(self.rules, p, p + 1, self.memory_from, self.checkpoints)
        return n_past

    def resume_positions(self, candidates: Iterable[int]) -> tuple[int, ...]:
        """Where prompts cut at each of ``candidates`` (e.g. message boundaries) resume."""
        return tuple(sorted({self.resume_at(c) for c in candidates}))


def _forget(rules: CheckpointRules, lo: int, end: int) -> int:
    """The oldest position the SWA cache holds once positions up to ``end`` are in:
    it keeps ``swa_cells`` of them (a full-attention cache keeps everything, a
    recurrent state only the last: the hybrid memory's pos_min is the larger one)."""
    if rules.recurrent:
        return max(lo, end - 1)
    return max(lo, end - rules.swa_cells) if rules.n_swa > 0 else lo


# Tokens compared per slice when looking for the common prefix (C speed, not per token).
_LCP_BLOCK = 4096


def common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """Length of the common prefix of two sequences (a generated token, None, matches
    no token): a block at a time, item by item only in the block that differs."""
    n = min(len(a), len(b))
    # A list slice never equals a tuple slice: compare one kind, or every block would
    # go item by item (5 ms a turn at 100k tokens, when one side was a list).
    if type(a) is not type(b):
        a, b = tuple(a), tuple(b)
    i = 0
    while i < n:
        j = min(n, i + _LCP_BLOCK)
        if a[i:j] != b[i:j]:
            while i < j and a[i] == b[i]:
                i += 1
            if i < j:
                return i
        i = j
    return i


def _restore(
    rules: CheckpointRules,
    n_past: int,
    n_prompt: int,
    memory_from: int | None,
    ring: Sequence[Checkpoint],
) -> tuple[int, Checkpoint | None]:
    """The server's restore step: (tokens reused, checkpoint restored if any)."""
    if n_past <= 0:
        return 0, None
    has_new = n_past < n_prompt
    thold = max(0, n_past - rules.n_swa - (0 if has_new else 1))
    lo = memory_from if memory_from is not None else 0
    if lo < thold:
        return n_past, None  # the window still reaches back far enough
    for ck in reversed(ring):
        if ck.pos_max > n_past:
            continue
        if ck.pos_min < thold or ck.pos_min == 0:
            return min(n_past, ck.resume), ck
    return 0, None


def _add_checkpoint(
    rules: CheckpointRules, ring: list[Checkpoint], new: Checkpoint
) -> list[Checkpoint]:
    if len(ring) + 1 >= rules.max_checkpoints:
        kept: list[Checkpoint] = []
        last = -1
        for ck in ring:
            if ck.request != new.request and last >= 0 and ck.n_tokens <= last + rules.min_step:
                continue
            last = ck.n_tokens
            kept.append(ck)
        ring = kept
    while len(ring) >= rules.max_checkpoints:
        ring = ring[1:]
    ring = [ck for ck in ring if ck.n_tokens != new.n_tokens]
    ring.append(new)
    return ring


def predict_slot(
    history: Sequence[SentPrompt], rules: CheckpointRules = DEFAULT_RULES
) -> SlotPrediction:
    """Replay ``history`` (oldest first, sent to one slot that started empty) through
    the server's checkpoint rules; see the module docstring for the rules."""
    state = empty_slot(rules)
    for i, sent in enumerate(history):
        state = _step(state, i, sent)
    return state


def empty_slot(rules: CheckpointRules = DEFAULT_RULES) -> SlotPrediction:
    """The prediction for a slot that holds nothing (a fresh or restarted server)."""
    return SlotPrediction(rules, 0, None, ())


def advance(state: SlotPrediction, sent: SentPrompt) -> SlotPrediction:
    """The prediction after one more request: what :func:`predict_slot` gives for the
    history plus ``sent``, without replaying the history (a gateway keeps one per slot)."""
    return _step(state, len(state.reuse), sent)


def _batch_end(
    rules: CheckpointRules,
    start: int,
    n: int,
    users: Sequence[int],
    last_user: int,
    end_breaks: Sequence[int],
    ring: Sequence[Checkpoint],
) -> int:
    """Where a batch that starts at ``start`` ends: after ``n_batch`` tokens, at the
    prompt's end, or before a user-message start or end break that splits batches."""
    end = min(n, start + rules.n_batch)
    if not rules.makes_checkpoints:
        return end
    newest = ring[-1].n_tokens if ring else None
    for u in users[bisect_right(users, start) :]:
        if u > end:
            break
        if u == last_user or newest is None or u > newest + rules.min_step:
            end = u
            break
    for b in end_breaks:
        if start < b < end:
            return b
    return end


def _block_step(state: SlotPrediction, sent: SentPrompt) -> SlotPrediction:
    """vLLM's prefix cache on a sliding-window model (block_cache.py): the generated
    tokens are taken to come back as the prompt's next tokens (the answer re-rendered),
    so they count for the full-attention hit and the junction."""
    rules = state.rules
    tokens = sent.tokens
    n = len(tokens)
    common = common_prefix(state.cached, tokens)
    if common < len(state.cached) and state.cached[common] is None:
        common = min(len(state.cached), n)
    full = min(common, n - 1) // rules.block * rules.block
    kept = block_cache.kept_below(state.kept, common, rules.block)
    predicted = block_cache.hit(kept, full, rules.block, rules.window_blocks)
    served = predicted if sent.reused is None else min(sent.reused, n)
    if served != predicted:  # the server's word: it kept the blocks before what it served
        kept |= block_cache.tail(served, rules.block, rules.window_blocks)
    kept = block_cache.after_request(kept, full, served, n, rules.block, rules.window_blocks)
    cached_len = n + max(sent.generated, 1) - 1
    return SlotPrediction(
        rules,
        cached_len,
        None,
        (),
        (*state.reuse, predicted),
        (*state.created, ()),
        tokens + (None,) * (cached_len - n),
        kept,
    )


def _step(state: SlotPrediction, request: int, sent: SentPrompt) -> SlotPrediction:
    rules = state.rules
    if rules.window_blocks:
        return _block_step(state, sent)
    tokens = sent.tokens
    n = len(tokens)
    ring = list(state.checkpoints)
    lo = state.memory_from

    n_past = common_prefix(state.cached, tokens)
    restored: Checkpoint | None = None
    if n_past > 0:
        n_past, restored = _restore(rules, n_past, n, lo, ring)
        if restored is not None:
            lo = restored.pos_min
        elif n_past == 0:
            lo = None
    ring = [ck for ck in ring if ck.pos_max <= n_past]
    if n_past == n and n_past > 0:
        n_past -= 1  # the server always evaluates at least one token
    predicted = n_past
    if sent.reused is not None and sent.reused != n_past:
        n_past = min(sent.reused, n)  # the server's word wins over the model
        ring = [ck for ck in ring if ck.pos_max <= n_past]
        if n_past == 0:
            lo = None
    if n_past == 0:
        lo = None

    users = sorted(set(sent.user_starts))
    last_user = users[-1] if users else -1
    user_set = set(users)
    end_breaks = sorted({n - min(rules.n_batch, off) for off in (4 + rules.n_ubatch, 4)})
    made: list[int] = []
    pos = n_past
    while pos < n:
        start = pos
        pos = _batch_end(rules, start, n, users, last_user, end_breaks, ring)
        near_end = n < pos + rules.n_ubatch
        done = pos == n
        make = rules.makes_checkpoints and (done or start in user_set or near_end)
        if make and lo is None:
            make = False  # nothing in memory yet
        if make and ring:
            make = start == last_user or near_end or start > ring[-1].n_tokens + rules.min_step
        if make:
            assert lo is not None
            ring = _add_checkpoint(rules, ring, Checkpoint(start, lo, start - 1, request))
            made.append(start)
        lo = _forget(rules, start if lo is None else lo, pos)
    cached_len = n + max(sent.generated, 1) - 1
    if lo is not None:
        lo = _forget(rules, lo, cached_len)
    cached = tokens + (None,) * (cached_len - n)
    return SlotPrediction(
        rules,
        cached_len,
        lo,
        tuple(ring),
        (*state.reuse, predicted),
        (*state.created, tuple(made)),
        tuple(cached),
    )
