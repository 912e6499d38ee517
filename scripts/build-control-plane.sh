#!/usr/bin/env bash
# Build kube-apiserver, kube-scheduler, kube-controller-manager, etcd and kwok from Go modules into a cache outside the
# repository, and print the folder that holds them.
#
# Each binary comes from its own tools module under tools/controlplane/ (k8s.io/kubernetes needs
# a replace for every staging module; etcd and kwok pin their own client libraries, so they must
# not share a module with it). The cache folder is named after the versions in
# tools/controlplane/versions.env and the hash of the tools modules, so a version change builds
# into a new folder and an unchanged one is reused as it is.
#
#   scripts/build-control-plane.sh            # build if needed; prints the bin folder
#   GPUPOOL_CACHE_DIR=/somewhere scripts/build-control-plane.sh
#
# Measured on 2 cores (Go 1.26.8, cold caches): about 10 minutes in all (kube-apiserver 5:48,
# peak RSS 2.4 GB); under a minute when only the Go build cache is warm.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/tools/controlplane"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
# shellcheck source=/dev/null
source "$tools/versions.env"

require_go "the control plane"

digest=$(cat "$tools"/versions.env "$tools"/*/go.mod "$tools"/*/go.sum | sha256sum | cut -c1-12)
bin="$(gpupool_cache)/controlplane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-$digest/bin"
mkdir -p "$bin"

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} \
-X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) \
-X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"

build() {  # build MODULE_DIR PACKAGE NAME LDFLAGS
    CGO_ENABLED=0 go_build_into "$bin/$3" "$tools/$1" -ldflags "$4" "$2"
}

build k8s k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$k8s_ldflags"
build k8s k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$k8s_ldflags"
build k8s k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$k8s_ldflags"
build etcd go.etcd.io/etcd/server/v3 etcd "-s -w"
build kwok sigs.k8s.io/kwok/cmd/kwok kwok "-s -w"

expect_version kube-apiserver "v$K8S_VERSION" "$bin/kube-apiserver" --version
expect_version kube-controller-manager "v$K8S_VERSION" "$bin/kube-controller-manager" --version
expect_version etcd "$ETCD_VERSION" "$bin/etcd" --version
expect_version kwok "v$KWOK_VERSION" "$bin/kwok" --version
echo "$bin"
