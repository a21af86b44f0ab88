#!/usr/bin/env bash
# Docker for the compose demo (compose/) and its test, on a Debian bookworm
# machine. Not part of `make setup`: `make test` never needs Docker.
#
#   scripts/docker-setup.sh install   apt: docker.io, docker-compose (1.29), chromium (--chromium)
#   scripts/docker-setup.sh start     start dockerd if none answers; prints its PID if this call started it
#   scripts/docker-setup.sh stop PID  stop the dockerd this script started (by its PID), undo what it changed
#   scripts/docker-setup.sh base      build debian:bookworm-slim locally if missing (no registry pull)
#   scripts/docker-setup.sh compose-v2   optional: build Compose v2 from source, install it as `docker compose`
#
# Idempotent: each step does nothing when its work is already done.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
PATH=$PATH:/usr/sbin:/sbin   # iptables, nft, dockerd: not on a normal user's PATH on Debian

install() {
    # nftables: `stop` deletes the iptables-nft tables dockerd created (iptables cannot)
    local pkgs=(docker.io docker-compose iptables nftables debootstrap)
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

# dockerd changes the machine and leaves it so when it exits: iptables chains
# and rules in the filter and nat tables (creating them if absent), the FORWARD
# policy set to DROP, IPv4 forwarding on (net.ipv4.ip_forward, which also sets
# every interface's conf/*/forwarding and turns conf/all/accept_redirects off),
# with IPv6 enabled its ip6tables and IPv6 forwarding too, and bridges (docker0,
# br-<id> per network). `start` records how they were; `stop` puts each back:
# saved tables restored whole, tables dockerd created deleted, the sysctls
# rewritten, its bridges removed, so the machine is left as it was found.
# Recorded in /run (gone at reboot, as is what dockerd changed), once: a second
# `start` after a dockerd that died keeps the first record.
SAVED=/run/huntlb-dockerd     # $SAVED.iptables, $SAVED.ip6tables: iptables-save before dockerd
SAVED_SYSCTL=$SAVED.sysctl    # /proc/sys path and value, in the order they are put back
SAVED_LINKS=$SAVED.links      # interface names before dockerd

# The sysctls dockerd changes. ip_forward (and conf/all/forwarding) rewrite every
# interface's forwarding and conf/all/accept_redirects, so those follow it.
sysctl_paths() {
    local f
    for f in /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv4/conf/*/forwarding /proc/sys/net/ipv4/conf/all/accept_redirects \
             /proc/sys/net/ipv6/conf/*/forwarding /proc/sys/net/bridge/bridge-nf-call-iptables /proc/sys/net/bridge/bridge-nf-call-ip6tables; do
        if [ -f "$f" ]; then echo "$f"; fi
    done
}

record_machine() {
    if [ -f "$SAVED_SYSCTL" ]; then return 0; fi   # recorded before a dockerd that is gone: that is how it was found
    local fam f
    for fam in iptables ip6tables; do
        command -v "$fam-save" >/dev/null || continue
        # none recorded (no such family here, IPv6 off): none restored
        $SUDO sh -c "$fam-save > $SAVED.$fam" || $SUDO rm -f "$SAVED.$fam"
    done
    ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | $SUDO tee "$SAVED_LINKS" >/dev/null
    for f in $(sysctl_paths); do echo "$f $(cat "$f")"; done | $SUDO tee "$SAVED_SYSCTL.tmp" >/dev/null
    $SUDO mv "$SAVED_SYSCTL.tmp" "$SAVED_SYSCTL"   # last: its presence says the record is whole
}

# Put one family's tables back as iptables-save found them: each saved table
# replaced whole by iptables-restore (its chains, rules and policies; chains
# dockerd added go), each table that was not there deleted (iptables-nft: an
# nftables table; iptables-legacy cannot unload one, so it is emptied: no rules,
# no chains of its own, ACCEPT policies, as an unloaded table behaves).
restore_tables() {
    local fam=$1 saved=$SAVED.$1 nftfam t c
    [ -f "$saved" ] || return 0
    if [ "$fam" = iptables ]; then nftfam=ip; else nftfam=ip6; fi
    if grep -q '^\*' "$saved"; then $SUDO sh -c "$fam-restore < $saved"; fi
    for t in $($SUDO "$fam-save" | sed -n 's/^\*//p'); do
        if grep -qx "\*$t" "$saved"; then continue; fi
        if "$fam" --version 2>/dev/null | grep -q nf_tables && command -v nft >/dev/null; then
            $SUDO nft delete table "$nftfam" "$t"
        else
            $SUDO "$fam" -t "$t" -F
            $SUDO "$fam" -t "$t" -X
            for c in $($SUDO "$fam" -t "$t" -S | awk '$1 == "-P" {print $2}'); do $SUDO "$fam" -t "$t" -P "$c" ACCEPT; done
        fi
    done
    $SUDO rm -f "$saved"
}

restore_machine() {
    local name path value
    # bridges dockerd made: docker0, and br-<12 hex> per network not there before
    for name in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}'); do
        case $name in
            docker0) ;;
            br-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f])
                if [ -f "$SAVED_LINKS" ] && grep -qx "$name" "$SAVED_LINKS"; then continue; fi ;;
            *) continue ;;
        esac
        $SUDO ip link delete "$name" 2>/dev/null || true
    done
    $SUDO rm -f "$SAVED_LINKS"
    restore_tables iptables
    restore_tables ip6tables
    if [ -f "$SAVED_SYSCTL" ]; then
        # in the order recorded: ip_forward first, as writing it rewrites the others
        while read -r path value; do
            if [ -f "$path" ] && [ "$(cat "$path")" != "$value" ]; then echo "$value" | $SUDO tee "$path" >/dev/null; fi
        done <"$SAVED_SYSCTL"
        $SUDO rm -f "$SAVED_SYSCTL"
    fi
    return 0
}

start() {
    if docker info >/dev/null 2>&1; then return 0; fi
    local log=${HUNTLB_DOCKERD_LOG:-/tmp/huntlb-dockerd.log}
    record_machine
    # overlay2 where the kernel allows it (fast), else vfs (always works, slower builds)
    for driver in overlay2 vfs; do
        # a session of its own: a caller killed with its process group (a start
        # killed midway, ^C in make) leaves dockerd and its containers to
        # whoever cleans up, who stops it by this PID
        $SUDO setsid dockerd --storage-driver "$driver" --pidfile /run/huntlb-dockerd.pid >"$log" 2>&1 &
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
    restore_machine   # no dockerd to stop: undo what the tries changed
    return 1
}

stop() {
    local pid=${1:?usage: stop PID}
    if kill "$pid" 2>/dev/null; then
        # dockerd stops its containerd and exits; wait at most 20 s
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    restore_machine
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
