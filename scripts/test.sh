#!/usr/bin/env bash
# The whole test suite, as a newcomer and CI run it: provision the real control plane and the
# real datastore servers the integration tests need (cached after the first run), then run every
# test of the workspace with every feature on (windlass-x's RSA keys included).
#
# WINDLASS_K8S_VERSION=1.34.4 ./scripts/test.sh runs the suite on another Kubernetes release
# (built and cached beside the default one).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/provision-control-plane.sh
./scripts/provision-datastores.sh
cargo test --workspace --all-features --locked
