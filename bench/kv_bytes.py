"""A model's KV cache in bytes a token, read from its GGUF file, and the RAM prompt cache
(``-cram``) scaled to it: bench/agents.py gives this model's server the cache that holds
as many of its agents' sessions as a 7B's 8 GiB default holds of a 7B's (issue 37).

The GGUF reader reads the metadata only (the header's key-value pairs; arrays of strings,
the vocabulary, are skipped): Sakur4's environment has no ``gguf`` package.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

MiB = 1024 * 1024


def _gguf_value(f: BinaryIO, kind: int) -> Any:
    scalars = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
               10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
    if kind in scalars:
        fmt = scalars[kind]
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
    if kind == 8:
        (n,) = struct.unpack("<Q", f.read(8))
        return f.read(n).decode("utf-8", errors="replace")
    if kind == 9:
        sub, n = struct.unpack("<IQ", f.read(12))
        if sub in scalars and sub != 8:  # numbers: read them (per-layer head counts)
            return [_gguf_value(f, sub) for _ in range(n)]
        for _ in range(n):  # strings (the vocabulary): skipped, not kept
            _gguf_value(f, sub)
        return None
    raise ValueError(f"unknown GGUF value type {kind}")


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The GGUF file's metadata (arrays of strings left out)."""
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        _version, _tensors, n_kv = struct.unpack("<IQQ", f.read(20))
        out = {}
        for _ in range(n_kv):
            (n,) = struct.unpack("<Q", f.read(8))
            key = f.read(n).decode()
            (kind,) = struct.unpack("<I", f.read(4))
            out[key] = _gguf_value(f, kind)
        return out


@dataclass(frozen=True)
class KvShape:
    """A model's f16 KV cache: bytes a token in the layers that keep every token, in the
    sliding-window layers, and how many cells a sliding-window layer keeps."""

    per_token_full: int
    per_token_swa: int
    swa_cells: int  # 0: no sliding window

    def state_bytes(self, tokens: int, swa_full: bool) -> int:
        """One prompt's entry in the RAM cache: its state and, for a sliding-window
        state, the context checkpoint a saved prompt carries (a copy of the window: one
        at these lengths under the default ``-cms``). Measured on Gemma 3 270M's default
        flags: entries of 32.5-34.3 MiB for 1.0-1.6k-token prompts; without the
        checkpoint this said ~19 MiB, and the ``-cram`` meant for two held one."""
        if swa_full or not self.swa_cells:
            return (self.per_token_full + self.per_token_swa) * tokens
        window = self.per_token_swa * min(tokens, self.swa_cells)
        return self.per_token_full * tokens + 2 * window


# Gemma 3: every 6th layer attends to the whole prompt (llama.cpp's set_swa_pattern(6)).
GEMMA3_SWA_PATTERN = 6
N_UBATCH = 512  # llama-server's default; a sliding-window cache keeps n_swa + n_ubatch cells


def kv_shape(meta: Mapping[str, Any]) -> KvShape:
    arch = meta["general.architecture"]
    layers = int(meta[f"{arch}.block_count"])
    heads = int(meta[f"{arch}.attention.head_count"])
    kv = meta.get(f"{arch}.attention.head_count_kv", heads)
    kv_heads = max(kv) if isinstance(kv, list) else int(kv)
    head = int(meta[f"{arch}.embedding_length"]) // heads
    k = int(meta.get(f"{arch}.attention.key_length", head))
    v = int(meta.get(f"{arch}.attention.value_length", head))
    per_layer = kv_heads * (k + v) * 2  # f16
    swa = int(meta.get(f"{arch}.attention.sliding_window", 0) or 0)
    if arch == "gemma3" and swa:
        full = layers // GEMMA3_SWA_PATTERN
        return KvShape(per_layer * full, per_layer * (layers - full), swa + N_UBATCH)
    return KvShape(per_layer * layers, 0, 0)


# A 7B's KV, f16: Qwen2.5-7B (config.json: 28 layers, 4 KV heads of 128) holds
# 2 x 28 x 4 x 128 x 2 = 57,344 bytes a token (hearth's README measured 56.3 KB a token).
SEVEN_B_BYTES_PER_TOKEN = 2 * 28 * 4 * 128 * 2
DEFAULT_CRAM_MIB = 8192  # llama-server's --cache-ram default
ISSUE_SESSION_TOKENS = 66_000  # issue 37: "about two 66k-token conversations of a 7B"
HELD_SESSIONS = 2


@dataclass(frozen=True)
class RamScaling:
    cram_mib: int
    session_tokens: int  # the longest agent's last prompt
    state_bytes: int  # its saved state on this model and flags
    sessions_held: float

    def describe(self) -> str:
        seven_b_tokens = DEFAULT_CRAM_MIB * MiB // SEVEN_B_BYTES_PER_TOKEN
        return (
            f"-cram {self.cram_mib} MiB holds {self.sessions_held:.1f} of the agents' sessions "
            f"(the longest: {self.session_tokens:,} tokens, {self.state_bytes / MiB:.1f} MiB of "
            f"state here), as a 7B's default 8 GiB holds {seven_b_tokens:,} tokens = "
            f"{seven_b_tokens / ISSUE_SESSION_TOKENS:.1f} sessions of 66k "
            f"(Qwen2.5-7B, f16 KV: {SEVEN_B_BYTES_PER_TOKEN:,} bytes a token)"
        )


def ram_scaling(shape: KvShape, session_tokens: int, swa_full: bool) -> RamScaling:
    """The ``-cram`` that holds :data:`HELD_SESSIONS` of the longest session's states."""
    state = shape.state_bytes(session_tokens, swa_full)
    cram = max(1, math.ceil(HELD_SESSIONS * state / MiB))
    return RamScaling(cram, session_tokens, state, cram * MiB / state)
