"""The cache experiment: how a llama-server actually resumes, measured, not assumed.

A few ``/completion`` requests with ``n_predict`` 1, token ids as the prompt and a
pinned slot (so positions are exact and nothing else lands in between):

1. ``cold``: a fresh prompt of ``head`` tokens (random words, so it matches no
   cached prompt).
2. ``extend``: the same prompt grown to ``total`` tokens.
3. ``repeat``: the same prompt again (a prefix cache reuses ``total - 1``).
4. ``tail``: the last ``total - tail_keep`` tokens changed (reuses ``tail_keep``).
5. ``middle``: ``middle_len`` tokens removed at ``middle`` (an eviction in
   miniature). Full attention reuses ``middle``; a checkpoint ring snaps back to an
   earlier checkpoint (the prompts are shorter than the SWA cache, and then
   llama.cpp resumes only from checkpoints, even for a resend — see
   ring.py); KV shifting (``--cache-reuse``) also reuses the text after the
   removal, shifted into place; with no checkpoint source everything is
   re-processed. A hybrid/recurrent model resumes only at a checkpoint or at the
   exact end of its state: ``extend`` reuses the whole cold prompt, where a
   sliding-window ring snaps back to the checkpoint before it.
6. ``restore`` (only when slot actions are enabled): save the slot, erase it,
   restore it and extend the prompt: does a restored state resume?

About 750 tokens are prefilled in all (~3 s at 250 tokens/s).
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Literal

from sakur4.backends.llamacpp import LlamaCppClient
from sakur4.backends.ring import DEFAULT_RULES, CheckpointRules, SentPrompt, predict_slot

CheckpointSource = Literal[
    "exact-prefix", "checkpoint-ring", "kv-shift", "slot-restore", "none", "uncertain"
]

# Common words: about one token each for most tokenizers, so sizes stay predictable.
_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when "
    "if so no will more can out up into do time only about some two my could them then "
    "what other than its who may said over also new after first way well made"
)
_WORDS = _TEXT.split()

PROBE_SLOT_FILE = "sakur4-probe.bin"


@dataclass(frozen=True, slots=True)
class ExperimentPlan:
    """Sizes of the experiment, in tokens."""

    head: int = 64
    total: int = 400
    tail_keep: int = 380
    middle: int = 100
    middle_len: int = 8
    restore_extra: int = 16


@dataclass(frozen=True, slots=True)
class ExperimentStep:
    """One request of the experiment and what the server reported for it.

    ``divergence`` is where the prompt first differs from the previous one; a
    server that reuses every prefix reports ``reused == divergence`` (capped at
    ``prompt_tokens - 1``). ``ring_predicted`` is what the checkpoint-ring model
    predicts for the same history; ``recurrent_predicted`` the same rules for a
    model whose memory keeps only its last position (hybrid/recurrent).
    """

    name: str
    prompt_tokens: int
    divergence: int
    reused: int | None
    processed: int | None
    prompt_ms: float | None
    ring_predicted: int | None
    recurrent_predicted: int | None = None
    # The restore step: the bytes the server wrote for the saved state of
    # ``divergence`` tokens (its ``n_written``), what a parked session costs on disk.
    saved_bytes: int | None = None
    # vLLM's experiment (vllm_experiment.py): what the fitted block-cache model predicts.
    block_predicted: int | None = None


@dataclass(frozen=True, slots=True)
class Classification:
    """The experiment's verdict: the checkpoint source and why (``recurrent``: a ring
    whose resume points the recurrent-memory rules predicted, the sliding-window's not)."""

    source: CheckpointSource
    sources: tuple[CheckpointSource, ...]
    reason: str
    reuse_verifiable: bool
    recurrent: bool = False


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


async def _material(client: LlamaCppClient, rng: random.Random, n: int) -> list[int]:
    tokens: list[int] = []
    while len(tokens) < n:
        tokens += await client.tokenize(" " + _words(rng, n), add_special=False)
    return tokens[:n]


def _changed(original: list[int], pool: list[int]) -> list[int]:
    """Tokens from ``pool`` that differ position by position from ``original``."""
    out = []
    for i, t in enumerate(original):
        c = pool[i % len(pool)]
        j = i
        while c == t:
            j += 1
            c = pool[j % len(pool)]
        out.append(c)
    return out


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


async def run_cache_experiment(
    client: LlamaCppClient,
    *,
    slot: int = 0,
    restore: bool = False,
    plan: ExperimentPlan = ExperimentPlan(),
    rules: CheckpointRules = DEFAULT_RULES,
    before_each: Callable[[], Awaitable[None]] | None = None,
) -> tuple[ExperimentStep, ...]:
    """Run the experiment on ``slot`` (its cached prompt is replaced).

    ``before_each`` runs before every request on the slot and may raise to stop the
    experiment (the probe checks that nobody else's request arrived in between)."""

    async def check() -> None:
        if before_each is not None:
            await before_each()

    # A new prompt every run, so nothing cached matches it (not cryptography).
    rng = random.Random(secrets.randbits(64))  # noqa: S311
    base = await _material(client, rng, plan.total)
    pool = await _material(client, rng, plan.total)
    p = plan
    prompts: list[tuple[str, list[int]]] = [
        ("cold", base[: p.head]),
        ("extend", base[: p.total]),
        ("repeat", base[: p.total]),
    ]
    tail = base[: p.tail_keep] + _changed(base[p.tail_keep : p.total], pool)
    prompts.append(("tail", tail))
    middle = tail[: p.middle] + tail[p.middle + p.middle_len :]
    prompts.append(("middle", middle))

    steps: list[ExperimentStep] = []
    history: list[SentPrompt] = []
    previous: list[int] = []
    for name, prompt in prompts:
        await check()
        steps.append(await _send(client, slot, name, prompt, previous, history, rules))
        previous = prompt
    if restore:
        await check()
        saved = await client.slot_action(slot, "save", PROBE_SLOT_FILE)
        await client.slot_action(slot, "erase")
        await client.slot_action(slot, "restore", PROBE_SLOT_FILE)
        grown = middle + pool[: p.restore_extra]
        answer = await client.completion(_body(grown, slot))
        r = answer.report
        steps.append(
            ExperimentStep(
                "restore",
                len(grown),
                len(middle),
                r.reused,
                r.processed,
                r.prompt_ms,
                None,
                saved_bytes=written if isinstance(written := saved.get("n_written"), int) else None,
            )
        )
    return tuple(steps)


def _body(prompt: list[int], slot: int) -> dict[str, object]:
    return {"prompt": prompt, "n_predict": 1, "id_slot": slot, "cache_prompt": True}


async def _send(
    client: LlamaCppClient,
    slot: int,
    name: str,
    prompt: list[int],
    previous: list[int],
    history: list[SentPrompt],
    rules: CheckpointRules,
) -> ExperimentStep:
    history.append(SentPrompt(tuple(prompt)))
    predicted = predict_slot(history, rules).reuse[-1]
    recurrent = predict_slot(history, replace(rules, n_swa=0, recurrent=True)).reuse[-1]
    answer = await client.completion(_body(prompt, slot))
    r = answer.report
    history[-1] = SentPrompt(tuple(prompt), reused=r.reused)
    return ExperimentStep(
        name,
        len(prompt),
        _lcp(previous, prompt),
        r.reused,
        r.processed,
        r.prompt_ms,
        predicted,
        recurrent,
    )


def _exact(step: ExperimentStep) -> int:
    """What a server that reuses every prefix reports: the common prefix, keeping one
    token to evaluate."""
    return min(step.divergence, step.prompt_tokens - 1)


# Block-granular prefix caches (vLLM: 16-token blocks) land up to a block short.
BLOCK_TOLERANCE = 16


def classify(
    steps: tuple[ExperimentStep, ...], plan: ExperimentPlan = ExperimentPlan()
) -> Classification:
    """Read the checkpoint source off the experiment's reported reuse.

    Two models are held against what the server reported: *exact prefix* (reuse =
    the common prefix) and the *checkpoint ring* (:func:`predict_slot`'s
    ``ring_predicted``). Reuse beyond the change is KV shifting; nothing reused at
    all, or appends reused but a change re-processing everything, is none.
    """
    main = [s for s in steps if s.name != "restore"]
    by = {s.name: s for s in main}
    if not {"extend", "repeat", "tail", "middle"} <= set(by) or any(
        s.reused is None for s in steps
    ):
        return Classification(
            "uncertain", (), "the server does not report how many tokens it reused", False
        )
    later = [s for s in main if s.name != "cold"]
    reused = {s.name: s.reused or 0 for s in main}
    middle = by["middle"]
    figures = ", ".join(f"{s.name} {s.reused}/{_exact(s)}" for s in later)

    source: CheckpointSource
    recurrent = False
    if all(reused[s.name] == 0 for s in later):
        source = "none"
        reason = f"nothing was reused, not even an exact resend (reused/prefix: {figures})"
    elif reused["middle"] >= plan.middle + plan.middle_len:
        source = "kv-shift"
        reason = (
            f"removing {plan.middle_len} tokens at {plan.middle} still reused "
            f"{reused['middle']} of {middle.prompt_tokens}: text after a change is shifted "
            "into place (--cache-reuse)"
        )
    elif all(_exact(s) - BLOCK_TOLERANCE <= reused[s.name] <= _exact(s) for s in later):
        source = "exact-prefix"
        reason = f"every prefix was reused (reused/prefix: {figures}): full attention or --swa-full"
    elif all(reused[s.name] <= _exact(s) for s in later) and reused["middle"] > 0:
        source = "checkpoint-ring"
        matched = all(reused[s.name] == s.ring_predicted for s in later)
        recurrent = not matched and all(reused[s.name] == s.recurrent_predicted for s in later)
        reason = f"reuse snapped back to earlier checkpoints (reused/prefix: {figures}); " + (
            "the checkpoint-ring model predicted every step exactly"
            if matched
            else "a hybrid/recurrent model: it resumes only at a checkpoint or the exact end "
            "of its state (the recurrent-memory model predicted every step exactly)"
            if recurrent
            else "the ring model did not predict every step exactly"
        )
    elif all(reused[s.name] <= _exact(s) for s in later):
        source = "none"
        reason = (
            f"a removal at token {plan.middle} re-processed the whole prompt although "
            f"other prompts were reused (reused/prefix: {figures}): no checkpoint to resume from"
        )
    else:
        return Classification(
            "uncertain", (), f"reuse fits no known model (reused/prefix: {figures})", True
        )

    restored = next((s for s in steps if s.name == "restore"), None)
    sources: tuple[CheckpointSource, ...] = (source,) if source != "none" else ()
    if restored is not None:
        resumes = (restored.reused or 0) >= restored.divergence - 2
        if resumes:
            if source == "none":
                source = "slot-restore"
            sources = (*sources, "slot-restore")
            reason += f"; a restored slot state resumed ({restored.reused} reused)"
        else:
            reason += (
                f"; a restored slot state did not resume (reused {restored.reused} of "
                f"{restored.divergence})"
            )
    return Classification(source, sources, reason, True, recurrent)
