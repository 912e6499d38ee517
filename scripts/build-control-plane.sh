#!/usr/bin/env bash
# Build kube-apiserver, kube-scheduler, etcd and kwok from Go modules into a cache outside the
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
# shellcheck source=/dev/null
source "$tools/versions.env"

command -v go >/dev/null || { echo "error: Go >= 1.26 is needed to build the control plane" >&2; exit 2; }
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "$go_minor" -lt 26 ]; then
    echo "error: Go >= 1.26 is needed, found $(go env GOVERSION)" >&2
    exit 2
fi

digest=$(cat "$tools"/versions.env "$tools"/*/go.mod "$tools"/*/go.sum | sha256sum | cut -c1-12)
cache="${GPUPOOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
bin="$cache/controlplane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-$digest/bin"
mkdir -p "$bin"

k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
-X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} \
-X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) \
-X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"

build() {  # build MODULE_DIR PACKAGE NAME LDFLAGS
    local module=$1 package=$2 name=$3 ldflags=$4
    if [ -x "$bin/$name" ]; then
        return
    fi
    echo "building $name ($package)" >&2
    (cd "$tools/$module" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
        -o "$bin/$name.partial" "$package")
    mv "$bin/$name.partial" "$bin/$name"
}

build k8s k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$k8s_ldflags"
build k8s k8s.io/kubernetes/cmd/kube-scheduler kube-scheduler "$k8s_ldflags"
build etcd go.etcd.io/etcd/server/v3 etcd "-s -w"
build kwok sigs.k8s.io/kwok/cmd/kwok kwok "-s -w"

"$bin/kube-apiserver" --version | grep -q "v$K8S_VERSION" || { echo "error: kube-apiserver version" >&2; exit 1; }
"$bin/etcd" --version | grep -q "$ETCD_VERSION" || { echo "error: etcd version" >&2; exit 1; }
"$bin/kwok" --version | grep -q "v$KWOK_VERSION" || { echo "error: kwok version" >&2; exit 1; }
echo "$bin"
