#!/usr/bin/env bash
# Kubernetes' own binaries for a real cluster here (docs/kubernetes.md), built
# from Go modules, cached: kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy and kubectl of k8s.io/kubernetes
# v1.34.4, with each staging module (k8s.io/api, client-go, ...) replaced by its
# published v0.34.4, as Kubernetes' own go.mod points them into its tree.
# Nothing is downloaded but Go modules; nothing is started.
#
#   scripts/k8s-build.sh          build what is missing into .cache/k8s/v1.34.4/bin
#   scripts/k8s-build.sh --list   the binaries and whether each is built
#
# Beside them, for the cluster of harness/k8scluster.py: etcd (the server
# module's own main), CoreDNS and go-containerregistry's crane (pushes to the
# cluster's registry), each from
# its own small module (they pin other versions of shared dependencies than
# Kubernetes does), into the same bin/.
#
# Niced and on one core (GOMAXPROCS=1, -p 1) so that it never starves other
# work on the machine: slow (measured per step in .cache/k8s/build.log), once.
# v1.35 and later need modules the Go proxy here does not serve.
set -euo pipefail
# the whole build at nice 15 (its go commands and their compilers inherit it)
if [ -z "${HUNTLB_K8S_NICED:-}" ]; then HUNTLB_K8S_NICED=1 exec nice -n 15 "$0" "$@"; fi
cd "$(dirname "$0")/.."
VERSION=${HUNTLB_K8S_VERSION:-v1.34.4}
STAGING=v0.${VERSION#v1.}                       # v1.34.4 -> v0.34.4
DIR=$PWD/.cache/k8s/$VERSION
BIN=$DIR/bin
LOG=$PWD/.cache/k8s/build.log
CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
GO=$(command -v go || echo /usr/local/go/bin/go)
export GOMAXPROCS=${GOMAXPROCS:-1} GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$BIN" "$DIR/mod"

version() { if [ "$1" = kubectl ]; then "$BIN/$1" version --client 2>/dev/null; else "$BIN/$1" --version 2>/dev/null; fi; }
# no pipe into grep -q: its early exit is SIGPIPE to `version`, a failure under pipefail
built() { [ -x "$BIN/$1" ] && [[ "$(version "$1")" == *"$VERSION"* ]]; }

# name -> "module@version package": the cluster's other programs
declare -A EXTRA=(
    [etcd]="go.etcd.io/etcd/server/v3@v3.6.4 go.etcd.io/etcd/server/v3"
    [coredns]="github.com/coredns/coredns@v1.15.0 github.com/coredns/coredns"
    [crane]="github.com/google/go-containerregistry@v0.20.6 github.com/google/go-containerregistry/cmd/crane"
)
EXTRAS=(etcd coredns crane)
extra_built() { [ -x "$BIN/$1" ] && [ -f "$BIN/$1.from" ] && [ "$(cat "$BIN/$1.from")" = "${EXTRA[$1]}" ]; }

if [ "${1:-}" = --list ]; then
    for b in "${EXTRAS[@]}"; do
        if extra_built "$b"; then echo "$b: built"; else echo "$b: missing"; fi
    done
    for b in "${CMDS[@]}" kubectl; do
        if built "$b"; then echo "$b: built"; else echo "$b: missing"; fi
    done
    exit 0
fi

step() {   # step NAME COMMAND...: run it, log its time
    local name=$1 t0=$SECONDS rc=0
    shift
    echo "== $(date -u +%FT%TZ) $name: start" >>"$LOG"
    "$@" >>"$LOG" 2>&1 || rc=$?
    echo "== $(date -u +%FT%TZ) $name: exit $rc after $((SECONDS - t0)) s" >>"$LOG"
    echo "k8s-build: $name: exit $rc after $((SECONDS - t0)) s"
    return "$rc"
}

# The build module: k8s.io/kubernetes as a dependency, each staging module its
# published version (Kubernetes' go.mod replaces them with ./staging paths,
# which mean nothing outside its tree); the commands as tools, so `go mod
# tidy` keeps every package they import.
module() {
    local gomod
    gomod=$("$GO" mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    [ -n "$gomod" ] || { echo "no go.mod for k8s.io/kubernetes@$VERSION" >&2; return 1; }
    local staging
    staging=$(sed -n 's#^[[:space:]]*\(replace[[:space:]]*\)\{0,1\}\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\2#p' "$gomod" | sort -u)
    [ -n "$staging" ] || { echo "no staging replaces in $gomod" >&2; return 1; }
    {
        echo "module huntlb.local/k8s-build"
        echo
        sed -n 's/^go \(.*\)$/go \1/p' "$gomod"
        echo
        echo "require k8s.io/kubernetes $VERSION"
        echo
        for m in $staging; do echo "replace $m => $m $STAGING"; done
        echo
        for c in "${CMDS[@]}" kubectl; do echo "tool k8s.io/kubernetes/cmd/$c"; done
    } >"$DIR/mod/go.mod"
    (cd "$DIR/mod" && "$GO" mod tidy)
}

# As Kubernetes' hack/lib/version.sh: the version both packages report.
LDFLAGS=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$VERSION" | cut -d. -f2)"
    LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
LDFLAGS+=" -s -w"

build() {
    (cd "$DIR/mod" && "$GO" build -p 1 -trimpath -ldflags "$LDFLAGS" -o "$BIN/$1" "k8s.io/kubernetes/cmd/$1")
}

echo "== $(date -u +%FT%TZ) k8s-build $VERSION (staging $STAGING), GOMAXPROCS=$GOMAXPROCS, $("$GO" version)" >>"$LOG"
if [ ! -s "$DIR/mod/go.sum" ]; then step "go mod tidy (k8s.io/kubernetes $VERSION, staging $STAGING)" module; fi
for c in "${CMDS[@]}" kubectl; do
    if built "$c"; then echo "k8s-build: $c: cached"; continue; fi
    step "go build $c" build "$c"
    version "$c" | sed -n 1p
done

# Each extra in a module of its own: require the module, build the package.
build_extra() {
    local name=$1 mv=${EXTRA[$1]%% *} pkg=${EXTRA[$1]#* } dir=$DIR/mod-$1
    mkdir -p "$dir"
    printf 'module huntlb.local/k8s-build-%s\n\ngo 1.24\n\nrequire %s %s\n\ntool %s\n' \
        "$name" "${mv%@*}" "${mv#*@}" "$pkg" >"$dir/go.mod"
    (cd "$dir" && "$GO" mod tidy && "$GO" build -p 1 -trimpath -ldflags "-s -w" -o "$BIN/$name" "$pkg")
    echo "${EXTRA[$name]}" >"$BIN/$name.from"
}
for e in "${EXTRAS[@]}"; do
    if extra_built "$e"; then echo "k8s-build: $e: cached"; continue; fi
    step "go build $e (${EXTRA[$e]%% *})" build_extra "$e"
done
