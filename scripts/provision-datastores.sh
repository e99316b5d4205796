#!/usr/bin/env bash
# Provision the real datastore servers that windlass-x's tests start: PostgreSQL 15, Redis
# (with TLS) and an S3-compatible server (moto), in one cache directory outside the repository.
#
# Where they come from:
#   - PostgreSQL: Debian bookworm's postgresql-15 package, and Redis: Debian's redis-server and
#     redis-tools packages (Debian builds Redis with TLS). Each is fetched with `apt-get
#     download` and unpacked with `dpkg-deb -x` -- not installed, because installing them would
#     start (and enable) a system service. Shared libraries they need that the machine lacks
#     (e.g. libjemalloc2 and liblzf1 for Redis) are unpacked beside them, and the binaries run
#     through small wrapper scripts that set LD_LIBRARY_PATH.
#   - S3: moto's server mode (moto from PyPI with Flask, pinned below) in a Python venv. moto is
#     the S3 server among the registries this project may use that checks SigV4 signatures
#     against access keys (with its IAM authentication switched on), runs from a venv without
#     a system service, and installs in well under a minute; MinIO and Ceph's radosgw are in
#     none of them, and s3rver (npm) accepts only one fixed key pair.
#
# The cache: ${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}/datastores/
#     postgres-15/bin/{initdb,postgres}   wrappers around the unpacked binaries
#     redis/bin/redis-server              a wrapper around the unpacked binary
#     moto/bin/python                     the venv's interpreter (`python -m moto.server`)
# Each directory is complete once it holds a .windlass-complete stamp; a complete one is left
# alone, so a second run takes about a second. The Rust harness of windlass-x
# (crates/windlass-x/tests/support/) looks in the same places: keep the two in step.
#
# What it changes on the machine, only when needed (then it needs root or password-less sudo):
# `apt-get update` when a download finds the package lists stale, and `apt-get install
# python3-venv` when the Python lacks the venv module (Debian's python3 without python3-venv).
set -euo pipefail

PG_MAJOR=15
MOTO_VERSION=5.2.5
# moto's S3 and IAM backends and its HTTP server: `moto[server]` would add every other AWS
# service's dependencies (twice the size, twice the install time) for nothing.
MOTO_PACKAGES=("moto[s3]==$MOTO_VERSION" "flask==3.1.3" "flask-cors==6.0.5")
if [ -z "${WINDLASS_CACHE_DIR:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ] && [ -z "${HOME:-}" ]; then
    echo "provision-datastores: ERROR: HOME is not set; set WINDLASS_CACHE_DIR to choose the cache directory" >&2
    exit 1
fi
CACHE_ROOT="${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}"
DEST="$CACHE_ROOT/datastores"
STAMP=.windlass-complete

START=$(date +%s)
log() { printf 'provision-datastores [%4ss]: %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
die() {
    printf 'provision-datastores: ERROR: %s\n' "$*" >&2
    printf 'provision-datastores: the real-server tests of windlass-x cannot run without these servers.\n' >&2
    exit 1
}

complete() { [ -f "$1/$STAMP" ] && grep -qxF "$2" "$1/$STAMP"; }

PG_DIR="$DEST/postgres-$PG_MAJOR"
REDIS_DIR="$DEST/redis"
MOTO_DIR="$DEST/moto"
PG_KEY="postgresql-$PG_MAJOR"
REDIS_KEY="redis-server"
MOTO_KEY="${MOTO_PACKAGES[*]}"
all_complete() {
    complete "$PG_DIR" "$PG_KEY" && complete "$REDIS_DIR" "$REDIS_KEY" && complete "$MOTO_DIR" "$MOTO_KEY"
}

if all_complete; then
    log "PostgreSQL $PG_MAJOR, Redis and moto $MOTO_VERSION are provisioned in $DEST; nothing to do"
    exit 0
fi

mkdir -p "$DEST" || die "cannot create the cache directory $DEST"
# Two runs at once (two test runs, a terminal) must not unpack into each other.
exec 9>"$DEST/.provision.lock"
if ! flock -n 9; then
    log "another provisioning run holds $DEST/.provision.lock; waiting for it"
    flock 9
fi

# shellcheck source-path=SCRIPTDIR source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"

installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]; }

# The library packages in the dependency closure of the given packages that this machine does
# not have installed. Only libraries: the servers run from the unpacked tree and need none of
# their packages' maintainer tooling (postgresql-common, adduser, ...).
missing_libraries() {
    local closure p library='^lib[^ <]*$'
    # Read whole, then filtered without pipes: under pipefail a grep that matches nothing (every
    # library present) would fail the caller's assignment and end the script silently.
    closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances "$@" 2>/dev/null) || return 1
    while IFS= read -r p; do
        [[ "$p" =~ $library && "$p" != *-perl ]] || continue
        installed "$p" || echo "$p"
    done < <(printf '%s\n' "$closure" | sort -u)
}

# Fetch packages into the current directory; when a fetch fails and the package lists were not
# refreshed in this run, they may be stale or missing (a container image that dropped them):
# refresh them and try once more. apt's download sandbox user cannot write to root's cache
# directory; the fallback to root is fine here.
fetch_debs() {
    local attempt
    for attempt in 1 2; do
        if apt-get download -qq "$@" 2>&1 | grep -v 'unsandboxed' >&2; [ "${PIPESTATUS[0]}" -eq 0 ]; then
            return 0
        fi
        if [ "$attempt" -ne 1 ] || [ "$APT_UPDATED" -ne 0 ]; then
            break
        fi
        log "the download failed; refreshing the package lists and trying again"
        apt_update
    done
    return 1
}

# Unpack `packages` plus the libraries they need that the machine lacks into $dir/root.
unpack_debs() {
    local dir=$1; shift
    local work="$dir/debs" lib_packages
    mkdir -p "$work" "$dir/root"
    # Without package lists (a container image that dropped them) apt-cache knows no
    # dependencies either: refresh them first.
    apt-cache show "$1" >/dev/null 2>&1 || apt_update
    lib_packages=$(missing_libraries "$@") || die "apt-cache depends $* failed"
    lib_packages=$(paste -sd ' ' - <<<"$lib_packages")
    log "fetching $* ${lib_packages:+(and the libraries this machine lacks: $lib_packages)}"
    # shellcheck disable=SC2086 # one word per package
    (cd "$work" && fetch_debs "$@" $lib_packages) \
        || die "apt-get download $* $lib_packages failed (is a Debian mirror reachable? try: apt-get download --print-uris $*)"
    local deb
    for deb in "$work"/*.deb; do
        dpkg-deb -x "$deb" "$dir/root" || die "dpkg-deb -x $deb failed"
    done
    rm -rf "$work"
}

# The unpacked library directories, for LD_LIBRARY_PATH (empty when no library was unpacked).
library_path() {
    local root=$1 d paths=()
    for d in "$root"/usr/lib/*-linux-gnu "$root"/lib/*-linux-gnu; do
        [ -d "$d" ] && paths+=("$d")
    done
    (IFS=:; echo "${paths[*]}")
}

# A wrapper in $dir/bin that runs the unpacked binary with its unpacked libraries.
write_wrapper() {
    local dir=$1 name=$2 target=$3 libs
    libs=$(library_path "$dir/root")
    mkdir -p "$dir/bin"
    {
        echo '#!/bin/sh'
        echo "# Written by scripts/provision-datastores.sh: runs the unpacked $name."
        if [ -n "$libs" ]; then
            echo "LD_LIBRARY_PATH='$libs'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
            echo 'export LD_LIBRARY_PATH'
        fi
        echo "exec '$target' \"\$@\""
    } > "$dir/bin/$name"
    chmod 755 "$dir/bin/$name"
}

# Every shared library the binary needs resolves (ldd runs it through the wrapper's path).
check_libraries() {
    local dir=$1 binary=$2 libs missing
    libs=$(library_path "$dir/root")
    missing=$(LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$binary" | grep 'not found' || true)
    [ -z "$missing" ] || die "$binary lacks shared libraries after unpacking their packages: $missing"
}

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: provisioning needs Debian bookworm"

# --- PostgreSQL ---------------------------------------------------------------------------
if complete "$PG_DIR" "$PG_KEY"; then
    log "PostgreSQL $PG_MAJOR: found in $PG_DIR"
else
    log "PostgreSQL $PG_MAJOR: unpacking Debian's $PG_KEY into $PG_DIR"
    rm -rf "$PG_DIR"
    unpack_debs "$PG_DIR" "$PG_KEY"
    # Debian's binaries find their share/ and lib/ directories relative to their own path, so
    # the unpacked tree works where it lies.
    PG_BIN="$PG_DIR/root/usr/lib/postgresql/$PG_MAJOR/bin"
    for b in initdb postgres; do
        [ -x "$PG_BIN/$b" ] || die "$PG_KEY holds no usr/lib/postgresql/$PG_MAJOR/bin/$b"
        check_libraries "$PG_DIR" "$PG_BIN/$b"
        write_wrapper "$PG_DIR" "$b" "$PG_BIN/$b"
    done
    version=$("$PG_DIR/bin/postgres" --version) || die "the unpacked postgres does not run"
    "$PG_DIR/bin/initdb" --version >/dev/null || die "the unpacked initdb does not run"
    printf '%s\n%s\n' "$PG_KEY" "$version" > "$PG_DIR/$STAMP"
    log "PostgreSQL: $version"
fi

# --- Redis --------------------------------------------------------------------------------
if complete "$REDIS_DIR" "$REDIS_KEY"; then
    log "Redis: found in $REDIS_DIR"
else
    log "Redis: unpacking Debian's redis-server and redis-tools into $REDIS_DIR"
    rm -rf "$REDIS_DIR"
    # redis-server's /usr/bin/redis-server is a link to redis-tools' redis-check-rdb.
    unpack_debs "$REDIS_DIR" redis-server redis-tools
    REDIS_BIN="$REDIS_DIR/root/usr/bin/redis-server"
    [ -x "$REDIS_BIN" ] || die "redis-server/redis-tools hold no runnable usr/bin/redis-server"
    check_libraries "$REDIS_DIR" "$REDIS_BIN"
    write_wrapper "$REDIS_DIR" redis-server "$REDIS_BIN"
    version=$("$REDIS_DIR/bin/redis-server" --version) || die "the unpacked redis-server does not run"
    # Debian links OpenSSL into the server (BUILD_TLS=yes); the TLS tests need it. ldd's output
    # is read whole: in `ldd | grep -q`, grep exits at its first match and ldd, still writing,
    # can die of SIGPIPE, which pipefail turns into a failure of a check that passed.
    linked=$(LD_LIBRARY_PATH=$(library_path "$REDIS_DIR/root") ldd "$REDIS_BIN") \
        || die "ldd $REDIS_BIN failed"
    [[ "$linked" == *libssl* ]] || die "the unpacked redis-server is not built with TLS (no libssl)"
    printf '%s\n%s\n' "$REDIS_KEY" "$version" > "$REDIS_DIR/$STAMP"
    log "Redis: $version"
fi

# --- moto (S3) ----------------------------------------------------------------------------
if complete "$MOTO_DIR" "$MOTO_KEY"; then
    log "moto: found in $MOTO_DIR"
else
    PYTHON=$(command -v python3 || true)
    [ -n "$PYTHON" ] || die "python3 not found: moto's S3 server needs Python 3 (apt-get install python3 python3-venv)"
    if ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
        need_root "installing python3-venv (the Python at $PYTHON lacks venv/ensurepip)"
        apt_update
        log "apt-get install python3-venv"
        "${SUDO[@]}" apt-get install -y -qq --no-install-recommends python3-venv >/dev/null \
            || die "apt-get install python3-venv failed"
    fi
    log "moto: installing $MOTO_KEY from PyPI into a venv at $MOTO_DIR"
    rm -rf "$MOTO_DIR"
    "$PYTHON" -m venv "$MOTO_DIR" || die "python3 -m venv $MOTO_DIR failed"
    "$MOTO_DIR/bin/python" -m pip install --disable-pip-version-check -q "${MOTO_PACKAGES[@]}" \
        || die "pip install $MOTO_KEY failed (is PyPI reachable?)"
    "$MOTO_DIR/bin/python" -c 'import moto.server, flask' \
        || die "moto's server mode does not import in $MOTO_DIR"
    printf '%s\n' "$MOTO_KEY" > "$MOTO_DIR/$STAMP"
    log "moto: $MOTO_VERSION"
fi

log "done: $(du -sh "$DEST" | cut -f1) in $DEST"
