# gpupool: two commands set everything up.
#   make demo  - replay the default openb trace on the simulated cluster and show the result
#   make test  - lint, type-check, check the import contracts, build the docs and run every test
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TRACE_DIR ?= ../shared/data/openb
export GPUPOOL_TRACE_DIR ?= $(TRACE_DIR)

.PHONY: demo test lint docs docs-screenshot unit venv bench-report bench-speed bench-matrix bench-live bench-memory \
	bench-standby-memory dev-cluster control-plane clean test-kubelet test-e2e images

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --group dev -e '.[reports,kube,web,face,agent,postgres,sim,dra]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/gpupool demo

lint: $(STAMP) docs
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The demo's screenshot in the docs is the one its browser test takes
docs-screenshot: $(STAMP)
	GPUPOOL_CHROMEDRIVER="$$(scripts/install-browser.sh)" $(BIN)/pytest \
		tests/browser/test_dashboard.py -k demos_chart -p no:cacheprovider
	cp out/test-artifacts/demo-dashboard.png docs/demo-dashboard.png

# The documentation site from docs/ (mkdocs.yml): strict, so a broken link or a page missing from
# the navigation fails the build; written to out/site.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The integration tests run a real etcd, kube-apiserver, kwok and kube-scheduler, built from Go
# modules into a cache outside the repo (about 10 minutes the first time, seconds afterwards),
# check /metrics with promtool (from Debian's prometheus package, extracted into the cache),
# run a throwaway PostgreSQL server for the store tests (Debian's postgresql package, installed by
# scripts/install-postgres.sh when missing), drive the dashboard in Debian's headless Chromium
# (scripts/install-browser.sh), and render the Helm chart with helm built from its Go module
# (scripts/build-helm.sh), dry-run with cert-manager's and the Prometheus operator's CRDs
# generated from their Go types (scripts/thirdparty-crds.sh).
unit: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		GPUPOOL_PROMTOOL="$$(scripts/install-promtool.sh)" \
		GPUPOOL_POSTGRES_BIN="$$(scripts/install-postgres.sh)" \
		GPUPOOL_CHROMEDRIVER="$$(scripts/install-browser.sh)" \
		GPUPOOL_HELM="$$(scripts/build-helm.sh)" \
		GPUPOOL_THIRDPARTY_CRDS="$$(scripts/thirdparty-crds.sh)" $(BIN)/pytest

test: lint unit test-kubelet test-e2e

# gpupool's node agent under a real kubelet (built once, about 12 minutes; needs root)
test-kubelet: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		GPUPOOL_KUBELET_BIN="$$(scripts/build-kubelet.sh)" \
		$(BIN)/pytest tests/integration/test_agent_real_kubelet.py -m real_kubelet

# End to end on a real node: the dev control plane, containerd 2.x and runc under the real kubelet,
# gpupool's own images (built from Debian's packages and the wheel, no Docker), the Helm chart
# installed for real. Needs root. The builds are cached outside the repo (measured on 2 shared,
# heavily loaded cores: containerd about 8 minutes, the images about 6, the first time; seconds
# afterwards, but the gpupool image is rebuilt, about 5 minutes, whenever src/, README.md or
# pyproject.toml changed: measured 13-15 minutes at a load average of 16); the tests themselves
# take about 10 minutes (test_shares_on_the_node.py about 5, 32 containers started).
test-e2e: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		GPUPOOL_KUBELET_BIN="$$(scripts/build-kubelet.sh)" \
		GPUPOOL_CONTAINERD_BIN="$$(scripts/build-containerd.sh)" \
		GPUPOOL_IMAGES_DIR="$$(PYTHON=$(BIN)/python scripts/build-images.sh)" \
		GPUPOOL_HELM="$$(scripts/build-helm.sh)" \
		GPUPOOL_POSTGRES_BIN="$$(scripts/install-postgres.sh)" \
		GPUPOOL_CHROMEDRIVER="$$(scripts/install-browser.sh)" \
		$(BIN)/pytest tests/e2e -m e2e

# gpupool's images as OCI archives (gpupool, test-workload, pause); prints their folder
images: $(STAMP)
	PYTHON=$(BIN)/python scripts/build-images.sh

bench-speed: $(STAMP)
	$(BIN)/python bench/placement_speed.py --profile --json out/bench/placement_speed.json

# The README's headline numbers (docs/headlines.toml), rerun on the code checked out
bench-report: $(STAMP)
	$(BIN)/python bench/report.py

bench-matrix: $(STAMP)
	$(BIN)/python bench/placement_matrix.py --out out/bench/matrix

# Real kube-apiserver, kube-scheduler, etcd and kwok from Go modules, cached outside the repo
# (needs Go >= 1.26; about 10 minutes the first time).
control-plane:
	scripts/build-control-plane.sh

# gpupool against kube-scheduler on one local control plane: 1,000 kwok nodes, 5,000 pods,
# 4 runs in ABBA order (each scheduler goes first in half of them)
bench-live: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		$(BIN)/python bench/live_throughput.py --runs 4 --json out/bench/live_throughput.json

# Peak memory of etcd, kube-apiserver, kwok and the scheduler with 5,000 nodes and 50,000 pods
bench-memory: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		$(BIN)/python bench/control_plane_memory.py --json out/bench/control_plane_memory.json

# RSS of a standby gpupool replica fed 50,000 pod updates while the bench holds the Lease
bench-standby-memory: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		$(BIN)/python bench/standby_memory.py --json out/bench/standby_memory.json

# A local control plane with 50 fake 8-GPU nodes; prints the kubeconfig; Ctrl-C stops it
dev-cluster: $(STAMP)
	GPUPOOL_CONTROLPLANE_BIN="$$(scripts/build-control-plane.sh)" \
		$(BIN)/gpupool dev-cluster up --nodes 50 --gpus-per-node 8

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
