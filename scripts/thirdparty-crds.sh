#!/usr/bin/env bash
# Generate the CustomResourceDefinitions of the two projects the Helm chart can use (cert-manager's
# Certificate and Issuer, the Prometheus operator's ServiceMonitor) into a cache outside the
# repository, and print the folder that holds them.
#
# The chart's server-side dry run (tests/integration/test_helm_dry_run.py) needs the API server to
# know these kinds. They are generated with controller-gen from the projects' own Go API types,
# pinned in tools/thirdparty-crds/go.mod and go.sum (checked by Go's checksum database), the way
# the projects generate them, instead of downloading release YAML. The cache folder is named after
# the hash of that module.
#
#   scripts/thirdparty-crds.sh        # build and generate if needed; prints the folder
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
module="$root/tools/thirdparty-crds"
command -v go >/dev/null || { echo "error: Go >= 1.26 is needed to generate the CRDs" >&2; exit 2; }

digest=$(cat "$module"/go.mod "$module"/go.sum | sha256sum | cut -c1-12)
cache="${GPUPOOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
out="$cache/thirdparty-crds/$digest"
if [ -f "$out/.complete" ]; then
    echo "$out"
    exit 0
fi
mkdir -p "$out"
echo "building controller-gen and generating cert-manager and Prometheus operator CRDs" >&2
(cd "$module" && CGO_ENABLED=0 go build -trimpath -o "$out/controller-gen.partial" \
    sigs.k8s.io/controller-tools/cmd/controller-gen)
mv "$out/controller-gen.partial" "$out/controller-gen"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$module" && "$out/controller-gen" crd \
    paths=github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1 output:crd:dir="$work/cm" \
    && "$out/controller-gen" crd:allowDangerousTypes=true \
    paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 \
    output:crd:dir="$work/prom")
for name in cm/cert-manager.io_certificates cm/cert-manager.io_issuers \
        prom/monitoring.coreos.com_servicemonitors; do
    cp "$work/$name.yaml" "$out/$(basename "$name").yaml"
done
touch "$out/.complete"
echo "$out"
