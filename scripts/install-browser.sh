#!/usr/bin/env bash
# Install Debian's headless Chromium and its WebDriver for the dashboard's browser test, and print
# the chromedriver's path.
#
# The browser test (tests/browser/test_dashboard.py) drives a real Chromium with Selenium against
# a running gpupool server; Debian's packages are used instead of a browser that a test library
# downloads at run time, so the version comes from the distribution's security updates and the
# test needs no network of its own. Idempotent: an installed chromedriver is reused at once.
# Needs root (or sudo) the first time.
set -euo pipefail

find_driver() { command -v chromedriver || ls /usr/bin/chromedriver 2>/dev/null; }

if driver="$(find_driver)" && [[ -n "$driver" ]] && command -v chromium >/dev/null; then
    echo "$driver"
    exit 0
fi
command -v apt-get >/dev/null || { echo "install-browser: needs apt-get (Debian/Ubuntu)" >&2; exit 1; }
sudo=""
[[ "$(id -u)" -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
        chromium chromium-driver >&2; then
    echo "install-browser: refreshing the package lists (apt-get update)" >&2
    $sudo apt-get -o DPkg::Lock::Timeout=600 update >&2
    $sudo apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends \
        chromium chromium-driver >&2
fi
chromium --version >&2
find_driver
