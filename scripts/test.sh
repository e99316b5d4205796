#!/usr/bin/env bash
# The whole test suite, as a newcomer and CI run it: provision the real control plane and the
# real datastore servers the integration tests need (cached after the first run), then run every
# test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/provision-control-plane.sh
./scripts/provision-datastores.sh
cargo test --workspace --locked
