#!/usr/bin/env bash
# Everything CI checks, in the order a failure is cheapest to find: formatting, lints, then
# every test suite (unit, RFC 9162 vectors, atoms, log, ledger, memory, command line, and the
# SIGKILL crash test that drives real processes).
#
#   bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
cargo fmt --all --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked
