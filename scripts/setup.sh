#!/usr/bin/env bash
# Set up a development environment: a venv with pytest-dispatch and its extras, and
# Mesa's lavapipe (a CPU Vulkan driver) when no Vulkan adapter is found, and Debian's Chromium (for
# the gpu_page fixture and examples/browser) when no Chromium or Chrome is found.
# Does nothing when it already ran for this pyproject.toml (a stamp file in the venv).
# What it installs with sudo apt-get (only when missing): python3-venv, mesa-vulkan-drivers, chromium.
# apt-get waits up to 5 minutes for the package manager's lock (unattended upgrades hold it on a
# fresh machine), then fails with apt's own message.
#
#   ./scripts/setup.sh          (make setup, make demo and make test run it)
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 0
fi
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
EXTRAS=dawn,plot,xdist,test,browser,deno,firefox
STAMP="$VENV/.pytest-dispatch-setup"
# What the installed environment depends on: the package's metadata and the extras chosen.
wanted_stamp="$( (cat pyproject.toml scripts/setup.sh package-lock.json; echo "extras=$EXTRAS") | sha256sum | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted_stamp" ]; then
    echo "setup: $VENV is up to date (delete $STAMP to redo it)"
    exit 0
fi
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then  # Mesa warns without one: a private one, removed at exit
    XDG_RUNTIME_DIR=$(mktemp -d)
    trap 'rm -rf "$XDG_RUNTIME_DIR"' EXIT
    export XDG_RUNTIME_DIR
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
APT_LOCK_TIMEOUT_S=300
apt_updated=""
apt_get() {
    $SUDO apt-get -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT_S" "$@"
}
apt_install() {
    [ -n "$apt_updated" ] || { apt_get update -qq; apt_updated=1; }
    DEBIAN_FRONTEND=noninteractive apt_get install -y -qq "$@" >/dev/null
}

if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        command -v apt-get >/dev/null || { echo "setup: '$PYTHON -m venv' failed; install Python's venv module" >&2; exit 1; }
        echo "setup: installing python3-venv"
        rm -rf "$VENV"
        apt_install python3-venv
        "$PYTHON" -m venv "$VENV"
    fi
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"

has_adapter() {
    "$VENV/bin/python" - <<'PY' 2>/dev/null
import sys
import wgpu
adapters = [a for a in wgpu.gpu.enumerate_adapters_sync() if a.info["backend_type"] == "Vulkan"]
sys.exit(0 if adapters else 1)
PY
}

if ! has_adapter; then
    if command -v apt-get >/dev/null; then
        echo "setup: no Vulkan adapter found; installing Mesa's lavapipe (mesa-vulkan-drivers)"
        apt_install mesa-vulkan-drivers
    else
        echo "setup: no Vulkan adapter and no apt-get: install a Vulkan driver (e.g. Mesa lavapipe) yourself" >&2
    fi
fi
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
    if command -v apt-get >/dev/null; then
        echo "setup: no Chromium found; installing Debian's chromium (page tests: docs/browser.md)"
        apt_install chromium
    else
        echo "setup: no Chromium and no apt-get: page tests skip until one is installed (or --gpu-browser PATH)" >&2
    fi
fi
# The script engines of gpu_script and `pytest-dispatch engines` (docs/engines.md): Deno from PyPI (the
# deno extra, above), and Node with the npm package webgpu, pinned by package-lock.json into ./node_modules
# (npm's own record of what it installed there is newer than the lock file until the lock file changes).
if ! command -v npm >/dev/null; then
    if command -v apt-get >/dev/null; then
        echo "setup: no npm found; installing Debian's nodejs and npm (gpu_script in Node)"
        apt_install nodejs npm
    else
        echo "setup: no Node.js and no apt-get: gpu_script's Node tests skip until Node.js and npm are installed" >&2
    fi
fi
if command -v npm >/dev/null && ! [ node_modules/.package-lock.json -nt package-lock.json ]; then
    npm ci --silent --no-audit --no-fund
fi
# Firefox ESR for `pytest-dispatch engines` (docs/engines.md; Playwright from the firefox extra, above)
if ! command -v firefox-esr >/dev/null && ! command -v firefox >/dev/null; then
    if command -v apt-get >/dev/null; then
        echo "setup: no Firefox found; installing Debian's firefox-esr (the engines table)"
        apt_install firefox-esr
    else
        echo "setup: no Firefox and no apt-get: the engines table leaves Firefox out" >&2
    fi
fi
"$VENV/bin/python" -c "import wgpu; print('setup: adapter', wgpu.gpu.request_adapter_sync().summary)"
echo "$wanted_stamp" > "$STAMP"
