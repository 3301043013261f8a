#!/usr/bin/env bash
# The node's soak (examples/ros_soak.rs): under the load benchmark's topics and proved queries,
# SIGKILLed at random moments and started again by its launcher, on a ROS 2 graph in a
# loopback-only network namespace; then every acknowledged message is looked for in the
# memory, and the memory audited. Release build.
#
#   bash scripts/soak.sh                            30 minutes, 100 kills
#   bash scripts/soak.sh --seconds 90 --kills 6     the short version CI runs (scripts/test.sh)
#   bash scripts/soak.sh --help                     every option
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
sion_install_node --release
cargo build --release --features ros --bin sion --example ros_soak
target="${CARGO_TARGET_DIR:-$PWD/target}/release"
exec bash scripts/isolated.sh "$target/examples/ros_soak" --sion "$target/sion" "$@"
