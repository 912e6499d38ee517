#!/usr/bin/env bash
# Build a real node's container runtime into a cache outside the repository, and print the
# folder that holds it:
#
#   containerd, containerd-shim-runc-v2, ctr   github.com/containerd/containerd/v2 (CDI built in)
#   crictl                                     sigs.k8s.io/cri-tools (to inspect the CRI by hand)
#   loopback                                   github.com/containernetworking/plugins (the only
#                                              CNI plugin the node configures: no traffic leaves
#                                              loopback)
#
# and make sure runc is installed (Debian's package; installed with apt-get when missing, which
# needs root). Each comes from its own tools module under tools/node/ (pinned in go.mod/go.sum,
# checked by Go's checksum database). The cache folder is named after the versions and the hash
# of those modules and of the build tags, so a version bump builds into a new folder and an
# unchanged one is reused as it is. gpupool.devcluster.realnode and tests/e2e use the folder.
#
#   scripts/build-containerd.sh                  # build if needed; prints the bin folder
#   GPUPOOL_CACHE_DIR=/somewhere scripts/build-containerd.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/tools/node"
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
require_go containerd

# No btrfs, devmapper or zfs snapshotters (the node uses overlayfs or native); no docs for ctr.
TAGS="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
SHIM_TAGS="$TAGS no_grpc"

module_version() {  # module_version TOOLS_DIR MODULE_PATH: the version its go.mod requires
    local version
    version=$(sed -nE "s#^[[:space:]]*${2//./\\.} (v[^ ]+).*#\\1#p" "$tools/$1/go.mod")
    [ -n "$version" ] || { echo "error: $2 is not required in tools/node/$1/go.mod" >&2; exit 1; }
    echo "$version"
}
containerd_version=$(module_version containerd github.com/containerd/containerd/v2)
crictl_version=$(module_version cri-tools sigs.k8s.io/cri-tools)
cni_version=$(module_version cni github.com/containernetworking/plugins)

digest=$( (echo "$TAGS"; cat "$tools"/*/go.mod "$tools"/*/go.sum) | sha256sum | cut -c1-12)
bin="$(gpupool_cache)/node/containerd-$containerd_version-crictl-$crictl_version-cni-$cni_version-$digest/bin"
mkdir -p "$bin"

ctrd=github.com/containerd/containerd/v2
ctrd_ldflags="-s -w -X $ctrd/version.Version=$containerd_version -X $ctrd/version.Package=$ctrd"
export CGO_ENABLED=0
go_build_into "$bin/containerd" "$tools/containerd" -tags "$TAGS" -ldflags "$ctrd_ldflags" \
    "$ctrd/cmd/containerd"
go_build_into "$bin/containerd-shim-runc-v2" "$tools/containerd" -tags "$SHIM_TAGS" \
    -ldflags "$ctrd_ldflags" "$ctrd/cmd/containerd-shim-runc-v2"
go_build_into "$bin/ctr" "$tools/containerd" -tags "$TAGS" -ldflags "$ctrd_ldflags" "$ctrd/cmd/ctr"
go_build_into "$bin/crictl" "$tools/cri-tools" \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version" \
    sigs.k8s.io/cri-tools/cmd/crictl
go_build_into "$bin/loopback" "$tools/cni" -ldflags "-s -w \
-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_version" \
    github.com/containernetworking/plugins/plugins/main/loopback

if ! command -v runc >/dev/null; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
        echo "error: runc is missing; install it (Debian: apt-get install runc) and rerun" >&2
        exit 2
    fi
    export DEBIAN_FRONTEND=noninteractive
    {
        if ! apt-cache show runc >/dev/null 2>&1; then
            apt-get -o DPkg::Lock::Timeout=600 update -q
        fi
        apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends runc
    } >&2
fi

expect_version containerd "$containerd_version" "$bin/containerd" --version
expect_version ctr "$containerd_version" "$bin/ctr" --version
expect_version crictl "$crictl_version" "$bin/crictl" --version
expect_version runc "runc version" runc --version
echo "$bin"
