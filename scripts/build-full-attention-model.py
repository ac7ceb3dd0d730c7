"""Build a tiny random-weight full-attention model for llama-server, once.

Run with a Python that has the ``gguf`` package (0.19.0; the vLLM environment of
scripts/install-vllm.sh has it, Sakur4's own does not):

    <python-with-gguf> scripts/build-full-attention-model.py TOKENIZER.gguf OUT.gguf

Why: the packaged Gemma 3 270M is a sliding-window model (15 of its 18 layers see only
the last 512 tokens), so what the server can resume, save to RAM and restore from disk
is what a sliding-window state allows. Most models people run on one server for many
agents are full attention (Qwen, Llama, Mistral): any prefix of a cached prompt resumes
and a saved state restores. bench/agents.py measures both kinds. No small full-attention
GGUF could be had from the registries here, and cache behaviour does not depend on the
weights, so this writes one: architecture ``llama`` (llama.cpp ``src/models/llama.cpp``),
four layers of width 128, 4 heads and 2 KV heads of 32 (1,024 bytes of f16 KV a token),
normal(0, 0.02) weights from a fixed seed, no sliding window. Its text is noise; its
cache behaviour is the server's.

The tokenizer (Gemma 3's 262,144-token SentencePiece vocabulary and special ids) is
copied from ``TOKENIZER.gguf`` (the packaged Gemma 3 270M), so the same prompts are
the same tokens as on the sliding-window model (bench/agents.py gives both servers
the packaged model's chat template). ~70 MB, most of it the embedding; the output is written
beside ``OUT`` and renamed into place, and a run whose ``OUT`` exists is a no-op.
Never commit the output. What it shares with scripts/build-recurrent-model.py (the
tokenizer copied, seeded weights, the write) is scripts/tiny_gguf.py.
"""

from __future__ import annotations

import sys
from typing import Any

from tiny_gguf import TinyModel, arguments

ARCH = "llama"
N_EMBD = 128
N_HEAD = 4  # head size 32
N_HEAD_KV = 2
N_FF = 256
N_LAYER = 4
CONTEXT_LENGTH = 32768
SEED = 20261206


def main(argv: list[str]) -> int:
    given = arguments(argv, __doc__)
    if given is None:
        return 0
    import gguf
    import numpy as np

    model = TinyModel(*given, ARCH, "sakur4 tiny random llama (cache tests only)")
    writer, n_vocab = model.writer, model.n_vocab

    head = N_EMBD // N_HEAD
    writer.add_vocab_size(n_vocab)
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(head)
    writer.add_rope_freq_base(10_000.0)
    writer.add_layer_norm_rms_eps(1e-5)

    weight, ones = model.seeded(SEED)

    names = gguf.TENSOR_NAMES
    T = gguf.MODEL_TENSOR
    # Tied output: no output.weight, the server reuses token_embd.
    writer.add_tensor(names[T.TOKEN_EMBD] + ".weight", weight(n_vocab, N_EMBD, dtype=np.float16))
    writer.add_tensor(names[T.OUTPUT_NORM] + ".weight", ones(N_EMBD))
    for i in range(N_LAYER):

        def put(tensor: gguf.MODEL_TENSOR, value: Any, i: int = i) -> None:
            writer.add_tensor(names[tensor].format(bid=i) + ".weight", value)

        put(T.ATTN_NORM, ones(N_EMBD))
        put(T.ATTN_Q, weight(N_EMBD, N_EMBD))
        put(T.ATTN_K, weight(N_HEAD_KV * head, N_EMBD))
        put(T.ATTN_V, weight(N_HEAD_KV * head, N_EMBD))
        put(T.ATTN_OUT, weight(N_EMBD, N_EMBD))
        put(T.FFN_NORM, ones(N_EMBD))
        put(T.FFN_GATE, weight(N_FF, N_EMBD))
        put(T.FFN_UP, weight(N_FF, N_EMBD))
        put(T.FFN_DOWN, weight(N_EMBD, N_FF))

    return model.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
