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
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
# shellcheck source=/dev/null
source "$root/tools/controlplane/versions.env"

require_go "the kubelet"
digest=$(cat "$tools"/go.mod "$tools"/go.sum "$tools"/fakecri/main.go | sha256sum | cut -c1-12)
bin="$(gpupool_cache)/kubelet/k8s-$K8S_VERSION-$digest/bin"
mkdir -p "$bin"

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} \
-X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"

go_build_into "$bin/fakecri" "$tools" -ldflags "$ldflags" ./fakecri
go_build_into "$bin/kubelet" "$tools" -ldflags "$ldflags" k8s.io/kubernetes/cmd/kubelet
expect_version kubelet "v$K8S_VERSION" "$bin/kubelet" --version
echo "$bin"
