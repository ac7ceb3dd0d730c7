"""The probe's vLLM experiment: where a vLLM server with its model resumes after a change
in the middle, measured, not assumed (issue 40 item 4).

Prompts are token ids sent to ``/v1/completions`` (one token generated), so every
divergence is exact; each part starts from its own tokens, so nothing cached before
(or by another part) is shared. ``cached_tokens`` is read after each:

1. ``prompt``: 10 whole blocks (1,280 tokens);
2. ``extend``: the same plus one block. Every full block kept (full attention) resumes
   at 1,280; a sliding-window model's kept tails at 1,152 (its replay boundary, before
   the last token);
3. ``change``: the first prompt changed at 900. Full attention resumes at 896; the
   tails kept at 1,152 and 1,280 do not reach back that far: 0.

When 2 and 3 show kept tails, the tail's length is measured: a prompt of ``k`` blocks
and one token keeps the ``window`` blocks before ``k``; another changed at 192 resumes
at 128 only when that tail reaches block 0 (``k <= window``), found by bisection
(``window k`` steps). The fitted model (block_cache.py, through the slot predictor the
gateway uses) must then predict every step, else the verdict is uncertain.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sakur4.backends.experiment import ExperimentStep
from sakur4.backends.ring import CheckpointRules, SentPrompt, SlotPrediction, advance, empty_slot
from sakur4.backends.vllm import BLOCK_TOKENS, VllmClient, block_reuse, parse_metrics_labels
from sakur4.errors import BackendRefused, BackendUnavailable

# Blocks of the first prompt, and where the change falls (inside its 8th block).
_BLOCKS = 10
_CHANGE = 900
# The widest sliding window looked for, in blocks (4,096 tokens at 128).
_MAX_WINDOW = 32


@dataclass(frozen=True, slots=True)
class BlockCacheFound:
    """What the experiment found: the block, the sliding-window blocks a hit needs (0:
    every full block is kept), the steps, whether the fitted model predicted every
    one, and a sentence saying so."""

    block: int
    window_blocks: int
    steps: tuple[ExperimentStep, ...]
    fits: bool
    reason: str


class _Sender:
    """Token-id prompts for one probe: a pool of the model's own tokens (a fresh nonce
    in it), cut into sequences that share nothing unless told to."""

    def __init__(self, v: VllmClient, model: str, pool: Sequence[int]) -> None:
        self.v = v
        self.model = model
        self.pool = tuple(pool)
        self.next_start = 0

    def fresh(self, n: int) -> tuple[int, ...]:
        """``n`` tokens no earlier sequence of this probe starts with."""
        start = self.next_start
        self.next_start += 1
        return self.cycle(start, n)

    def cycle(self, start: int, n: int) -> tuple[int, ...]:
        size = len(self.pool)
        return tuple(self.pool[(start + i) % size] for i in range(n))

    def changed(self, seq: tuple[int, ...], at: int, n: int) -> tuple[int, ...]:
        """``seq``'s first ``at`` tokens, then others, ``n`` in all."""
        start = len(self.pool) // 2 + at
        if self.pool[start % len(self.pool)] == seq[at]:
            start += 1
        return seq[:at] + self.cycle(start, n - at)

    async def send(self, tokens: Sequence[int]) -> int | None:
        body = {"model": self.model, "prompt": list(tokens), "max_tokens": 1, "temperature": 0}
        answer = await self.v.post_json("/v1/completions", body)
        usage = answer.get("usage") if isinstance(answer, Mapping) else None
        details = usage.get("prompt_tokens_details") if isinstance(usage, Mapping) else None
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        return cached if isinstance(cached, int) and not isinstance(cached, bool) else None


async def _pool(v: VllmClient, model: str, need: int) -> list[int]:
    """The model's tokens for a text with a fresh nonce, at least ``need`` of them."""
    words = " ".join(f"{w} {i}," for i, w in enumerate(("probe", "list", "entry") * (need // 9)))
    body = {"model": model, "prompt": f"Sakur4 probe {uuid.uuid4()}: {words}"}
    answer: Any = await v.post_json("/tokenize", body)
    tokens = [int(t) for t in answer.get("tokens", ())] if isinstance(answer, Mapping) else []
    if len(tokens) < 2:
        raise BackendUnavailable(v.url, "POST /tokenize gave no tokens for the probe's text")
    return tokens


async def block_size(v: VllmClient) -> int:
    """The block size vLLM says it hashes in (``/metrics``' ``vllm:cache_config_info``),
    else the CPU default."""
    labels = parse_metrics_labels(await v.request_text("GET", "/metrics"), "vllm:cache_config_info")
    found = labels.get("block_size", "")
    return int(found) if found.isdigit() and int(found) > 0 else BLOCK_TOKENS


def _step(
    name: str, tokens: Sequence[int], divergence: int, reused: int | None, predicted: int
) -> ExperimentStep:
    n = len(tokens)
    return ExperimentStep(
        name,
        n,
        divergence,
        reused,
        None if reused is None else n - reused,
        None,
        None,
        block_predicted=predicted,
    )


def _predict(rules: CheckpointRules, history: Sequence[tuple[int, ...]]) -> list[int]:
    """What the slot predictor gives for each of ``history`` (one token generated each)."""
    state: SlotPrediction = empty_slot(rules)
    for tokens in history:
        state = advance(state, SentPrompt(tokens, generated=1))
    return list(state.reuse)


async def measure_block_cache(v: VllmClient) -> BlockCacheFound:
    """Run the experiment (module docstring) on ``v``."""
    model = await v.model_name()
    block = await block_size(v)
    # Every prompt and its one generated token fit the server's window.
    ctx = await v.context_window() or (_MAX_WINDOW + 2) * block
    if ctx < (_BLOCKS + 1) * block + 2:
        raise BackendRefused(v.url, f"a {ctx}-token window is too small for the experiment")
    widest = min(_MAX_WINDOW, (ctx - 2) // block - 1)
    need = (max(_BLOCKS, widest) + 2) * block
    s = _Sender(v, model, await _pool(v, model, need))
    first = s.fresh(_BLOCKS * block)
    extended = first + s.cycle(len(s.pool) // 3, block)
    changed = s.changed(first, _CHANGE, len(extended))
    history = (first, extended, changed)
    served = [await s.send(p) for p in history]
    dense = [
        0,
        block_reuse(len(first), len(extended), block),
        block_reuse(_CHANGE, len(changed), block),
    ]
    if served == dense:
        names = ("prompt", "extend", "change")
        divergences = (0, len(first), _CHANGE)
        dense_steps = tuple(
            _step(*row) for row in zip(names, history, divergences, served, dense, strict=True)
        )
        return BlockCacheFound(
            block,
            0,
            dense_steps,
            True,
            f"every full {block}-token block is kept: a change at {_CHANGE} resumed at "
            f"{served[2]}, an extension of {len(first)} at {served[1]}",
        )
    # Kept tails: bisect the window (true for k <= window; k = 1 always).
    pairs: list[tuple[int, tuple[int, ...], tuple[int, ...], int | None]] = []
    lo, hi = 1, widest + 1
    while hi - lo > 1:
        k = (lo + hi) // 2
        base = s.fresh(k * block + 1)
        other = s.changed(base, block + block // 2, len(base))
        await s.send(base)
        reached = await s.send(other)
        pairs.append((k, base, other, reached))
        if reached == block:
            lo = k
        else:
            hi = k
    window = lo
    rules = CheckpointRules(n_swa=0, block=block, window_blocks=window)
    predicted = _predict(rules, history)
    steps: list[ExperimentStep] = [
        _step(name, tokens, div, got, want)
        for name, tokens, div, got, want in zip(
            ("prompt", "extend", "change"),
            history,
            (0, len(first), _CHANGE),
            served,
            predicted,
            strict=True,
        )
    ]
    fits = served == predicted
    for k, base, other, reached in pairs:
        want = _predict(rules, (base, other))[1]
        steps.append(_step(f"window {k}", other, block + block // 2, reached, want))
        fits = fits and reached == want
    wider = " (or wider: the widest looked for)" if window == widest else ""
    return BlockCacheFound(
        block,
        window,
        tuple(steps),
        fits,
        f"a sliding window keeps only {window} blocks{wider} before each prompt's last "
        f"full block and each junction: a change at {_CHANGE} resumed at {served[2]} "
        f"(whole blocks: {dense[2]}), an extension of {len(first)} at {served[1]} "
        f"(whole blocks: {dense[1]})",
    )
