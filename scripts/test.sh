#!/usr/bin/env bash
# The whole test suite, as a newcomer and CI run it: provision the real control plane and the
# real datastore servers the integration tests need (cached after the first run), then run every
# test of the workspace with every feature on (windlass-x's RSA keys included). Each step's time
# is printed, so a cold run shows where its time goes.
#
# WINDLASS_K8S_VERSION=1.34.4 ./scripts/test.sh runs the suite on another Kubernetes release
# (built and cached beside the default one).
set -euo pipefail
cd "$(dirname "$0")/.."

START=$(date +%s)
step() {
    local name=$1 began
    shift
    began=$(date +%s)
    "$@"
    printf 'test.sh: %s took %ss (%ss in all)\n' "$name" "$(( $(date +%s) - began ))" \
        "$(( $(date +%s) - START ))" >&2
}

step "the control plane" ./scripts/provision-control-plane.sh
step "the datastore servers" ./scripts/provision-datastores.sh
step "compiling the tests" cargo test --workspace --all-features --locked --no-run
step "running the tests" cargo test --workspace --all-features --locked
