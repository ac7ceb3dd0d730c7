"""What the tiny random-weight models share: Gemma 3's tokenizer copied, seeded weights,
the file written beside its name and renamed into place.

Imported by scripts/build-recurrent-model.py and scripts/build-full-attention-model.py
(run with a Python that has the ``gguf`` package; each script's own directory is on its
path). Each script keeps what makes its model: the architecture's keys and tensors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


class TinyModel:
    """A GGUF under construction at ``out``.partial, Gemma 3's tokenizer already in it."""

    def __init__(self, source: Path, out: Path, arch: str, name: str) -> None:
        import gguf

        self.out = out
        self.partial = out.with_name(out.name + ".partial")
        self.writer = gguf.GGUFWriter(self.partial, arch)
        self.writer.add_name(name)
        self.writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        self.n_vocab = _copy_tokenizer(gguf.GGUFReader(source), self.writer)
        if self.n_vocab == 0:
            raise SystemExit(f"{source}: no tokenizer.ggml.tokens")

    def seeded(self, seed: int) -> tuple[Callable[..., Any], Callable[[int], Any]]:
        """``weight(*shape)`` (normal(0, 0.02)) and ``ones(n)`` from one seed."""
        import numpy as np

        rng = np.random.default_rng(seed)

        def weight(*shape: int, dtype: type = np.float32) -> Any:
            # numpy shape is ggml's ne reversed: ggml {n_embd, n_vocab} is (n_vocab, n_embd).
            return rng.normal(0.0, 0.02, size=shape).astype(dtype)

        def ones(n: int) -> Any:
            return np.ones(n, dtype=np.float32)

        return weight, ones

    def finish(self) -> int:
        self.writer.write_header_to_file()
        self.writer.write_kv_data_to_file()
        self.writer.write_tensors_to_file()
        self.writer.close()
        self.partial.rename(self.out)
        print(self.out)
        return 0


def _copy_tokenizer(reader: Any, writer: Any) -> int:
    """Every tokenizer.* key as the source has it, types included; the vocabulary's size."""
    import gguf

    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            values = field.contents()
            writer.add_key_value(name, values, kind, sub_type=field.types[-1])
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(values)
        else:
            writer.add_key_value(name, field.contents(), kind)
    return n_vocab


def arguments(argv: list[str], doc: str | None) -> tuple[Path, Path] | None:
    """``TOKENIZER.gguf OUT.gguf``, or None after printing the usage (or the output, which
    exists already: a no-op)."""
    if len(argv) != 2:
        print(doc, file=sys.stderr)
        raise SystemExit(2)
    source, out = Path(argv[0]), Path(argv[1])
    if out.is_file():
        print(out)
        return None
    return source, out
