#!/usr/bin/env bash
# Make sure PostgreSQL's server binaries are here, and print the folder that holds them
# (/usr/lib/postgresql/<version>/bin).
#
# The store's tests start a throwaway PostgreSQL server in a temporary folder (initdb, then
# postgres on a free loopback port), so they need the server binaries, not a running service.
# When none are installed this installs Debian's `postgresql` package (apt-get update first if
# the package lists are empty), which needs root; run it again and it only prints the folder.
#
#   scripts/install-postgres.sh                       # prints e.g. /usr/lib/postgresql/15/bin
#   GPUPOOL_POSTGRES_BIN=$(scripts/install-postgres.sh) .venv/bin/pytest tests/store
set -euo pipefail

find_bin() {  # the newest /usr/lib/postgresql/<version>/bin holding initdb and postgres
    local dir
    while read -r dir; do
        if [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k4,4 -n -r)
    return 1
}

if bin=$(find_bin); then
    echo "$bin"
    exit 0
fi

if ! command -v apt-get >/dev/null; then
    echo "error: PostgreSQL server binaries not found and apt-get is missing;" \
        "install PostgreSQL and set GPUPOOL_POSTGRES_BIN to its bin folder" >&2
    exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "error: PostgreSQL server binaries not found; run as root (or: sudo apt-get install" \
        "postgresql) so this script can install Debian's postgresql package" >&2
    exit 2
fi

export DEBIAN_FRONTEND=noninteractive
{
    if ! apt-cache show postgresql >/dev/null 2>&1; then
        apt-get update -q
    fi
    apt-get install -y -q --no-install-recommends postgresql
} >&2

if ! bin=$(find_bin); then
    echo "error: installed Debian's postgresql package but found no server in /usr/lib/postgresql" >&2
    exit 2
fi
echo "$bin"
