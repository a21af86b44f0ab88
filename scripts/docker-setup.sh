#!/usr/bin/env bash
# Docker for the compose demo (compose/) and its test, on a Debian bookworm
# machine. Not part of `make setup`: `make test` never needs Docker.
#
#   scripts/docker-setup.sh install   apt: docker.io, docker-compose (1.29), chromium (--chromium)
#   scripts/docker-setup.sh start     start dockerd if none answers; prints its PID if this call started it
#   scripts/docker-setup.sh stop PID  stop the dockerd this script started (by its PID)
#   scripts/docker-setup.sh base      build debian:bookworm-slim locally if missing (no registry pull)
#   scripts/docker-setup.sh compose-v2   optional: build Compose v2 from source, install it as `docker compose`
#
# Idempotent: each step does nothing when its work is already done.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo

install() {
    local pkgs=(docker.io docker-compose iptables debootstrap)
    [ "${1:-}" = "--chromium" ] && pkgs+=(chromium fonts-dejavu-core)
    local missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "docker-setup: apt-get install ${missing[*]}" >&2
        $SUDO apt-get update -qq
        # RUNLEVEL=1: no service starts at install; `start` below runs dockerd by hand
        DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# dockerd adds iptables chains and rules, sets the FORWARD policy to DROP and
# leaves its docker0 bridge when it exits: `start` keeps the rules as they were,
# `stop` puts them back and removes the bridge, so the machine is left as found.
SAVED_RULES=/run/huntlb-dockerd.iptables

start() {
    if docker info >/dev/null 2>&1; then return 0; fi
    local log=${HUNTLB_DOCKERD_LOG:-/tmp/huntlb-dockerd.log}
    $SUDO sh -c "iptables-save > $SAVED_RULES"
    # overlay2 where the kernel allows it (fast), else vfs (always works, slower builds)
    for driver in overlay2 vfs; do
        $SUDO dockerd --storage-driver "$driver" --pidfile /run/huntlb-dockerd.pid >"$log" 2>&1 &
        local pid=$!
        for _ in $(seq 1 60); do
            if docker info >/dev/null 2>&1; then echo "$pid"; return 0; fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        echo "docker-setup: dockerd with $driver did not come up (log: $log)" >&2
    done
    return 1
}

stop() {
    local pid=${1:?usage: stop PID}
    if kill "$pid" 2>/dev/null; then
        # dockerd stops its containerd and exits; wait at most 20 s
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    if [ -f "$SAVED_RULES" ]; then
        $SUDO sh -c "iptables-restore < $SAVED_RULES" && $SUDO rm -f "$SAVED_RULES"
    fi
    $SUDO ip link delete docker0 2>/dev/null || true
}

base() {
    if docker image inspect debian:bookworm-slim >/dev/null 2>&1; then return 0; fi
    echo "docker-setup: building debian:bookworm-slim with debootstrap (about a minute)" >&2
    local root
    root=$(mktemp -d /tmp/huntlb-bookworm.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$root'" RETURN
    $SUDO debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
    cat >"$root/etc/apt/sources.list" <<'SRC'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SRC
    # as the official slim image: no apt caches, lists, docs or locales
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
           "$root"/usr/share/man/* "$root"/usr/share/locale/*
    printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' \
        >"$root/etc/dpkg/dpkg.cfg.d/slim"
    tar -C "$root" -c . | docker import --change 'CMD ["bash"]' - debian:bookworm-slim >/dev/null
}

# Compose v2 beside Debian's docker-compose 1.29, to run the demo and its test
# with both (tests/test_compose.py takes `docker compose` when it answers;
# HUNTLB_COMPOSE=v1|v2 picks one). bookworm has no Compose v2 package and this
# project takes nothing from Docker's own apt repository or release downloads,
# so it is built from the Go module proxy with Go 1.24 or later. `go install ...@version`
# refuses the module (its go.mod has exclude directives): download it, build
# ./cmd in it as its Makefile does. Measured on 2 cores: 2 min 19 s and 2 min 36 s
# (v2.40.3, downloads included, 1 GB peak memory; a 77 MB binary). Not part of
# `install` nor of .ci/run: too slow for CI.
COMPOSE_V2_VERSION=${HUNTLB_COMPOSE_V2_VERSION:-v2.40.3}
COMPOSE_V2_PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose

compose_v2() {
    if docker compose version >/dev/null 2>&1; then return 0; fi
    local go
    go=$(command -v go || echo /usr/local/go/bin/go)
    [ -x "$go" ] || { echo "docker-setup: compose-v2 needs Go 1.24 or later (none found)" >&2; return 1; }
    local work
    work=$(mktemp -d /tmp/huntlb-compose-v2.XXXXXX)
    # removed on success or failure (the module cache is read-only: made writable first)
    # shellcheck disable=SC2064
    trap "chmod -R u+w '$work' 2>/dev/null; rm -rf '$work'" EXIT
    echo "docker-setup: building Compose $COMPOSE_V2_VERSION from the Go module proxy (several minutes)" >&2
    (
        # caches of its own, removed at the end: nothing is left in ~/go
        export GOMODCACHE=$work/mod GOCACHE=$work/cache GOFLAGS= GOTOOLCHAIN=local CGO_ENABLED=0
        cd "$work"
        dir=$("$go" mod download -json "github.com/docker/compose/v2@$COMPOSE_V2_VERSION" |
              sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
        [ -n "$dir" ] || { echo "docker-setup: go mod download gave no module directory" >&2; exit 1; }
        cp -r "$dir" src && chmod -R u+w src && cd src
        # as its Makefile's `build` (no git here, so the version is given)
        "$go" build -trimpath -o "$work/docker-compose" \
            -ldflags "-w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_V2_VERSION" ./cmd
    )
    # /usr/bin/install: `install` alone is this script's function
    $SUDO /usr/bin/install -D -m 0755 "$work/docker-compose" "$COMPOSE_V2_PLUGIN"
    docker compose version
}

cmd=${1:-}; shift || true
case "$cmd" in
    install|start|stop|base) "$cmd" "$@" ;;
    compose-v2) compose_v2 ;;
    *) sed -n '2,11p' "$0" >&2; exit 2 ;;
esac
