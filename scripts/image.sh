#!/usr/bin/env bash
# make image: huntlb-agent as a small non-root image (packaging/image/Dockerfile),
# tagged huntlb/agent:<version> and huntlb/agent:dev, with no registry pull.
#   scripts/image.sh            build it (dockerd started for the build if none
#                               answers, and stopped after, as docker-setup.sh does)
#   HUNTLB_IMAGE=name scripts/image.sh   another name (e.g. registry.example.com/huntlb/agent)
# The binary is static (the musl target, whose C parts, ring's, musl-gcc
# compiles), so the image needs no libc: it is the binary, Debian's CA roots
# and a passwd for uid 65532.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NAME=${HUNTLB_IMAGE:-huntlb/agent}
TARGET=x86_64-unknown-linux-musl
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[ -n "$VERSION" ] || { echo "image: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
REVISION=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
    echo "image: rustup target add $TARGET" >&2
    rustup target add "$TARGET"
fi
if ! command -v musl-gcc >/dev/null; then
    echo "image: apt-get install musl-tools (musl-gcc, for ring's C)" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends musl-tools >/dev/null
fi
CC_x86_64_unknown_linux_musl=musl-gcc cargo build -q --release --target "$TARGET" -p huntlb-agent
bin=${CARGO_TARGET_DIR:-$ROOT/target}/$TARGET/release/huntlb-agent
# static: the image has no loader to find a libc with
if ! file "$bin" | grep -q "static"; then
    echo "image: $bin is not statically linked: $(file -b "$bin")" >&2; exit 1
fi

dockerd=""
cleanup() { if [ -n "$dockerd" ]; then ./scripts/docker-setup.sh stop "$dockerd"; fi; rm -rf "${ctx:-}"; }
trap cleanup EXIT
dockerd=$(./scripts/docker-setup.sh start)
./scripts/docker-setup.sh base

ctx=$(mktemp -d /tmp/huntlb-image.XXXXXX)
cp packaging/image/Dockerfile "$ctx/"
cp "$bin" "$ctx/huntlb-agent"
strip "$ctx/huntlb-agent"   # symbols: a third of the binary, no use in a pod
docker build -q --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
    -t "$NAME:$VERSION" -t "$NAME:dev" "$ctx" >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$NAME:$VERSION")
echo "image: $NAME:$VERSION ($NAME:dev), $((size / 1024)) KiB, revision $REVISION"
