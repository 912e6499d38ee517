#!/usr/bin/env bash
# Build helm from its Go module into a cache outside the repository, and print its path.
#
# helm renders deploy/helm/gpupool in the tests (tests/contract/test_helm_chart.py), which then
# dry-runs every manifest on the real kube-apiserver. Like the control plane
# (scripts/build-control-plane.sh), it is built from a pinned tools module (tools/helm) rather
# than downloaded as a release binary, so the version is in go.mod/go.sum and checked by Go's
# checksum database. The module lives outside tools/controlplane on purpose: the control plane's
# cache folder is named after the hash of tools/controlplane/*/go.*, and a helm bump must not
# rebuild kube-apiserver. The cache folder here is named after the hash of tools/helm/go.*.
#
#   scripts/build-helm.sh            # build if needed; prints the helm binary's path
#
# Measured on 2 shared cores (Go 1.26.8): several minutes cold, seconds when cached.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
module="$root/tools/helm"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

require_go helm

version=$(sed -nE 's/^\thelm\.sh\/helm\/v4 (v[^ ]+).*/\1/p' "$module/go.mod")
digest=$(cat "$module"/go.mod "$module"/go.sum | sha256sum | cut -c1-12)
bin="$(gpupool_cache)/helm/helm-$version-$digest/bin"
mkdir -p "$bin"

CGO_ENABLED=0 go_build_into "$bin/helm" "$module" \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" helm.sh/helm/v4/cmd/helm
expect_version helm "$version" "$bin/helm" version --short
echo "$bin/helm"
