"""Build a tiny random-weight hybrid (recurrent + attention) model for llama-server, once.

Run with a Python that has the ``gguf`` package (0.19.0; the vLLM environment of
scripts/install-vllm.sh has it, Sakur4's own does not):

    <python-with-gguf> scripts/build-recurrent-model.py TOKENIZER.gguf OUT.gguf

Why: on hybrid and recurrent models llama-server cannot cut its memory back to an
arbitrary prefix (a recurrent state holds the whole past in one cell), so a prompt
resumes only from a saved context checkpoint or the state it ends with — a resume
model of its own that Sakur4's probe must recognise. No such model could be had from
the registries here, and cache behaviour does not depend on the weights, so this
writes one: architecture ``lfm2`` (LiquidAI LFM2, llama.cpp ``src/models/lfm2.cpp``),
six layers of width 128 — short-convolution (recurrent) layers with full-attention
layers at 2 and 5 — normal(0, 0.02) weights from a fixed seed, no sliding window (the
hybrid memory without SWA). Its text is noise; its cache behaviour is the server's.

The tokenizer (Gemma 3's 262,144-token SentencePiece vocabulary and special ids) is
copied from ``TOKENIZER.gguf`` (the packaged Gemma 3 270M), so tokenization matches
the project's other model and the server applies the same chat template fallback
(the file carries none). Tensor names and shapes follow llama.cpp b11434
(``llama_model_lfm2::load_arch_tensors``); metadata keys follow
``conversion/lfm2.py``. ~70 MB; the output is written beside ``OUT`` and renamed
into place, and a run whose ``OUT`` exists is a no-op. Never commit the output.
"""

from __future__ import annotations

import sys
from typing import Any

from tiny_gguf import TinyModel, arguments

ARCH = "lfm2"
N_EMBD = 128
N_HEAD = 4  # head size 32
N_HEAD_KV = 2
N_FF = 256
CONV_L_CACHE = 3  # LFM2's short-convolution length (conv_L_cache)
ATTENTION_LAYERS = (2, 5)
N_LAYER = 6
CONTEXT_LENGTH = 32768
SEED = 20261203


def main(argv: list[str]) -> int:
    given = arguments(argv, __doc__)
    if given is None:
        return 0
    import gguf
    import numpy as np

    model = TinyModel(*given, ARCH, "sakur4 tiny random lfm2 (cache tests only)")
    writer, n_vocab = model.writer, model.n_vocab

    # Hyperparameters as conversion/lfm2.py writes them: head_count_kv per layer,
    # 0 marking a short-convolution (recurrent) layer.
    writer.add_vocab_size(n_vocab)
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv([N_HEAD_KV if i in ATTENTION_LAYERS else 0 for i in range(N_LAYER)])
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_shortconv_l_cache(CONV_L_CACHE)

    weight, ones = model.seeded(SEED)

    head = N_EMBD // N_HEAD
    names = gguf.TENSOR_NAMES
    T = gguf.MODEL_TENSOR
    # Tied output: no output.weight, the server reuses token_embd.
    writer.add_tensor(names[T.TOKEN_EMBD] + ".weight", weight(n_vocab, N_EMBD, dtype=np.float16))
    writer.add_tensor(names[T.TOKEN_EMBD_NORM] + ".weight", ones(N_EMBD))  # LFM2's final norm
    for i in range(N_LAYER):

        def put(tensor: gguf.MODEL_TENSOR, value: Any, i: int = i) -> None:
            writer.add_tensor(names[tensor].format(bid=i) + ".weight", value)

        put(T.ATTN_NORM, ones(N_EMBD))  # LFM2's operator_norm, before either kind of layer
        put(T.FFN_NORM, ones(N_EMBD))
        put(T.FFN_GATE, weight(N_FF, N_EMBD))
        put(T.FFN_UP, weight(N_FF, N_EMBD))
        put(T.FFN_DOWN, weight(N_EMBD, N_FF))
        if i in ATTENTION_LAYERS:
            put(T.ATTN_Q_NORM, ones(head))
            put(T.ATTN_K_NORM, ones(head))
            put(T.ATTN_Q, weight(N_EMBD, N_EMBD))
            put(T.ATTN_K, weight(N_HEAD_KV * head, N_EMBD))
            put(T.ATTN_V, weight(N_HEAD_KV * head, N_EMBD))
            put(T.ATTN_OUT, weight(N_EMBD, N_EMBD))
        else:
            put(T.SHORTCONV_CONV, weight(N_EMBD, CONV_L_CACHE))
            put(T.SHORTCONV_INPROJ, weight(3 * N_EMBD, N_EMBD))
            put(T.SHORTCONV_OUTPROJ, weight(N_EMBD, N_EMBD))

    return model.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
