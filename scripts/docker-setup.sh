#!/usr/bin/env bash
# Docker for the compose demo (compose/) and its test, on a Debian bookworm
# machine. Not part of `make setup`: `make test` never needs Docker.
#
#   scripts/docker-setup.sh install   apt: docker.io, docker-compose (1.29), chromium (--chromium)
#   scripts/docker-setup.sh start     start dockerd if none answers; prints its PID if this call started it
#   scripts/docker-setup.sh stop PID  stop the dockerd this script started (by its PID)
#   scripts/docker-setup.sh base      build debian:bookworm-slim locally if missing (no registry pull)
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

cmd=${1:-}; shift || true
case "$cmd" in
    install|start|stop|base) "$cmd" "$@" ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
