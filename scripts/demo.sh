#!/usr/bin/env bash
# The main job on an embedded default: build sion (release) and run the demo, which records a
# warehouse robot's atoms durably, commits heads to the embedded ledger, writes and verifies
# proofs, shows the ledger refusing a forged history, and audits the log.
#
#   bash scripts/demo.sh [DATA_DIR]        (default: ./sion-demo, started afresh)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
data="${1:-sion-demo}"
cargo build --release --locked --bin sion
exec target/release/sion demo --data "$data" --fresh
