#!/usr/bin/env bash
# The README's promise on a genuinely fresh machine: a new Debian
# bookworm root (debootstrap --variant=minbase, plus sudo), the project copied
# in (git archive of HEAD: what a clone gets), the host's Rust toolchain
# mounted read-only, a normal user with sudo; as that user, the README's setup
# from nothing (make setup), make build, and one test per proxy (Envoy,
# HAProxy 2.6, HAProxy 3.0). Everything it mounts, starts and creates is
# removed on exit, pass or fail. About 2.5 minutes; .ci/run runs it.
#
#   scripts/fresh-machine-check.sh          the check
#   scripts/fresh-machine-check.sh --demo   `make demo` from nothing instead of
#                                           make setup and make build (its cold time)
#
# Needs root or sudo, debootstrap and git. The bookworm base is cached as a tar
# outside the repo (HUNTLB_FRESH_CACHE, default ~/.cache/huntlb).
set -euo pipefail

DEMO=0
case "${1:-}" in
    "") ;;
    --demo) DEMO=1 ;;
    *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac
REPO=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${HUNTLB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${HUNTLB_FRESH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/huntlb}
BASE_TAR=$CACHE/bookworm-minbase-sudo.tar
NEWUSER=newcomer
NEWUID=1000
SMOKE="tests/test_envoy.py::test_front_counts_refusals_in_envoys_own_stats tests/test_haproxy.py::test_runtime_api_adds_a_backend_live"
RUSTUP_SRC=${RUSTUP_HOME:-$HOME/.rustup}
CARGO_BIN_SRC=${CARGO_HOME:-$HOME/.cargo}/bin

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
say() { echo "fresh-machine: $*"; }

for tool in debootstrap git chroot; do
    PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null || { say "needs $tool (apt-get install $tool)"; exit 1; }
done
[ -x "$CARGO_BIN_SRC/cargo" ] && [ -d "$RUSTUP_SRC/toolchains" ] ||
    { say "needs the host's Rust toolchain from rustup at $CARGO_BIN_SRC and $RUSTUP_SRC"; exit 1; }

WORK=$(mktemp -d /var/tmp/huntlb-fresh.XXXXXX)
ROOT=$WORK/root
t_start=$SECONDS

# Stop what still runs in the root, unmount everything under it (deepest
# first), then delete it; rm stays on its file system, so a mount that would
# not go cannot take host files with it.
cleanup() {
    local rc=$? pids mnt i
    set +e
    # shellcheck disable=SC2016
    mapfile -t pids < <(as_root sh -c 'for p in /proc/[0-9]*; do [ "$(readlink "$p/root")" = "$1" ] && echo "${p#/proc/}"; done' _ "$ROOT")
    if ((${#pids[@]})); then
        say "stopping ${#pids[@]} processes left in the root"
        as_root kill -TERM "${pids[@]}" 2>/dev/null
        for i in 1 2 3 4 5; do
            as_root kill -0 "${pids[@]}" 2>/dev/null || break
            sleep 1
        done
        as_root kill -KILL "${pids[@]}" 2>/dev/null
    fi
    for i in 1 2 3; do
        mapfile -t mounts < <(awk -v r="$ROOT" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
        ((${#mounts[@]})) || break
        for mnt in "${mounts[@]}"; do
            as_root umount "$mnt" 2>/dev/null || as_root umount -l "$mnt"
        done
    done
    if awk -v r="$ROOT" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
        say "mounts left under $ROOT: not deleting it"
        rc=1
    else
        as_root rm -rf --one-file-system "$WORK"
    fi
    say "$( ((rc)) && echo FAILED || echo passed) in $((SECONDS - t_start)) s"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- a fresh bookworm ----------------------------------------------------------
t0=$SECONDS
if [ -s "$BASE_TAR" ]; then
    as_root mkdir "$ROOT"
    as_root tar -xpf "$BASE_TAR" -C "$ROOT"
    say "bookworm minbase root from $BASE_TAR ($((SECONDS - t0)) s)"
else
    as_root debootstrap --variant=minbase --include=sudo bookworm "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -20 "$WORK/debootstrap.log"; exit 1; }
    mkdir -p "$CACHE"
    as_root tar -cpf "$BASE_TAR.partial" -C "$ROOT" . && as_root mv "$BASE_TAR.partial" "$BASE_TAR"
    say "bookworm minbase root by debootstrap ($((SECONDS - t0)) s; cached at $BASE_TAR)"
fi

# This machine's network as any machine here has it: its resolver, and the
# local certificate authorities (apt's ca-certificates takes them in when
# setup installs it).
as_root cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$(uname -n)" |
    as_root tee "$ROOT/etc/hosts" >/dev/null
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    as_root mkdir -p "$ROOT/usr/local/share/ca-certificates"
    as_root cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi

as_root mount -t proc proc "$ROOT/proc"
as_root mount -t sysfs sys "$ROOT/sys"
as_root mount --bind /dev "$ROOT/dev"
as_root mount --bind /dev/pts "$ROOT/dev/pts"
as_root mount -t tmpfs -o mode=1777 shm "$ROOT/dev/shm"

# The host's Rust, read-only: rustup's toolchains and the cargo/rustup proxies.
ro_bind() {
    as_root mkdir -p "$2"
    as_root mount --bind "$1" "$2"
    as_root mount -o remount,bind,ro "$2"
}
ro_bind "$RUSTUP_SRC" "$ROOT/opt/rust/rustup"
ro_bind "$CARGO_BIN_SRC" "$ROOT/opt/rust/cargo-bin"

# A normal user with sudo (no password: nobody is there to type it).
as_root chroot "$ROOT" useradd --create-home --uid "$NEWUID" --shell /bin/bash --groups sudo "$NEWUSER"
echo "$NEWUSER ALL=(ALL:ALL) NOPASSWD: ALL" | as_root tee "$ROOT/etc/sudoers.d/$NEWUSER" >/dev/null
as_root chmod 0440 "$ROOT/etc/sudoers.d/$NEWUSER"

# The project as a clone has it.
as_root mkdir "$ROOT/home/$NEWUSER/huntlb"
git -C "$REPO" archive HEAD | as_root tar -x -C "$ROOT/home/$NEWUSER/huntlb"
as_root chown -R "$NEWUID:$NEWUID" "$ROOT/home/$NEWUSER/huntlb"

# --- as that user, the README's commands ----------------------------------------
# The machine's environment for certificates and pip (as this machine's own
# shells have it), the rustup toolchain on PATH as rustup's installer leaves it.
passenv=()
for v in $(compgen -e); do
    case $v in
        PIP_*|SSL_CERT_*|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|RUSTUP_AUTO_INSTALL) passenv+=("$v=${!v}") ;;
    esac
done
as_user() {
    as_root chroot "$ROOT" /usr/bin/env -i HOME="/home/$NEWUSER" USER="$NEWUSER" LOGNAME="$NEWUSER" LANG=C.UTF-8 \
        PATH="/opt/rust/cargo-bin:/usr/local/bin:/usr/bin:/bin" RUSTUP_HOME=/opt/rust/rustup "${passenv[@]}" \
        /usr/bin/setpriv --reuid="$NEWUID" --regid="$NEWUID" --init-groups \
        /bin/bash -c "cd ~/huntlb && $1" &
    # in the background, so a TERM or INT to this script cleans up at once
    # rather than after the step
    wait $!
}
timed() { # timed WHAT CMD: as the user, with its time
    local t=$SECONDS
    say "$1"
    as_user "$2"
    say "$1: ok ($((SECONDS - t)) s)"
}
# The README's prerequisites: make (and git, here replaced by the archive).
timed "sudo apt-get install make, as $NEWUSER" \
    "{ sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y make; } >/tmp/make.log 2>&1 || { tail -20 /tmp/make.log; exit 1; }"
if ((DEMO)); then
    timed "make demo, from nothing" "make demo"
else
    timed "make setup, from nothing" "make setup"
    timed "make build" "make build >/tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }"
fi
timed "one test per proxy: Envoy, HAProxy 2.6, HAProxy 3.0" "make test-integration TESTS='$SMOKE'"
