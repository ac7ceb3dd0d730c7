"""How to start a server for several agents (issue 37 item 5): how many slots and
which cache flags, for the number of agents the user runs (``sakur4 probe --agents N``,
``sakur4 wrap --agents N``), by what the probe measured of the model.

Subagents count: Claude Code's Task tool and OpenCode's subagents run on the same
server with prefixes of their own, as a second terminal does.

What each line rests on (docs/design/backends.md, "Many agents on one server" and
"Slot files, measured for the scheduler"; b11434):

- Full attention, or a sliding window under ``--swa-full``: a slot file restores and
  resumes at any divergence, so the gateway can park sessions beyond the slots
  (``--slot-save-path``) and restore each before its next turn.
- A sliding window on its checkpoint ring: a restored slot file resumed nowhere, a
  RAM-cache entry only at its end or a checkpoint: a slot for each agent.
- Hybrid/recurrent: a state resumes only at a checkpoint or its exact end, and
  checkpoints do not cross slots (llama.cpp #22942): a slot for each agent.
- The RAM prompt cache (``-cram``) holding fewer states than agents misses at every
  switch in round-robin order (it drops the oldest, the agent coming next): it helps
  only when it holds them all.

A kind without slot actions is advised by its own :attr:`ServerKind.agents_advice`.
What is advised on is what the probe found (:class:`Probed`: the probe's result).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from sakur4.backends.experiment import CheckpointSource, ExperimentStep


class Kind(Protocol):
    """What the advice reads of a server kind (:class:`sakur4.backends.kinds.base.ServerKind`,
    which sits above this module)."""

    @property
    def is_gateway(self) -> bool: ...
    @property
    def slot_actions(self) -> bool: ...
    @property
    def agents_advice(self) -> Callable[[int, int | None], tuple[str, ...]]: ...


class Probed(Protocol):
    """What the advice reads of a probe result (:class:`sakur4.probe.ProbeResult`)."""

    @property
    def agents(self) -> int: ...
    @property
    def n_ctx(self) -> int | None: ...
    @property
    def total_slots(self) -> int | None: ...
    @property
    def slot_actions(self) -> str: ...
    @property
    def checkpoint_source(self) -> CheckpointSource: ...
    @property
    def sources(self) -> tuple[CheckpointSource, ...]: ...
    @property
    def recurrent_memory(self) -> bool: ...
    @property
    def experiment(self) -> tuple[ExperimentStep, ...]: ...
    @property
    def server(self) -> Kind: ...


# Where the advice puts parked sessions' slot files (any directory of the user's will do).
SLOT_DIR = "~/.cache/sakur4/slots"
SUBAGENTS = (
    "subagents (Claude Code's Task tool, OpenCode's subagents) and every other "
    "terminal on the server are agents too"
)
# The disk figure where the probe saved no state of this model: f16 KV of a 7B
# (Qwen2.5-7B: 2 × 28 layers × 4 KV heads × 128 × 2 bytes; bench/kv_bytes.py), and Gemma 3
# 270M's slot files as b11434 wrote them under --swa-full (docs/verification/agents-advice.md).
RULE_OF_THUMB = (
    "about the model's KV cache a token for each session's file (f16: 57 kB a token "
    "for a 7B such as Qwen2.5-7B); a sliding-window model's grows more slowly past its "
    "window (Gemma 3 270M: 18.4 kB a token up to 513 tokens, 3.1 kB after; 11.0 MB at "
    "1,000 tokens, 14.0 MB at 2,000)"
)
EACH_COUNTS = "every subagent and every terminal on this server counts"
SLOT_CAP = "least recently used out past SAKUR4_SLOT_FILES_CAP_MB (8 GiB)"
TRANSCRIPT = (
    "a KV state is a plaintext transcript of the conversation: create the directory "
    f"owner-only (`mkdir -m 700 {SLOT_DIR}`)"
)
# bench/agents.py, 4 agents on one slot, full attention, -cram holding 2.3 of them.
CYCLIC_MISS = (
    "bench/agents.py, 4 agents on one slot: 40.1 % of their prompts reused with the "
    "cache holding 2.3 of them, 84.7 % possible"
)

Model = Literal["full", "ring", "recurrent", "none", "unknown"]


def model_of(r: Probed) -> Model:
    """What the probe measured, as the advice needs it: full attention (or a sliding
    window under --swa-full: every prefix resumed), the sliding-window ring, a
    hybrid/recurrent ring, nothing resumed after a change, or not measured."""
    if r.recurrent_memory:
        return "recurrent"
    if r.checkpoint_source == "checkpoint-ring":
        return "ring"
    if {r.checkpoint_source, *r.sources} & {"exact-prefix", "kv-shift"}:
        return "full"
    if r.checkpoint_source in ("none", "slot-restore"):
        return "none"
    return "unknown"


def for_agents(r: Probed) -> tuple[str, ...]:
    """The lines for ``r.agents`` agents on the server ``r`` describes (none for one)."""
    if r.agents < 2 or r.server.is_gateway:
        return ()
    if not r.server.slot_actions:
        return r.server.agents_advice(r.agents, r.n_ctx)
    return _slots(r, model_of(r))


def _np(n: int, window: int | None) -> str:
    """``-np n -c window×n``: llama-server splits ``-c`` among its slots."""
    c = str(window * n) if window else f"{n}×WINDOW"
    return f"-np {n} -c {c}"


def _now(r: Probed, also: str = "") -> str:
    """What the server has now, against the agents (and ``also``, a note of the line's
    own), in one parenthesis."""
    slots = r.total_slots
    if slots is None:
        said = ""
    elif slots >= r.agents:
        said = f"this server's {slots} slots already give each agent one"
    elif slots == 1:
        said = "this server has 1 slot: the agents take turns on it"
    else:
        said = f"this server has {slots} slots: the agents take turns on them"
    notes = [n for n in (said, also) if n]
    return f" ({'; '.join(notes)})" if notes else ""


def _restore(r: Probed) -> tuple[int, int] | None:
    """The probe's saved state: (tokens, bytes), where its restore step ran."""
    step = next((s for s in r.experiment if s.name == "restore"), None)
    if step is None or not step.saved_bytes or not step.divergence:
        return None
    return step.divergence, step.saved_bytes


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} bytes"


def _disk(r: Probed, linear: bool) -> str:
    """What a parked session takes on disk: from the probe's own saved state where it
    saved one, else the rule of thumb. ``linear``: at most the same bytes a token as the
    probe's (full attention; a sliding-window model under --swa-full has the same
    figure from the probe, whose 392 tokens are inside its window, and grows more slowly
    past it: measured); else a fixed recurrent state makes the probe's figure no rate."""
    saved = _restore(r)
    if saved is None:
        return RULE_OF_THUMB
    tokens, size = saved
    per_token = size / tokens
    whole = f", {_size(per_token * r.n_ctx)} at most at the full window" if r.n_ctx else ""
    if linear:
        return (
            f"up to {_size(per_token)} a token for each session's file{whole} (the "
            f"probe's saved state: {tokens} tokens, {_size(size)}; a sliding-window "
            "model's grows more slowly past its window)"
        )
    return (
        f"the probe's saved state was {_size(size)} for {tokens} tokens (a fixed "
        "recurrent state and the attention layers' tokens: less a token as it grows)"
    )


def _cram(r: Probed) -> str:
    """How much RAM the prompt cache needs to hold every agent's state."""
    saved = _restore(r)
    if saved is None or not r.n_ctx:
        return f"{r.agents} × the window × the model's KV bytes a token"
    tokens, size = saved
    need = size / tokens * r.n_ctx * r.agents
    return f"{r.agents} × {r.n_ctx:,} tokens × {_size(size / tokens)} = {_size(need)} at most"


def _slots(r: Probed, model: Model) -> tuple[str, ...]:
    n, window = r.agents, r.n_ctx
    fewer = max(1, n // 2)
    each = f"for {n} agents ({EACH_COUNTS})"
    pinned = "a slot for each agent, which the gateway pins one session to"
    memory = f"{n} × the {window:,}-token window of KV memory" if window else f"{n} windows"
    if model == "full":
        restored = (
            "slot save/restore is on and the probe's restored state resumed"
            if "slot-restore" in r.sources
            else "slot save/restore is off on this server now"
            if r.slot_actions == "unsupported"
            else ""
        )
        return (
            f"{each}; full attention, or a sliding window under `--swa-full` (every "
            f"prefix resumed): start llama-server with `{_np(n, window)} --slot-save-path "
            f"{SLOT_DIR} -cram 0`: {pinned}, so no agent's turn replaces another's state "
            f"({memory}); `--slot-save-path` because the gateway then saves each "
            "session's state after its answers and a restarted server resumes it from "
            "disk; `-cram 0` because with a slot each the RAM prompt cache has nothing "
            f"to give back and only takes memory{_now(r, restored)}",
            f"with fewer slots (memory short): `{_np(fewer, window)} --slot-save-path "
            f"{SLOT_DIR} -cram 0`: the gateway parks a session's slot state in its file "
            "when another needs the slot and restores it before that session's next "
            "turn, and a restored state resumes at any divergence here; disk: "
            f"{_disk(r, linear=True)}, {SLOT_CAP}; {TRANSCRIPT}",
            f"the RAM prompt cache (`-cram`, 8 GiB by default) helps only if it holds "
            f"every agent's state ({_cram(r)}): holding fewer, it drops the oldest, "
            "which in round-robin order is the agent coming next, so it misses at every "
            f"switch ({CYCLIC_MISS})",
        )
    if model == "ring":
        return (
            f"{each}; a sliding-window model on its checkpoint ring: start llama-server "
            f"with `{_np(n, window)} -cms 512 -cram 0`: {pinned} ({memory}), because a "
            "state that leaves its slot comes back holding only the window: a slot file "
            "resumed nowhere (measured) and a RAM-cache entry resumes only at its end "
            "or a checkpoint, so `--slot-save-path` does not help here and `-cram 0` "
            f"only frees memory{_now(r)}",
            "or, to park agents on fewer slots, add `--swa-full`: "
            f"`{_np(fewer, window)} --swa-full --slot-save-path {SLOT_DIR} -cram 0`: "
            "with it a slot file restores and resumes at any divergence (measured on "
            "Gemma 3 270M: 601 of 601 tokens reused), at a full-attention model's KV "
            f"memory; disk: {RULE_OF_THUMB}, {SLOT_CAP}; {TRANSCRIPT}",
        )
    if model == "recurrent":
        return (
            f"{each}; a hybrid/recurrent model: start llama-server with "
            f"`{_np(n, window)} -cms 512 -cram 0`: {pinned} ({memory}), because its "
            "state resumes only at a checkpoint or its exact end and checkpoints do not "
            "cross slots (llama.cpp #22942); `-cram 0`: a state from the RAM cache "
            f"resumes only at its end or a checkpoint{_now(r)}",
            f"with fewer slots, `--slot-save-path {SLOT_DIR}` helps only part of the "
            "time: a restored state resumes at its exact end (measured on lfm2: 392 of "
            "392 reused), which a turn reaches only when it extends the agent's "
            "previous prompt token for token; an earlier divergence is re-processed; "
            f"disk: {_disk(r, linear=False)}, {SLOT_CAP}; {TRANSCRIPT}",
        )
    if model == "none":
        parks = (
            f"; slot save/restore is on and the probe's restored state resumed: with "
            f"fewer slots the gateway parks sessions in files (disk: "
            f"{_disk(r, linear=True)}, {SLOT_CAP}; {TRANSCRIPT})"
            if "slot-restore" in r.sources
            else ""
        )
        return (
            f"{each}; this server resumed nothing after a change: start llama-server "
            f"with `{_np(n, window)}`: {pinned} ({memory}); with fewer, each switch "
            f"re-processes the agent's whole prompt{_now(r)}{parks}",
        )
    return (
        f"{each}: `{_np(n, window)}` (a slot for each agent, {memory}) is safe for any "
        "model; which cache flags help (`--slot-save-path`, `-cram`) depends on what "
        f"the cache experiment measures: run `sakur4 probe --agents {n}` without "
        f"--quick{_now(r)}",
    )
