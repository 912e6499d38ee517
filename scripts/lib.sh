# Shared by the set-up scripts in scripts/: sourced, never run on its own.
#
# Two kinds of spurious failure are ruled out here once, instead of in every script:
#
# * SIGPIPE: `"$bin/etcd" --version | grep -q 3.7.3` under `set -o pipefail` fails whenever grep
#   exits at its first match before etcd has written the rest, because etcd then dies of SIGPIPE
#   and the pipeline reports its exit status. expect_version captures the whole output first and
#   matches it afterwards, so nothing is written into a closed pipe.
# * Races between two runs sharing one cache (two test sessions, or a test run and a person):
#   install_built writes a build into a file of its own (mktemp in the target folder) and renames
#   it into place; a rename is atomic, so a reader sees either no binary or a whole one, and two
#   concurrent builds never write into the same file.

# `set -e` holds inside $(...) too: a failed step in a function whose output is captured stops
# the script instead of going on with half a result.
shopt -s inherit_errexit

# The cache root outside the repository.
gpupool_cache() {
    echo "${GPUPOOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}"
}

# expect_version NAME EXPECTED COMMAND...: exit 1 unless COMMAND succeeds and prints EXPECTED.
expect_version() {
    local name=$1 expected=$2 output
    shift 2
    if ! output=$("$@" 2>&1); then
        echo "error: $name: \`$*\` failed: $output" >&2
        exit 1
    fi
    if [[ $output != *"$expected"* ]]; then
        echo "error: $name version: expected $expected, \`$*\` printed: $output" >&2
        exit 1
    fi
}

# partial_path TARGET: a fresh, unique file next to TARGET to build into (same file system, so
# the final rename is atomic). Removed again by the caller's `mv`, or left as `.TARGET.*` junk
# only when a build was interrupted.
partial_path() {
    mktemp "$(dirname "$1")/.$(basename "$1").XXXXXX"
}

# go_build_into TARGET MODULE_DIR GO_BUILD_ARGS...: build into a partial file, then rename it to
# TARGET. Skips the build when TARGET is already an executable.
go_build_into() {
    local target=$1 module=$2 partial
    shift 2
    if [ -x "$target" ]; then
        return
    fi
    echo "building $(basename "$target")" >&2
    partial=$(partial_path "$target")
    if ! (cd "$module" && go build -trimpath -o "$partial" "$@"); then
        rm -f "$partial"
        exit 1
    fi
    chmod 0755 "$partial"
    mv -f "$partial" "$target"
}

# publish_dir PARTIAL_DIR FINAL_DIR: rename a fully written folder into place. When another run
# got there first, its (equal) result is kept and ours is dropped.
publish_dir() {
    local partial=$1 final=$2
    if ! mv -T "$partial" "$final" 2>/dev/null; then
        [ -d "$final" ] || { echo "error: could not move $partial to $final" >&2; exit 1; }
        rm -rf "$partial"
    fi
}

# require_go: exit 2 unless Go >= 1.26 is on PATH (what every tools module here needs).
require_go() {
    local minor
    command -v go >/dev/null || { echo "error: Go >= 1.26 is needed to build $1" >&2; exit 2; }
    minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
    if [ "$minor" -lt 26 ]; then
        echo "error: Go >= 1.26 is needed to build $1, found $(go env GOVERSION)" >&2
        exit 2
    fi
}
