#!/usr/bin/env bash
# Install the optional Ray extra (plus the test tools) into a venv OUTSIDE the repo, keyed by
# the hash of the requirements it installs, so CI reuses it across runs and the default .venv
# stays free of Ray.  Prints the venv path as the last line of stdout.
#
# Cold: 31 s on 2 cores with an empty pip cache from a local index (longer over the network:
# one ~70 MB wheel); warm: seconds (only the editable link to this checkout is refreshed).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-${HOME:-/root}/.cache/pip}"

# The requirements that land in the venv: the project's dependencies and its `ray` and `test`
# extras, read from pyproject.toml (not the repo's code: it is installed editable).
REQS="$("$PY" - "$REPO/pyproject.toml" <<'PYEOF'
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
ex = p.get("optional-dependencies", {})
print("\n".join([*p["dependencies"], *ex.get("ray", []), *ex.get("test", [])]))
PYEOF
)"
KEY="$(printf '%s\n%s\nv1\n' "$REQS" "$("$PY" -c 'import sys;print(sys.version_info[:2])')" \
  | sha256sum | cut -c1-12)"
CACHE="${TOPAS_CACHE:-${HOME:-/root}/.cache/topas}"
VENV="$CACHE/ray-venv-$KEY"

if [[ -f "$VENV/.complete" ]]; then
  # re-link the (possibly moved) checkout: CI clones into a fresh folder
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$REPO" >&2 || \
    "$VENV/bin/python" -m pip install -q --no-deps -e "$REPO" >&2
  echo "$VENV"
  exit 0
fi

mkdir -p "$CACHE"
rm -rf "$VENV"
# venvs hard-code their path, so build in place and mark completion last: an interrupted
# build has no .complete and is rebuilt from scratch next time
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip setuptools >&2
mapfile -t REQ_LINES <<<"$REQS"
"$VENV/bin/python" -m pip install -q "${REQ_LINES[@]}" >&2
"$VENV/bin/python" -m pip install -q --no-deps -e "$REPO" >&2
"$VENV/bin/python" -c "import ray, topas" >&2
touch "$VENV/.complete"
echo "$VENV"
