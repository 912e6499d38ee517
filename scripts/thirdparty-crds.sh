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
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
require_go "the CRDs"

digest=$(cat "$module"/go.mod "$module"/go.sum | sha256sum | cut -c1-12)
out="$(gpupool_cache)/thirdparty-crds/$digest"
if [ -f "$out/.complete" ]; then
    echo "$out"
    exit 0
fi
# Everything is written into a folder of this run's own and renamed into place when complete.
mkdir -p "$(dirname "$out")"
partial=$(mktemp -d "$out.partial.XXXXXX")
trap 'rm -rf "$partial"' EXIT
echo "building controller-gen and generating cert-manager and Prometheus operator CRDs" >&2
(cd "$module" && CGO_ENABLED=0 go build -trimpath -o "$partial/controller-gen" \
    sigs.k8s.io/controller-tools/cmd/controller-gen)
(cd "$module" && "$partial/controller-gen" crd \
    paths=github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1 output:crd:dir="$partial/cm" \
    && "$partial/controller-gen" crd:allowDangerousTypes=true \
    paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 \
    output:crd:dir="$partial/prom")
for name in cm/cert-manager.io_certificates cm/cert-manager.io_issuers \
        prom/monitoring.coreos.com_servicemonitors; do
    cp "$partial/$name.yaml" "$partial/$(basename "$name").yaml"
done
rm -rf "$partial/cm" "$partial/prom"
touch "$partial/.complete"
chmod 0755 "$partial"
if [ -d "$out" ] && [ ! -f "$out/.complete" ]; then
    rm -rf "$out"  # left incomplete by an interrupted older version of this script
fi
publish_dir "$partial" "$out"
echo "$out"
