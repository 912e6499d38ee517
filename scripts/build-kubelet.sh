#!/usr/bin/env bash
# Build a real kubelet (k8s.io/kubernetes/cmd/kubelet, the control plane's Kubernetes version) and
# fakecri (k8s.io/cri-client's fake CRI runtime, plus CDI resolution at CreateContainer) into a
# cache outside the repository, and print the folder that holds them.
#
# They let tests/integration/test_agent_real_kubelet.py run gpupool's node agent under a real
# kubelet: `make test-kubelet`. About 12 minutes on 2 cores the first time; reused afterwards.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/tools/kubelet"
# shellcheck source=/dev/null
source "$root/tools/controlplane/versions.env"

command -v go >/dev/null || { echo "error: Go >= 1.26 is needed to build the kubelet" >&2; exit 2; }
digest=$(cat "$tools"/go.mod "$tools"/go.sum "$tools"/fakecri/main.go | sha256sum | cut -c1-12)
cache="${GPUPOOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
bin="$cache/kubelet/k8s-$K8S_VERSION-$digest/bin"
mkdir -p "$bin"

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} \
-X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"

build() {  # build PACKAGE NAME
    if [ -x "$bin/$2" ]; then
        return
    fi
    echo "building $2 ($1)" >&2
    (cd "$tools" && go build -trimpath -ldflags "$ldflags" -o "$bin/$2.partial" "$1")
    mv "$bin/$2.partial" "$bin/$2"
}

build ./fakecri fakecri
build k8s.io/kubernetes/cmd/kubelet kubelet
"$bin/kubelet" --version | grep -q "v$K8S_VERSION" || { echo "error: kubelet version" >&2; exit 1; }
echo "$bin"
