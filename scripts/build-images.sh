#!/usr/bin/env bash
# Build gpupool's container images without Docker or a registry, into a cache outside the
# repository, and print the folder that holds them (OCI archives and images.json):
#
#   gpupool         Debian root file system with python3 (mmdebstrap), the project's wheel and
#                   the runtime dependencies of the control plane, webhook and agent in a venv;
#                   entrypoint `gpupool` (one image, the command picks the role)
#   test-workload   busybox-static only: a shell and core tools for tests to look inside a
#                   container (/dev, env, /etc/ld.so.preload, mounts, cgroups, /dev/shm)
#   pause           catatonit -P: the pod sandbox image of the real node
#
# Names, packages and extras are defined once in deploy/images/images.env; the tag is the
# project's version. Each archive is cached under a hash of its inputs (that file, this script,
# and for gpupool pyproject.toml, README.md and src/), so an unchanged image is not rebuilt.
# Root file systems come from Debian's packages (mmdebstrap), packed as OCI images with umoci;
# both are installed from Debian when missing (needs root, as mmdebstrap does).
#
#   scripts/build-images.sh                     # build what changed; prints the folder
#   ctr -n k8s.io images import <folder>/gpupool.oci.tar    # into a containerd of your own
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
# shellcheck source=deploy/images/images.env
source "$root/deploy/images/images.env"

[ "$(id -u)" -eq 0 ] || { echo "error: building root file systems needs root (mmdebstrap)" >&2; exit 2; }
missing=()
for tool in mmdebstrap umoci; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing ${missing[*]} from Debian" >&2
    export DEBIAN_FRONTEND=noninteractive
    {
        apt-cache show "${missing[@]}" >/dev/null 2>&1 || apt-get -o DPkg::Lock::Timeout=600 update -q
        apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
    } >&2
fi

version=$(sed -nE 's/^version = "([^"]+)"$/\1/p' "$root/pyproject.toml")
[ -n "$version" ] || { echo "error: no version in pyproject.toml" >&2; exit 1; }
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || python=python3
cache="$(gpupool_cache)/images"
mkdir -p "$cache/archives"

recipe_hash=$(cat "$root/deploy/images/images.env" "$0" | sha256sum | cut -c1-16)
source_hash=$(cd "$root" && find pyproject.toml README.md src -type f ! -name '*.pyc' \
    ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)

# A minimal Debian root file system in $1 with the packages $2 (space separated); more
# mmdebstrap options may follow. Documentation, man pages and locales are left out, as in
# Docker's debian:*-slim images.
debian_rootfs() {
    local target=$1 packages=$2
    shift 2
    mmdebstrap --quiet --mode=root --format=directory --include="${packages// /,}" \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        "$@" "$DEBIAN_SUITE" "$target" \
        "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" \
        "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main" \
        "deb $DEBIAN_SECURITY_MIRROR $DEBIAN_SUITE-security main" >&2
}

rootfs_pause() {
    debian_rootfs "$1" "$PAUSE_PACKAGES" --variant=extract
}

rootfs_test_workload() {
    debian_rootfs "$1" "$TEST_WORKLOAD_PACKAGES" --variant=extract
    mkdir -p "$1/bin" "$1/tmp" "$1/etc"
    chmod 1777 "$1/tmp"
    chroot "$1" /bin/busybox --install -s /bin
}

# The wheel and every runtime dependency are fetched on this machine by its own pip (its index and
# certificates), as wheels only, then installed inside the root file system with no network.
rootfs_gpupool() {
    # chroot with a clean environment: this machine's PIP_* settings do not apply inside
    local wheels=$work/wheels wheel in_root='chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin'
    mkdir -p "$wheels"
    "$python" -m pip wheel --quiet --no-deps --wheel-dir "$wheels" "$root" >&2
    wheel=$(cd "$wheels" && echo gpupool-*.whl)
    "$python" -m pip download --quiet --only-binary=:all: --dest "$wheels" \
        "$wheels/$wheel[$GPUPOOL_EXTRAS]" >&2
    debian_rootfs "$1" "$GPUPOOL_PACKAGES" --variant=apt \
        --customize-hook="mkdir -p \"\$1/tmp/wheels\" && cp $wheels/*.whl \"\$1/tmp/wheels/\"" \
        --customize-hook="$in_root python3 -m venv $GPUPOOL_VENV" \
        --customize-hook="$in_root $GPUPOOL_VENV/bin/pip install --quiet --no-cache-dir \
--disable-pip-version-check --no-index --find-links=/tmp/wheels \"/tmp/wheels/$wheel[$GPUPOOL_EXTRAS]\"" \
        --customize-hook="chroot \"\$1\" groupadd --system --gid $GPUPOOL_UID gpupool" \
        --customize-hook="chroot \"\$1\" useradd --system --uid $GPUPOOL_UID --gid $GPUPOOL_UID \
--no-create-home --shell /usr/sbin/nologin gpupool" \
        --customize-hook='rm -rf "$1/tmp/wheels" "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*'
}

# pack ROOTFS ARCHIVE NAME UMOCI_CONFIG_ARGS...: an OCI archive holding one image, named NAME
# (the io.containerd.image.name annotation: what `ctr images import` calls it).
pack() {
    local rootfs=$1 archive=$2 name=$3 layout=$work/oci bundle=$work/bundle tag=${3##*:}
    shift 3
    rm -rf "$layout" "$bundle"
    umoci init --layout "$layout"
    umoci new --image "$layout:$tag"
    umoci unpack --image "$layout:$tag" "$bundle" >&2
    rmdir "$bundle/rootfs"
    mv "$rootfs" "$bundle/rootfs"
    umoci repack --image "$layout:$tag" "$bundle" >&2
    umoci config --image "$layout:$tag" --author=gpupool --os=linux --architecture=amd64 "$@"
    umoci gc --layout "$layout"
    python3 - "$layout/index.json" "$name" <<'PYEOF'
import json, sys
path, name = sys.argv[1], sys.argv[2]
index = json.load(open(path))
for manifest in index["manifests"]:
    manifest.setdefault("annotations", {})["io.containerd.image.name"] = name
json.dump(index, open(path, "w"))
PYEOF
    tar -C "$layout" -cf "$archive" .
    rm -rf "$layout" "$bundle"
}

# image ROLE HASH UMOCI_CONFIG_ARGS...: build the image of ROLE unless its archive is cached.
image() {
    local role=$1 hash=$2 name="$REGISTRY/$1:$version" archive partial
    shift 2
    archive="$cache/archives/$role-$version-$hash.oci.tar"
    if [ -f "$archive" ]; then
        echo "$archive"
        return
    fi
    echo "building $name" >&2
    work=$(mktemp -d "$cache/.work.XXXXXX")
    trap 'rm -rf "$work"' EXIT  # this runs in a $(...) subshell: its own trap
    "rootfs_${role//-/_}" "$work/rootfs"
    partial=$(partial_path "$archive")
    pack "$work/rootfs" "$partial" "$name" "$@"
    chmod 0644 "$partial"
    mv -f "$partial" "$archive"
    rm -rf "$work"
    echo "$archive"
}

# Keep the three newest sets; drop the others, and archives no set links to any more that are
# over an hour old (a concurrent run's fresh archive is not linked yet).
prune() {
    local old
    while read -r old; do
        rm -rf "$old"
    done < <(find "$cache" -mindepth 1 -maxdepth 1 -type d -name "$version-*" ! -name '*.partial.*' \
        -printf '%T@ %p\n' | sort -rn | tail -n +4 | cut -d' ' -f2-)
    find "$cache/archives" -name '*.oci.tar' -links 1 -mmin +60 -delete
}

pause=$(image pause "$recipe_hash" --clear=config.cmd \
    --config.entrypoint=/usr/bin/catatonit --config.entrypoint=-P)
workload=$(image test-workload "$recipe_hash" --config.env=PATH=/bin \
    --config.cmd=/bin/sh)
gpupool=$(image gpupool "$recipe_hash-$source_hash" \
    --config.env="PATH=$GPUPOOL_VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --config.env=PYTHONDONTWRITEBYTECODE=1 --config.env=PYTHONUNBUFFERED=1 \
    --config.user="$GPUPOOL_UID:$GPUPOOL_UID" --config.exposedports=9402/tcp \
    --config.entrypoint=gpupool --config.cmd=control-plane --config.cmd=--http-address=0.0.0.0:9402)

# The set: images.json and a hard link to each archive, in a folder named after all three.
set_hash=$(basename -a "$pause" "$workload" "$gpupool" | sha256sum | cut -c1-12)
final="$cache/$version-$set_hash"
if [ ! -f "$final/images.json" ]; then
    partial=$(mktemp -d "$final.partial.XXXXXX")
    for pair in "pause:$pause" "test-workload:$workload" "gpupool:$gpupool"; do
        ln "${pair#*:}" "$partial/${pair%%:*}.oci.tar"
    done
    python3 - "$partial/images.json" "$REGISTRY" "$version" <<'PYEOF'
import json, sys
path, registry, version = sys.argv[1:]
roles = ("gpupool", "test-workload", "pause")
images = [{"role": r, "name": f"{registry}/{r}:{version}", "archive": f"{r}.oci.tar"} for r in roles]
json.dump({"images": images}, open(path, "w"), indent=1)
PYEOF
    chmod 0755 "$partial"
    publish_dir "$partial" "$final"
    prune
fi
echo "$final"
