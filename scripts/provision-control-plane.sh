#!/usr/bin/env bash
# Provision the real Kubernetes control plane that windlass-testenv starts for integration tests:
# etcd, kube-apiserver, kube-controller-manager and a matching kubectl, in one directory.
#
# Where the binaries come from, in this order:
#   1. WINDLASS_K8S_ASSETS or KUBEBUILDER_ASSETS, if set: a directory that already holds the
#      binaries (e.g. a modern control plane from setup-envtest plus a kube-controller-manager).
#      It is checked and used as is; nothing is installed or built.
#   2. The cache, ${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}/k8s-1.20.2/.
#      If it is complete, this script does nothing (no apt, no build).
#   3. Otherwise they are built: Debian bookworm's `kubernetes` source package holds the upstream
#      v1.20.2 tree with vendor/, which builds with Debian's golang-1.19 in GOPATH mode once the
#      vendored modern-go/reflect2 v1.0.1 gets upstream's v1.0.2 fix for Go >= 1.18. etcd is
#      the binary of Debian's etcd-server package, fetched with `apt-get download` and unpacked
#      into the build tree with `dpkg-deb -x` -- not installed, because installing it would
#      start (and enable) a system etcd service on 127.0.0.1:2379. A cold run takes roughly
#      9 minutes on an idle 2-core machine (about 11 CPU-minutes; longer when other builds share
#      the cores) and ~2.5 GB of disk while it runs; the cache itself is ~260 MB.
#
# What it changes on the machine, only when needed (then it needs root or password-less sudo):
# it installs the build dependencies (golang-1.19-go dpkg-dev make patch rsync) if `dpkg -s`
# does not show them all installed, adds a deb-src twin of the Debian apt source if there is
# no deb-src entry, and runs `apt-get update` only for those two or when a download finds the
# package lists stale. With everything present it needs neither root nor apt-get update.
#
# The build tree lives next to the cache (never in the repository) and is removed after a
# successful build; on failure it is kept and its path printed. windlass-testenv looks for the
# binaries in the same places (crates/windlass-testenv/src/assets.rs), so keep the two in step.
set -euo pipefail

K8S_VERSION=1.20.2
GO_PACKAGE=golang-1.19-go
GO_BIN=/usr/lib/go-1.19/bin
if [ -z "${WINDLASS_CACHE_DIR:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ] && [ -z "${HOME:-}" ]; then
    echo "provision-control-plane: ERROR: HOME is not set; set WINDLASS_CACHE_DIR to choose the cache directory" >&2
    exit 1
fi
CACHE_ROOT="${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}"
DEST="$CACHE_ROOT/k8s-$K8S_VERSION"
BUILD_DIR="$CACHE_ROOT/build-k8s-$K8S_VERSION"
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

log "no complete cache in $DEST: building Kubernetes v$K8S_VERSION from Debian's source package"
log "(a cold build takes about 9 minutes on 2 idle cores and ~2.5 GB of disk; later runs reuse the cache)"

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: building needs Debian bookworm (or set WINDLASS_K8S_ASSETS)"

# Root (or password-less sudo) only for the steps that change the machine.
# shellcheck disable=SC2034 # used by lib/apt.sh
ROOT_HINT="or point WINDLASS_K8S_ASSETS at a directory with ${BINARIES[*]}"
# shellcheck source-path=SCRIPTDIR source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"

# `apt-get source` needs a deb-src entry; derive it from the configured deb entries so that a
# mirror configured on this machine is used for sources as well.
has_deb_src() {
    grep -rqsE '^[[:space:]]*deb-src[[:space:]]|^Types:.*deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null
}
if has_deb_src; then
    log "a deb-src entry is already configured"
elif [ -f /etc/apt/sources.list.d/debian.sources ]; then
    need_root "adding a deb-src entry to /etc/apt/sources.list.d"
    log "adding /etc/apt/sources.list.d/windlass-deb-src.sources (deb-src twin of debian.sources)"
    sed -e 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        | "${SUDO[@]}" tee /etc/apt/sources.list.d/windlass-deb-src.sources >/dev/null
    apt_update
elif grep -qsE '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list; then
    need_root "adding a deb-src entry to /etc/apt/sources.list.d"
    log "adding /etc/apt/sources.list.d/windlass-deb-src.list (deb-src twin of sources.list)"
    grep -E '^[[:space:]]*deb[[:space:]]' /etc/apt/sources.list | sed -E 's/^([[:space:]]*)deb /\1deb-src /' \
        | "${SUDO[@]}" tee /etc/apt/sources.list.d/windlass-deb-src.list >/dev/null
    apt_update
else
    die "no Debian apt source found to derive a deb-src entry from (looked at /etc/apt/sources.list.d/debian.sources and /etc/apt/sources.list)"
fi

# rsync: kube's hack/lib/golang.sh places the built binaries with it. No etcd-server here (see
# the top of this file).
PACKAGES=("$GO_PACKAGE" dpkg-dev make patch rsync)
missing_packages() {
    local p
    for p in "${PACKAGES[@]}"; do
        dpkg -s "$p" 2>/dev/null | grep -qx 'Status: install ok installed' || echo "$p"
    done
}
MISSING=$(missing_packages | paste -sd " " -)
if [ -z "$MISSING" ]; then
    log "build dependencies already installed (${PACKAGES[*]}); no apt-get install"
else
    need_root "installing the build dependencies ($MISSING)"
    apt_update
    log "apt-get install ${PACKAGES[*]}"
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null \
        || die "apt-get install ${PACKAGES[*]} failed"
fi
[ -x "$GO_BIN/go" ] || die "$GO_BIN/go missing although $GO_PACKAGE is installed"

# Runs a download; if it fails and the package lists were not refreshed in this run, they may be
# stale or missing (e.g. a container image that dropped them): refresh them and try once more.
download() {
    "$@" && return 0
    [ "$APT_UPDATED" -eq 0 ] || return 1
    log "the download failed; refreshing the package lists and trying again"
    apt_update
    "$@"
}
# apt's download sandbox user cannot write to root's cache dir; the fallback to root is fine here.
fetch_etcd_deb() {
    apt-get download -qq etcd-server 2>&1 | grep -v 'unsandboxed' >&2 || true
    ls etcd-server_*.deb >/dev/null 2>&1
}
fetch_kubernetes_source() {
    apt-get source --download-only -qq kubernetes 2>&1 | grep -v 'unsandboxed' >&2 || true
    ls kubernetes_*.dsc >/dev/null 2>&1
}

rm -rf "$BUILD_DIR"
mkdir -p "$BUILD_DIR"
cd "$BUILD_DIR"
log "fetching etcd from Debian's etcd-server package (unpacked into $BUILD_DIR, not installed)"
download fetch_etcd_deb || die "apt-get download etcd-server fetched nothing (is a Debian mirror reachable? try: apt-get download --print-uris etcd-server)"
DEBS=(etcd-server_*.deb)
ETCD_DEB=${DEBS[0]}
dpkg-deb -x "$ETCD_DEB" "$BUILD_DIR/etcd-server" || die "dpkg-deb -x $ETCD_DEB failed"
ETCD="$BUILD_DIR/etcd-server/usr/bin/etcd"
[ -x "$ETCD" ] || die "$ETCD_DEB holds no usr/bin/etcd"
"$ETCD" --version >/dev/null || die "the etcd of $ETCD_DEB does not run"

log "fetching the kubernetes source package into $BUILD_DIR"
download fetch_kubernetes_source || die "apt-get source kubernetes downloaded no .dsc (is the deb-src entry working? try: apt-get source --print-uris kubernetes)"
DSCS=(kubernetes_*.dsc)
DSC=${DSCS[0]}
log "unpacking $DSC"
# apt already verified the files against the signed Release file; the .dsc signature check
# would only add a dependency on debian-keyring.
dpkg-source --no-check -x "$DSC" src >/dev/null || die "dpkg-source -x $DSC failed"
SRC="$BUILD_DIR/src"
PKG_VERSION=$(dpkg-parsechangelog -l "$SRC/debian/changelog" -S Version)
case "$PKG_VERSION" in
    *"$K8S_VERSION"*) log "source package version $PKG_VERSION carries upstream v$K8S_VERSION" ;;
    *) die "Debian's kubernetes source package is $PKG_VERSION, not upstream v$K8S_VERSION; update K8S_VERSION here and in windlass-testenv" ;;
esac

REFLECT2="$SRC/vendor/github.com/modern-go/reflect2"
if [ -f "$REFLECT2/go_above_118.go" ]; then
    log "vendored reflect2 already has the Go >= 1.18 fix"
else
    log "patching vendored github.com/modern-go/reflect2 v1.0.1 with upstream's v1.0.2 fix (mapiterinit takes a caller-allocated hiter)"
    (cd "$SRC" && patch -p1 --forward --quiet) <<'PATCH' || die "patching reflect2 failed"
--- a/vendor/github.com/modern-go/reflect2/go_above_118.go
+++ b/vendor/github.com/modern-go/reflect2/go_above_118.go
@@ -0,0 +1,23 @@
+//+build go1.18
+
+package reflect2
+
+import (
+	"unsafe"
+)
+
+// m escapes into the return value, but the caller of mapiterinit
+// doesn't let the return value escape.
+//go:noescape
+//go:linkname mapiterinit reflect.mapiterinit
+func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)
+
+func (type2 *UnsafeMapType) UnsafeIterate(obj unsafe.Pointer) MapIterator {
+	var it hiter
+	mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj), &it)
+	return &UnsafeMapIterator{
+		hiter:      &it,
+		pKeyRType:  type2.pKeyRType,
+		pElemRType: type2.pElemRType,
+	}
+}
--- a/vendor/github.com/modern-go/reflect2/go_below_118.go
+++ b/vendor/github.com/modern-go/reflect2/go_below_118.go
@@ -0,0 +1,21 @@
+//+build !go1.18
+
+package reflect2
+
+import (
+	"unsafe"
+)
+
+// m escapes into the return value, but the caller of mapiterinit
+// doesn't let the return value escape.
+//go:noescape
+//go:linkname mapiterinit reflect.mapiterinit
+func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) (val *hiter)
+
+func (type2 *UnsafeMapType) UnsafeIterate(obj unsafe.Pointer) MapIterator {
+	return &UnsafeMapIterator{
+		hiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),
+		pKeyRType:  type2.pKeyRType,
+		pElemRType: type2.pElemRType,
+	}
+}
--- a/vendor/github.com/modern-go/reflect2/unsafe_link.go
+++ b/vendor/github.com/modern-go/reflect2/unsafe_link.go
@@ -25,12 +25,6 @@
 //go:noescape
 func mapaccess(rtype unsafe.Pointer, m unsafe.Pointer, key unsafe.Pointer) (val unsafe.Pointer)
 
-// m escapes into the return value, but the caller of mapiterinit
-// doesn't let the return value escape.
-//go:noescape
-//go:linkname mapiterinit reflect.mapiterinit
-func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) *hiter
-
 //go:noescape
 //go:linkname mapiternext reflect.mapiternext
 func mapiternext(it *hiter)
@@ -42,9 +36,21 @@
 // If you modify hiter, also change cmd/internal/gc/reflect.go to indicate
 // the layout of this structure.
 type hiter struct {
-	key   unsafe.Pointer // Must be in first position.  Write nil to indicate iteration end (see cmd/internal/gc/range.go).
-	value unsafe.Pointer // Must be in second position (see cmd/internal/gc/range.go).
-	// rest fields are ignored
+	key         unsafe.Pointer
+	value       unsafe.Pointer
+	t           unsafe.Pointer
+	h           unsafe.Pointer
+	buckets     unsafe.Pointer
+	bptr        unsafe.Pointer
+	overflow    *[]unsafe.Pointer
+	oldoverflow *[]unsafe.Pointer
+	startBucket uintptr
+	offset      uint8
+	wrapped     bool
+	B           uint8
+	i           uint8
+	bucket      uintptr
+	checkBucket uintptr
 }
 
 // add returns p+x.
--- a/vendor/github.com/modern-go/reflect2/unsafe_map.go
+++ b/vendor/github.com/modern-go/reflect2/unsafe_map.go
@@ -107,14 +107,6 @@
 	return type2.UnsafeIterate(objEFace.data)
 }
 
-func (type2 *UnsafeMapType) UnsafeIterate(obj unsafe.Pointer) MapIterator {
-	return &UnsafeMapIterator{
-		hiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),
-		pKeyRType:  type2.pKeyRType,
-		pElemRType: type2.pElemRType,
-	}
-}
-
 type UnsafeMapIterator struct {
 	*hiter
 	pKeyRType  unsafe.Pointer
PATCH
fi

log "building kube-apiserver, kube-controller-manager and kubectl (GOPATH mode, make WHAT=...)"
mkdir -p "$SRC/.go/src/k8s.io" "$BUILD_DIR/gocache"
ln -sfn ../../.. "$SRC/.go/src/k8s.io/kubernetes"
(
    cd "$SRC"
    export PATH="$GO_BIN:$PATH"
    export GOPATH="$SRC/.go" GOCACHE="$BUILD_DIR/gocache" GOFLAGS="" CGO_ENABLED=0
    # No .git in a source package: give the version explicitly, as Debian's own build does.
    export KUBE_GIT_VERSION="v$K8S_VERSION" KUBE_GIT_TREE_STATE=clean
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kubectl"
) > "$BUILD_DIR/build.log" 2>&1 || {
    tail -n 40 "$BUILD_DIR/build.log" >&2
    die "make failed after $(elapsed); full log: $BUILD_DIR/build.log (the build tree is kept for inspection)"
}

OUT="$SRC/_output/bin"
STAGE="$DEST.partial"
rm -rf "$STAGE"
mkdir -p "$STAGE"
for b in kube-apiserver kube-controller-manager kubectl; do
    [ -x "$OUT/$b" ] || die "make succeeded but $OUT/$b is missing"
    cp "$OUT/$b" "$STAGE/$b"
done
# A copy of etcd makes the cache a complete, self-contained asset directory.
cp "$ETCD" "$STAGE/etcd"

log "checking the built binaries"
"$STAGE/kube-apiserver" --version | grep -q "v$K8S_VERSION" || die "$STAGE/kube-apiserver --version does not report v$K8S_VERSION"
"$STAGE/kube-controller-manager" --version | grep -q "v$K8S_VERSION" || die "$STAGE/kube-controller-manager --version does not report v$K8S_VERSION"
"$STAGE/kubectl" version --client >/dev/null 2>&1 || die "$STAGE/kubectl does not run"
"$STAGE/etcd" --version >/dev/null || die "$STAGE/etcd does not run"

{
    echo "kubernetes v$K8S_VERSION from Debian source package kubernetes $PKG_VERSION"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $("$GO_BIN/go" version)"
    echo "etcd: $("$STAGE/etcd" --version | head -n1)"
} > "$STAGE/$STAMP"
rm -rf "$DEST"
mv "$STAGE" "$DEST"

cd /
rm -rf "$BUILD_DIR"
log "done in $(elapsed): $(du -sh "$DEST" | cut -f1) of binaries in $DEST (build tree removed)"
