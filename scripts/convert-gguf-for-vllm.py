"""Convert the packaged GGUF model into a directory vLLM can serve, once.

Run with the vLLM environment's Python (scripts/install-vllm.sh), which has
transformers and torch; Sakur4's own environment has neither:

    <vllm-venv>/bin/python scripts/convert-gguf-for-vllm.py MODEL.gguf OUT_DIR TEMPLATE.jinja

vLLM has no GGUF loader on CPU, so transformers reads the GGUF offline, dequantizes
it and saves bf16 safetensors with the tokenizer. The GGUF carries no chat template:
``TEMPLATE`` (Gemma 3's, as Google ships it with the instruct models) is saved with
the tokenizer. ``OUT_DIR/.complete`` holds a key of the inputs; while it matches, the
run is a no-op. The output is written beside ``OUT_DIR`` and renamed into place, so an
interrupted run never leaves a half model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path


def _key(gguf: Path, template: str) -> str:
    stat = gguf.stat()
    h = hashlib.sha256(f"{gguf.name}\0{stat.st_size}\0{int(stat.st_mtime)}\0".encode())
    h.update(template.encode())
    return h.hexdigest()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    gguf, out, template_path = Path(argv[0]), Path(argv[1]), Path(argv[2])
    template = template_path.read_text("utf-8")
    key = _key(gguf, template)
    marker = out / ".complete"
    if marker.is_file() and marker.read_text().strip() == key:
        print(out)
        return 0

    os.environ["HF_HUB_OFFLINE"] = "1"  # everything is local: never ask a hub
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.chat_template = template
    # dequantize: plain dense weights (vLLM loads no GGUF blocks on CPU), saved as bf16.
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True),
        dtype=torch.bfloat16,
    )
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    (partial / ".complete").write_text(key + "\n")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
