# gpupool: two commands set everything up.
#   make demo  - replay the default openb trace on the simulated cluster and show the result
#   make test  - lint, type-check, check the import contracts and run every test
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TRACE_DIR ?= ../shared/data/openb
export GPUPOOL_TRACE_DIR ?= $(TRACE_DIR)

.PHONY: demo test lint unit venv bench-speed bench-matrix control-plane clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --group dev -e '.[reports,kube]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/gpupool demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The integration tests run a real etcd, kube-apiserver, kwok and kube-scheduler, built from Go
# modules into a cache outside the repo (about 10 minutes the first time, seconds afterwards).
unit: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" $(BIN)/pytest

test: lint unit

bench-speed: $(STAMP)
	$(BIN)/python bench/placement_speed.py --profile --json out/bench/placement_speed.json

bench-matrix: $(STAMP)
	$(BIN)/python bench/placement_matrix.py --out out/bench/matrix

# Real kube-apiserver, kube-scheduler, etcd and kwok from Go modules, cached outside the repo
# (groundwork for the live-cluster integration tests; needs Go >= 1.26).
control-plane:
	scripts/build-control-plane.sh

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
