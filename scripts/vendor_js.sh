#!/usr/bin/env bash
# Vendor the dashboard's two small browser libraries from npm into the package, with their
# checksums and licences in VENDORED.md.
#
# The dashboard has no JS build step and must work with no network (no CDN): the minified files
# are committed under src/gpupool/api/static/vendor/ and shipped in the wheel. Re-run this script
# only to change a version; it takes each file from the package tarball `npm pack` downloads, so
# what is committed is byte for byte what npm serves for that exact version.
#
#   scripts/vendor_js.sh
set -euo pipefail

HTMX_VERSION=2.0.11
UPLOT_VERSION=1.6.32

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/src/gpupool/api/static/vendor"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

take() {  # take PACKAGE VERSION LICENSE FILE_IN_PACKAGE...
    local package=$1 version=$2 license=$3
    shift 3
    (cd "$work" && npm pack --silent "$package@$version" >/dev/null)
    local tarball
    tarball=$(ls "$work"/"${package//./-}"-"$version".tgz 2>/dev/null || ls "$work"/"$package"-"$version".tgz)
    mkdir -p "$work/$package"
    tar -xzf "$tarball" -C "$work/$package"
    for file in "$@"; do
        cp "$work/$package/package/$file" "$out/$(basename "$file")"
        echo "| $package | $version | $(basename "$file") | $(sha256sum "$out/$(basename "$file")" | cut -c1-64) | $license |" >>"$work/table"
    done
}

take htmx.org "$HTMX_VERSION" 0BSD dist/htmx.min.js
take uplot "$UPLOT_VERSION" MIT dist/uPlot.iife.min.js dist/uPlot.min.css

{
    echo "# Vendored browser libraries"
    echo
    echo "Written by scripts/vendor_js.sh from \`npm pack <name>@<version>\`; do not edit by hand."
    echo
    echo "| package | version | file | sha256 | licence |"
    echo "|---|---|---|---|---|"
    cat "$work/table"
} >"$out/VENDORED.md"
echo "vendored into $out" >&2
