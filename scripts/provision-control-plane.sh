#!/usr/bin/env bash
# Provision the real Kubernetes control plane that windlass-testenv starts for integration tests:
# etcd, kube-apiserver, kube-controller-manager and a matching kubectl, in one directory.
#
# Which Kubernetes: WINDLASS_K8S_VERSION (default below; windlass-testenv's
# PROVISIONED_KUBERNETES_VERSION names the same default, and a unit test keeps the two equal).
# A release the Go module proxy serves as k8s.io/kubernetes vX.Y.Z can be named, e.g.
# WINDLASS_K8S_VERSION=1.34.4 for the oldest minor windlass supports (older ones are not
# supported, and releases before 1.22 do not name the etcd server module this script builds).
#
# Where the binaries come from, in this order:
#   1. WINDLASS_K8S_ASSETS or KUBEBUILDER_ASSETS, if set: a directory that already holds the
#      binaries (e.g. setup-envtest's plus a kube-controller-manager). It is checked and used
#      as is; nothing is built.
#   2. The cache, ${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}/k8s-$VERSION/.
#      If it is complete, this script does nothing.
#   3. Otherwise they are built with the Go toolchain from the Go module proxy. k8s.io/kubernetes
#      cannot be `go install`ed: its go.mod replaces every staging module (k8s.io/api,
#      k8s.io/apiserver, ...) with a path inside its own repository, and a dependency's replace
#      directives do not apply. So the build happens in a small generated module that requires
#      k8s.io/kubernetes vX.Y.Z and replaces each staging module with its published v0.Y.Z. etcd
#      is built in the same module, at the go.etcd.io/etcd/server/v3 version that
#      k8s.io/kubernetes itself requires (the etcd its own integration tests run). The version
#      is stamped into the binaries (k8s.io/component-base/version), so discovery and
#      `--version` report it. A cold run takes about 6 minutes on an idle 2-core machine
#      (module download well under a minute, then the compile) and ~5 GB of disk while it
#      runs; the cache itself is ~300 MB.
#
# Nothing on the machine is changed but the cache: no root, no apt. The Go module and build
# caches of the build live in the build tree next to the cache (never in the repository, never
# in ~/go), so a run with an empty WINDLASS_CACHE_DIR is a truly cold one; the tree is removed
# after a successful build and kept, with its path printed, after a failed one. If the go.mod
# of the requested Kubernetes names a newer Go than the one installed, the go command fetches
# that toolchain from the module proxy (GOTOOLCHAIN=auto, Go's default).
#
# windlass-testenv looks for the binaries in the same places (crates/windlass-testenv/src/
# assets.rs), so keep the two in step.
set -euo pipefail

DEFAULT_K8S_VERSION=1.37.2
K8S_VERSION="${WINDLASS_K8S_VERSION:-$DEFAULT_K8S_VERSION}"
K8S_VERSION="${K8S_VERSION#v}"
BINARIES=(etcd kube-apiserver kube-controller-manager kubectl)
STAMP=.windlass-complete

START=$(date +%s)
log() { printf 'provision-control-plane [%4ss]: %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
die() {
    printf 'provision-control-plane: ERROR: %s\n' "$*" >&2
    printf 'provision-control-plane: the integration tests of windlass-testenv cannot run without these binaries.\n' >&2
    exit 1
}
elapsed() { echo "$(( $(date +%s) - START ))s"; }

[[ "$K8S_VERSION" =~ ^1\.([0-9]+)\.([0-9]+)$ ]] \
    || die "WINDLASS_K8S_VERSION=$K8S_VERSION is not a Kubernetes release like $DEFAULT_K8S_VERSION"
K8S_MINOR=${BASH_REMATCH[1]}
K8S_PATCH=${BASH_REMATCH[2]}
# The staging modules are published as v0.<minor>.<patch> of the same release.
STAGING_VERSION="v0.$K8S_MINOR.$K8S_PATCH"

if [ -z "${WINDLASS_CACHE_DIR:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ] && [ -z "${HOME:-}" ]; then
    die "HOME is not set; set WINDLASS_CACHE_DIR to choose the cache directory"
fi
CACHE_ROOT="${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}"
DEST="$CACHE_ROOT/k8s-$K8S_VERSION"
BUILD_DIR="$CACHE_ROOT/build-k8s-$K8S_VERSION"

# A directory given by the user: every binary must be in it or on PATH; never build over it.
check_assets_dir() {
    local var=$1 dir=$2 missing=() b
    [ -d "$dir" ] || die "$var=$dir is not a directory"
    for b in "${BINARIES[@]}"; do
        if [ -x "$dir/$b" ]; then
            log "  $b: $dir/$b"
        elif command -v "$b" >/dev/null 2>&1; then
            log "  $b: $(command -v "$b") (from PATH, not in $var)"
        else
            missing+=("$b")
        fi
    done
    if [ ${#missing[@]} -gt 0 ]; then
        die "$var=$dir lacks ${missing[*]} (neither in that directory nor on PATH); add them there, or unset $var to build v$K8S_VERSION into $DEST"
    fi
    log "using the binaries of $var=$dir; nothing to build"
}

for var in WINDLASS_K8S_ASSETS KUBEBUILDER_ASSETS; do
    if [ -n "${!var:-}" ]; then
        log "$var is set"
        check_assets_dir "$var" "${!var}"
        exit 0
    fi
done

cache_complete() {
    local b
    [ -f "$DEST/$STAMP" ] || return 1
    for b in "${BINARIES[@]}"; do [ -x "$DEST/$b" ] || return 1; done
}

if cache_complete; then
    log "found cached Kubernetes v$K8S_VERSION binaries in $DEST; nothing to do"
    exit 0
fi

mkdir -p "$CACHE_ROOT" || die "cannot create the cache directory $CACHE_ROOT"
# Two runs at once (two shells, a test and a terminal) must not build into each other.
exec 9>"$CACHE_ROOT/.provision-k8s-$K8S_VERSION.lock"
if ! flock -n 9; then
    log "another provisioning run holds $CACHE_ROOT/.provision-k8s-$K8S_VERSION.lock; waiting for it"
    flock 9
fi
if cache_complete; then
    log "another run finished provisioning $DEST meanwhile; nothing to do"
    exit 0
fi

command -v go >/dev/null 2>&1 \
    || die "the go command is not on PATH: building Kubernetes v$K8S_VERSION needs Go (from go.dev; Debian bookworm's golang is too old), or set WINDLASS_K8S_ASSETS to a directory with ${BINARIES[*]}"

log "no complete cache in $DEST: building Kubernetes v$K8S_VERSION from the Go module proxy"
log "(a cold build takes about 6 minutes on 2 idle cores and ~5 GB of disk; later runs reuse the cache)"

rm -rf "$BUILD_DIR"
mkdir -p "$BUILD_DIR/src" "$BUILD_DIR/out"
# The build's own module and build caches: nothing of an earlier run or of ~/go is reused, and
# -modcacherw lets the tree be removed afterwards.
export GOMODCACHE="$BUILD_DIR/gomodcache" GOCACHE="$BUILD_DIR/gocache"
export GOFLAGS="-modcacherw -buildvcs=false" CGO_ENABLED=0 GO111MODULE=on GOWORK=off
log "$(go version) (GOPROXY=$(go env GOPROXY))"

step_start=$(date +%s)
step_took() { echo "$(( $(date +%s) - step_start ))s"; }

log "downloading k8s.io/kubernetes v$K8S_VERSION to read its staging modules"
K8S_GOMOD=$(cd "$BUILD_DIR/src" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p') \
    || die "go mod download k8s.io/kubernetes@v$K8S_VERSION failed (is the Go module proxy reachable, and does it serve that version? try: go list -m -versions k8s.io/kubernetes)"
[ -f "$K8S_GOMOD" ] || die "go mod download k8s.io/kubernetes@v$K8S_VERSION gave no go.mod"
# Lines like `k8s.io/api => ./staging/src/k8s.io/api` inside its replace block.
mapfile -t STAGING < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// { print $1 }' "$K8S_GOMOD")
[ ${#STAGING[@]} -gt 0 ] || die "found no staging replacements in $K8S_GOMOD; its layout changed"
ETCD_VERSION=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$K8S_GOMOD")
[ -n "$ETCD_VERSION" ] || die "$K8S_GOMOD requires no go.etcd.io/etcd/server/v3; choose an etcd another way"

{
    echo "// Generated by windlass's scripts/provision-control-plane.sh: builds Kubernetes"
    echo "// v$K8S_VERSION and etcd $ETCD_VERSION from the Go module proxy."
    echo "module windlass.local/control-plane"
    echo
    echo "go 1.22"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes v$K8S_VERSION"
    echo "	go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    echo ")"
    echo
    echo "replace ("
    for module in "${STAGING[@]}"; do echo "	$module => $module $STAGING_VERSION"; done
    echo ")"
} > "$BUILD_DIR/src/go.mod"
# Main packages can be named in a tools file only; it is never compiled (build tag).
cat > "$BUILD_DIR/src/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF

log "resolving and downloading the modules (${#STAGING[@]} staging modules at $STAGING_VERSION, etcd $ETCD_VERSION)"
(cd "$BUILD_DIR/src" && go mod tidy) > "$BUILD_DIR/tidy.log" 2>&1 || {
    tail -n 20 "$BUILD_DIR/tidy.log" >&2
    die "go mod tidy failed after $(elapsed) (full log: $BUILD_DIR/tidy.log); a staging module may not be published at $STAGING_VERSION"
}
log "modules downloaded in $(step_took): $(du -sh "$GOMODCACHE" | cut -f1)"

step_start=$(date +%s)
BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS="-s -w"
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS+=" -X $package.gitVersion=v$K8S_VERSION -X $package.gitMajor=1"
    LDFLAGS+=" -X $package.gitMinor=$K8S_MINOR -X $package.buildDate=$BUILD_DATE"
done
log "compiling kube-apiserver, kube-controller-manager, kubectl and etcd in one go build"
# One invocation for all four, so the packages they share are compiled once and both cores
# stay busy.
(
    cd "$BUILD_DIR/src"
    go build -trimpath -ldflags "$LDFLAGS" -o "$BUILD_DIR/out/" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kubectl \
        go.etcd.io/etcd/server/v3
) > "$BUILD_DIR/build.log" 2>&1 || {
    tail -n 40 "$BUILD_DIR/build.log" >&2
    die "go build failed after $(elapsed); full log: $BUILD_DIR/build.log (the build tree is kept for inspection)"
}
# go names a binary after its package path without the major-version suffix: .../server/v3 → server.
mv "$BUILD_DIR/out/server" "$BUILD_DIR/out/etcd" || die "go build wrote no etcd binary (expected $BUILD_DIR/out/server)"
log "compiled in $(step_took)"

STAGE="$DEST.partial"
rm -rf "$STAGE"
mkdir -p "$STAGE"
for b in "${BINARIES[@]}"; do
    [ -x "$BUILD_DIR/out/$b" ] || die "go build succeeded but $BUILD_DIR/out/$b is missing"
    cp "$BUILD_DIR/out/$b" "$STAGE/$b"
done

log "checking the built binaries"
version_of() { "$@" 2>&1 || true; }
reported=$(version_of "$STAGE/kube-apiserver" --version)
[ "$reported" = "Kubernetes v$K8S_VERSION" ] || die "$STAGE/kube-apiserver --version says '$reported', not v$K8S_VERSION"
reported=$(version_of "$STAGE/kube-controller-manager" --version)
[ "$reported" = "Kubernetes v$K8S_VERSION" ] || die "$STAGE/kube-controller-manager --version says '$reported', not v$K8S_VERSION"
reported=$(version_of "$STAGE/kubectl" version --client)
[[ "$reported" == *"Client Version: v$K8S_VERSION"* ]] || die "$STAGE/kubectl version --client says '$reported'"
reported=$(version_of "$STAGE/etcd" --version)
[[ "$reported" == *"etcd Version: ${ETCD_VERSION#v}"* ]] || die "$STAGE/etcd --version says '$reported', not $ETCD_VERSION"

# Asked inside the module: a toolchain the go command switched to (GOTOOLCHAIN=auto) is the
# one that built the binaries.
GO_USED=$(cd "$BUILD_DIR/src" && go version)
{
    echo "kubernetes v$K8S_VERSION and etcd $ETCD_VERSION, built from the Go module proxy"
    echo "built $BUILD_DATE with $GO_USED"
} > "$STAGE/$STAMP"
rm -rf "$DEST"
mv "$STAGE" "$DEST"

cd /
# The module cache is writable (-modcacherw), but a toolchain the go command fetched may not be.
if ! { chmod -R u+w "$BUILD_DIR" && rm -rf "$BUILD_DIR"; }; then
    log "could not remove the build tree $BUILD_DIR; remove it by hand"
fi
log "done in $(elapsed): $(du -sh "$DEST" | cut -f1) of binaries in $DEST (build tree removed)"
