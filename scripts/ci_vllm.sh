#!/usr/bin/env bash
# CI step for the vLLM integration: install the pinned CPU vLLM into the cached venv (cold:
# ~3 minutes on 2 cores; warm: seconds), then run the in-process and HTTP engine tests.
# Budget: ~5 minutes warm on 2 idle cores, ~8 cold; the limit leaves room for a loaded machine.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$(bash scripts/install_vllm.sh | tail -n 1)"
echo "vLLM venv: $VENV"
export VLLM_ENABLE_V1_MULTIPROCESSING=0
# the lead's pytest config adds -q; -p no:cacheprovider keeps the CI clone clean
exec timeout 1500 "$VENV/bin/python" -m pytest -m vllm tests/vllm -p no:cacheprovider \
  -o addopts="" -q
