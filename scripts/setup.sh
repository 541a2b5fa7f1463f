#!/usr/bin/env bash
# scripts/setup.sh — installs braid's dependencies by package name. Idempotent; run by `make`.
#
#   Debian packages : cmake, ninja-build, g++, OpenMPI (libopenmpi-dev, openmpi-bin), GoogleTest,
#                     SimGrid (libsimgrid-dev; optional at build time: without it `braid simulate` is off)
#   CUDA toolkit    : nvcc, cuBLAS/cuBLASLt, NCCL (expected installed with the toolkit; checked here)
#   PyPI            : nvidia-cutlass==$CUTLASS_VERSION, whose wheel carries the CUTLASS/CuTe headers under
#                     cutlass_library/source/include; they are unpacked to .deps/cutlass/include
#                     nvidia-cudnn-frontend==$CUDNN_FE_VERSION, the header-only cuDNN graph API (include/ of
#                     the wheel, with its thirdparty/nlohmann json); unpacked to .deps/cudnn_frontend/include
#   cuDNN itself    : optional (cudnn.h + libcudnn from the toolkit, Debian, or torch's nvidia-cudnn wheel);
#                     CMake looks for it and builds fused attention only when it is found (docs/layer.md)
#
# The GPU node has no package access. Run `scripts/setup.sh --stage` here first: it also copies the
# GoogleTest sources to .deps/googletest, so that the ignored folder .deps carries everything the
# build needs (name it in the device tool's `carry`). On the node, `BRAID_OFFLINE=1 make test` then
# builds from .deps and the node's own CUDA/NCCL/MPI without touching any registry.
set -euo pipefail
cd "$(dirname "$0")/.."
CUTLASS_VERSION=4.2.0.0
CUDNN_FE_VERSION=1.32.0
DEPS=.deps
stage=0
[ "${1:-}" = "--stage" ] && stage=1

say() { echo "[setup] $*"; }

need_apt=()
have_pkg() { dpkg -s "$1" >/dev/null 2>&1; }
if [ "${BRAID_OFFLINE:-0}" != "1" ] && command -v dpkg >/dev/null 2>&1; then
  for p in cmake ninja-build g++ libopenmpi-dev openmpi-bin libgtest-dev googletest libsimgrid-dev; do
    have_pkg "$p" || need_apt+=("$p")
  done
  if [ ${#need_apt[@]} -gt 0 ]; then
    say "apt-get install ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  fi
fi

# CUDA toolkit pieces.
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || { echo "[setup] error: nvcc not found (install the CUDA toolkit)" >&2; exit 1; }
cuda_root=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
nccl_h=""
for f in "$cuda_root/include/nccl.h" /usr/include/nccl.h; do [ -f "$f" ] && nccl_h=$f && break; done
[ -n "$nccl_h" ] || { echo "[setup] error: nccl.h not found (install NCCL: libnccl-dev or the toolkit's NCCL)" >&2; exit 1; }

# CUTLASS/CuTe headers from the pinned wheel.
if [ ! -f "$DEPS/cutlass/include/cutlass/cutlass.h" ] || [ "$(cat $DEPS/cutlass/VERSION 2>/dev/null)" != "$CUTLASS_VERSION" ]; then
  if [ "${BRAID_OFFLINE:-0}" = "1" ]; then
    say "offline: no CUTLASS headers in $DEPS (stage them with scripts/setup.sh --stage where PyPI is reachable)"
  else
    say "fetching nvidia-cutlass==$CUTLASS_VERSION from PyPI"
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cutlass==$CUTLASS_VERSION"
    whl=$(ls "$tmp"/nvidia_cutlass-*.whl)
    rm -rf "$DEPS/cutlass" && mkdir -p "$DEPS/cutlass"
    python3 - "$whl" "$DEPS/cutlass" <<'PY'
import sys, zipfile, os
whl, dest = sys.argv[1], sys.argv[2]
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(prefix) and not n.endswith("/"):
            out = os.path.join(dest, "include", n[len(prefix):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(n) as src, open(out, "wb") as dst:
                dst.write(src.read())
PY
    echo "$CUTLASS_VERSION" > "$DEPS/cutlass/VERSION"
    rm -rf "$tmp"
  fi
fi

# cudnn-frontend headers from the pinned wheel. The wheel is per Python/platform but its headers are
# not, so ask for one fixed tag: the result does not depend on the local Python.
if [ ! -f "$DEPS/cudnn_frontend/include/cudnn_frontend.h" ] || [ "$(cat $DEPS/cudnn_frontend/VERSION 2>/dev/null)" != "$CUDNN_FE_VERSION" ]; then
  if [ "${BRAID_OFFLINE:-0}" = "1" ]; then
    say "offline: no cudnn-frontend headers in $DEPS (attention falls back to braid's own kernels)"
  else
    say "fetching nvidia-cudnn-frontend==$CUDNN_FE_VERSION from PyPI"
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version 3.11 \
      --abi cp311 --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FE_VERSION"
    whl=$(ls "$tmp"/nvidia_cudnn_frontend-*.whl)
    rm -rf "$DEPS/cudnn_frontend" && mkdir -p "$DEPS/cudnn_frontend"
    python3 - "$whl" "$DEPS/cudnn_frontend" <<'PY'
import sys, zipfile, os
whl, dest = sys.argv[1], sys.argv[2]
prefix = "include/"
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith(prefix) and not n.endswith("/") and n.endswith((".h", ".hpp", "LICENSE.MIT")):
            out = os.path.join(dest, n)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(n) as src, open(out, "wb") as dst:
                dst.write(src.read())
PY
    echo "$CUDNN_FE_VERSION" > "$DEPS/cudnn_frontend/VERSION"
    rm -rf "$tmp"
  fi
fi

if [ $stage -eq 1 ]; then
  # What the offline GPU node lacks: GoogleTest sources (it has headers only, maybe).
  if [ ! -f "$DEPS/googletest/CMakeLists.txt" ]; then
    src=/usr/src/googletest
    [ -f $src/CMakeLists.txt ] || { echo "[setup] error: $src missing (apt-get install googletest)" >&2; exit 1; }
    rm -rf "$DEPS/googletest" && cp -r $src "$DEPS/googletest"
  fi
  say "staged: $(du -sh $DEPS | cut -f1) in $DEPS (carry it to the GPU node)"
fi
say "ok: nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), nccl.h at $nccl_h, CUTLASS $(cat $DEPS/cutlass/VERSION 2>/dev/null || echo absent), cudnn-frontend $(cat $DEPS/cudnn_frontend/VERSION 2>/dev/null || echo absent)"
