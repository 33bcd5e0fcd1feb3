#!/usr/bin/env bash
# CI step for the Ray executor: build (or reuse) Ray's venv outside the clone, keyed by the
# hash of the requirements (scripts/install_ray.sh; cold ~30 s, warm ~2 s), then run tests/ray:
# pool and Ray give the same results, Ctrl-C, an existing cluster (~70 s on 2 cores, most of
# it starting Ray five times).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}"
VENV="$(bash scripts/install_ray.sh | tail -n 1)"
echo "Ray venv: $VENV"
export RAY_USAGE_STATS_ENABLED=0
unset RAY_ADDRESS  # the tests start their own Ray; one cluster test sets --ray-address
# -p no:cacheprovider keeps the CI clone clean
exec timeout 900 "$VENV/bin/python" -m pytest -m ray tests/ray -p no:cacheprovider \
  -o addopts="" -q
