# gpupool: two commands set everything up.
#   make demo  - replay the default openb trace on the simulated cluster and show the result
#   make test  - lint, type-check, check the import contracts and run every test
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TRACE_DIR ?= ../shared/data/openb
export GPUPOOL_TRACE_DIR ?= $(TRACE_DIR)

.PHONY: demo test lint unit venv bench-speed bench-matrix bench-live bench-memory dev-cluster \
	control-plane clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --group dev -e '.[reports,kube,web,sim]'
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
# modules into a cache outside the repo (about 10 minutes the first time, seconds afterwards),
# and check /metrics with promtool (from Debian's prometheus package, extracted into the cache).
unit: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		GPUPOOL_PROMTOOL="$$(scripts/install-promtool.sh)" $(BIN)/pytest

test: lint unit

bench-speed: $(STAMP)
	$(BIN)/python bench/placement_speed.py --profile --json out/bench/placement_speed.json

bench-matrix: $(STAMP)
	$(BIN)/python bench/placement_matrix.py --out out/bench/matrix

# Real kube-apiserver, kube-scheduler, etcd and kwok from Go modules, cached outside the repo
# (needs Go >= 1.26; about 10 minutes the first time).
control-plane:
	scripts/build-control-plane.sh

# gpupool against kube-scheduler on one local control plane: 1,000 kwok nodes, 5,000 pods, 3 runs
bench-live: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		$(BIN)/python bench/live_throughput.py --runs 3 --json out/bench/live_throughput.json

# Peak memory of etcd, kube-apiserver, kwok and the scheduler with 5,000 nodes and 50,000 pods
bench-memory: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		$(BIN)/python bench/control_plane_memory.py --json out/bench/control_plane_memory.json

# A local control plane with 50 fake 8-GPU nodes; prints the kubeconfig; Ctrl-C stops it
dev-cluster: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		$(BIN)/gpupool dev-cluster up --nodes 50 --gpus-per-node 8

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
