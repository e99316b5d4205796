#!/usr/bin/env bash
# Lines of Rust source files, for comparing the size of operators (issue 9): the total, and the
# code lines — neither blank nor a `//` comment (`///` and `//!` docs included). Block comments
# are not recognised; rustfmt-formatted code without them is what this is meant for.
#
# Usage: scripts/count-lines.sh FILE...
#   e.g. scripts/count-lines.sh examples/greeting/tests/fixtures/kube_rs.rs
set -euo pipefail

[ $# -gt 0 ] || { echo "usage: $0 FILE..." >&2; exit 2; }
printf '%6s %6s  %s\n' total code file
for file in "$@"; do
    total=$(wc -l <"$file")
    code=$(grep -cvE '^[[:space:]]*(//.*)?$' "$file" || true)
    printf '%6d %6d  %s\n' "$total" "$code" "$file"
done
