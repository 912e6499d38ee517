#!/usr/bin/env bash
# Put promtool (from Debian's `prometheus` package) into a cache outside the repo, without
# installing or starting the Prometheus service, and print its path.
#
# The .deb is fetched with `apt-get download` (no root needed for that step; `apt-get update`
# runs first when the package lists do not know `prometheus` yet) and only usr/bin/promtool is
# kept. An existing promtool is reused at once. GPUPOOL_CACHE_DIR moves the cache
# (default ~/.cache/gpupool).
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
bin_dir="$(gpupool_cache)/tools/bin"
promtool="$bin_dir/promtool"

if [[ -x "$promtool" ]] && "$promtool" --version >/dev/null 2>&1; then
    echo "$promtool"
    exit 0
fi

command -v apt-get >/dev/null || { echo "install-promtool: needs apt-get (Debian/Ubuntu)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get download prometheus >&2 2>"$work/download.log"; then
    echo "install-promtool: refreshing the package lists (apt-get update)" >&2
    apt-get update >&2
    apt-get download prometheus >&2
fi
deb="$(ls "$work"/prometheus_*.deb)"
dpkg-deb -x "$deb" "$work/root"
mkdir -p "$bin_dir"
partial=$(partial_path "$promtool")
install -m 0755 "$work/root/usr/bin/promtool" "$partial"
mv -f "$partial" "$promtool"
"$promtool" --version >&2
echo "$promtool"
